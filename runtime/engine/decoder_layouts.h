#pragma once
// Where each value of a submission lives in the decoder's upload and readback buffers: int32
// (or float) word offsets, named once here so that no call site does arithmetic on them.
#include <cstdint>

#include "shaders/shared_constants.h"

namespace eaglevk::engine {

// The sizes the layouts are built from.
struct LayoutSizes {
  uint32_t max_rows = 0;    // R: rows of the largest pass
  uint32_t round_rows = 0;  // RR: a round's most verify rows
  uint32_t batch = 0;       // B
  uint32_t k = 0;           // draft steps a round (chains; trees: their steps)
  uint32_t tree_rows = 0;   // K (S - 1): the draft's tree-step rows
  uint32_t tree_nodes = 0;  // M
  uint32_t vocab = 0;       // V
  uint32_t tap_width = 0;   // 3 H
};

// The round's token ids on the device (int32): -1, each sequence's pending token, then each
// draft step's tokens, sequence by sequence within a step.
struct RoundIds {
  uint32_t batch = 0;
  static constexpr uint32_t none = 0;  // holds -1: the draft of a bonus row
  uint32_t pending(uint32_t seq) const { return 1 + seq; }
  uint32_t draft(uint32_t step, uint32_t seq) const { return 1 + batch + step * batch + seq; }
  uint32_t words(uint32_t steps) const { return 1 + batch + steps * batch; }
};

// int32 words of the upload buffer (host-written inputs of one submission) and of its device
// copy, which a round's commands read so that a recorded round can be resubmitted.
struct InputLayout {
  uint32_t target_ids, target_positions, target_slots;  // [R] each: target rows
  uint32_t draft_ids;                                   // [R]: catch-up rows
  uint32_t draft_positions, draft_slots;                // [R + k B]: catch-up rows, then the steps' rows
  uint32_t tap_index;       // [RR]: the round-taps row each catch-up row reads
  uint32_t proposal_rows;   // [B]: each sequence's last catch-up row
  uint32_t head;            // [1 + B]: -1, then each sequence's pending token (RoundIds' first words)
  uint32_t verify_ids;      // [RR]: RoundIds word of each verify row's token
  uint32_t verify_drafts;   // [RR]: RoundIds word of each verify row's draft
  uint32_t q_index;         // [RR]: draft-q row of each verify row
  // [B x SAMPLE_ROW_WORDS]: each running sequence's sampling settings, in round order (a
  // prefill's sequence in record 0), so that sequences of one round sample each their own way.
  uint32_t row_sampling;
  uint32_t verify_sequence;  // [RR]: the row_sampling record of each verify row
  uint32_t draw_positions;  // [k B]: position each draft draw decides
  uint32_t tree_positions, tree_slots;  // [K (S - 1)]: the tree steps' positions and draft KV rows
  uint32_t tree_target_slots;           // [M]: the verified nodes' target KV rows
  // The last tree's accepted path, moved to consecutive rows at the round's start:
  // [len, base, node ids...] (ops::row_compact).
  uint32_t compact_path;    // [2 + M]
  uint32_t size;
};
InputLayout input_layout(const LayoutSizes& s);

// 32-bit words of the readback buffer.
struct OutputLayout {
  uint32_t tokens;    // int32 [R]: the target's token after each row
  uint32_t accepted;  // int32 [R]: row r's draft accepted
  uint32_t drafts;    // int32 RoundIds words of the round
  uint32_t logits;    // float [V]: the prompt's last logits row
  uint32_t tree;      // int32 [6 M]: TreeOutputs
  uint32_t taps;      // float [R x 3 H]: taps of the rows a tap sink reads
  uint32_t size;
};
OutputLayout output_layout(const LayoutSizes& s);

// The verified tree in OutputLayout::tree, M words each.
struct TreeOutputs {
  uint32_t base = 0, nodes = 0;
  uint32_t tokens() const { return base; }
  uint32_t parents() const { return base + nodes; }
  uint32_t depths() const { return base + 2 * nodes; }
  uint32_t argmax() const { return base + 3 * nodes; }
  uint32_t draws() const { return base + 4 * nodes; }
  uint32_t scores() const { return base + 5 * nodes; }  // float
};

}  // namespace eaglevk::engine
