#include "runtime/engine/decoder_layouts.h"

namespace eaglevk::engine {

InputLayout input_layout(const LayoutSizes& s) {
  const uint32_t R = s.max_rows, RR = s.round_rows, B = s.batch, KB = s.k * s.batch;
  InputLayout l{};
  uint32_t at = 0;
  auto take = [&](uint32_t words) {
    const uint32_t here = at;
    at += words;
    return here;
  };
  l.target_ids = take(R);
  l.target_positions = take(R);
  l.target_slots = take(R);
  l.draft_ids = take(R);
  l.draft_positions = take(R + KB);
  l.draft_slots = take(R + KB);
  l.tap_index = take(RR);
  l.proposal_rows = take(B);
  l.head = take(1 + B);
  l.verify_ids = take(RR);
  l.verify_drafts = take(RR);
  l.q_index = take(RR);
  l.row_sampling = take(B * SAMPLE_ROW_WORDS);
  l.verify_sequence = take(RR);
  l.draw_positions = take(KB);
  l.tree_positions = take(s.tree_rows);
  l.tree_slots = take(s.tree_rows);
  l.tree_target_slots = take(s.tree_nodes);
  l.compact_path = take(2 + s.tree_nodes);
  l.size = at;
  return l;
}

OutputLayout output_layout(const LayoutSizes& s) {
  OutputLayout l{};
  uint32_t at = 0;
  auto take = [&](uint64_t words) {
    const uint32_t here = at;
    at += uint32_t(words);
    return here;
  };
  l.tokens = take(s.max_rows);
  l.accepted = take(s.max_rows);
  l.drafts = take(RoundIds{s.batch}.words(s.k));
  l.logits = take(s.vocab);
  l.tree = take(6ull * s.tree_nodes);
  l.taps = take(uint64_t(s.max_rows) * s.tap_width);
  l.size = at;
  return l;
}

}  // namespace eaglevk::engine
