#pragma once
// How every decoder prefills a prompt: the plain generation (generate.cpp), the speculative
// decoder and the batch decoder run the same chunks with the same inputs, defined here once.
#include <cstdint>
#include <span>
#include <vector>

namespace eaglevk::engine {

// One pass of a prefill: prompt rows [begin, begin + rows).
struct PrefillChunk {
  uint32_t begin = 0, rows = 0;
  bool last = false;         // holds the prompt's last row, whose logits decide the first token
  uint32_t logits_from = 0;  // the chunk's first row with logits: every row's with the argmax
                             // report, else the last chunk's last row only (rows: none)
  uint32_t draft_rows = 0;   // rows a draft catches up on: those whose next token is known
  uint32_t logits_rows() const { return rows - logits_from; }
};

// The chunks of prompt rows [from, n) in passes of at most max_rows (from < n).
std::vector<PrefillChunk> prefill_chunks(uint32_t n, uint32_t from, uint32_t max_rows, bool every_logits_row);

// Where a chunk's inputs go (host-visible int32 arrays, indexed by the chunk's row). The
// target reads each row's token and position; the draft's row at a position reads the token
// after it (EAGLE-3 pairs the target's state at p with the token at p + 1). With per-sequence
// cache regions (the batch decoder) each row also gets its cache row: the region's first row
// plus the position. Null pointers are skipped.
struct PrefillInputs {
  int32_t* target_ids = nullptr;
  int32_t* target_positions = nullptr;
  int32_t* target_slots = nullptr;
  uint32_t target_region = 0;
  int32_t* draft_ids = nullptr;
  int32_t* draft_positions = nullptr;
  int32_t* draft_slots = nullptr;
  uint32_t draft_region = 0;
};
void write_prefill_inputs(const PrefillChunk& chunk, std::span<const int32_t> prompt, const PrefillInputs& in);

}  // namespace eaglevk::engine
