#include "runtime/engine/prefill.h"

#include <algorithm>

namespace eaglevk::engine {

std::vector<PrefillChunk> prefill_chunks(uint32_t n, uint32_t from, uint32_t max_rows, bool every_logits_row) {
  std::vector<PrefillChunk> chunks;
  for (uint32_t begin = from; begin < n; begin += max_rows) {
    PrefillChunk c;
    c.begin = begin;
    c.rows = std::min(max_rows, n - begin);
    c.last = begin + c.rows == n;
    c.logits_from = every_logits_row ? 0 : c.last ? c.rows - 1 : c.rows;
    c.draft_rows = c.last ? c.rows - 1 : c.rows;
    chunks.push_back(c);
  }
  return chunks;
}

void write_prefill_inputs(const PrefillChunk& chunk, std::span<const int32_t> prompt, const PrefillInputs& in) {
  for (uint32_t i = 0; i < chunk.rows; ++i) {
    const uint32_t pos = chunk.begin + i;
    if (in.target_ids) in.target_ids[i] = prompt[pos];
    if (in.target_positions) in.target_positions[i] = int32_t(pos);
    if (in.target_slots) in.target_slots[i] = int32_t(in.target_region + pos);
  }
  for (uint32_t i = 0; i < chunk.draft_rows; ++i) {
    const uint32_t pos = chunk.begin + i;
    if (in.draft_ids) in.draft_ids[i] = prompt[pos + 1];
    if (in.draft_positions) in.draft_positions[i] = int32_t(pos);
    if (in.draft_slots) in.draft_slots[i] = int32_t(in.draft_region + pos);
  }
}

}  // namespace eaglevk::engine
