// The prefill's chunks and inputs (runtime/engine/prefill.h), which the plain, speculative and
// batch decoders share, against their definition row by row: every prompt row from `from` on
// runs exactly once, in order, in passes of at most max_rows; logits on the prompt's last row
// (every row with the argmax report); the draft catches up on every row but the prompt's last,
// reading the token after its position.
#include <gtest/gtest.h>

#include "runtime/engine/prefill.h"

namespace eaglevk::engine {
namespace {

TEST(PrefillChunks, CoverEveryRowOnceWithLogitsAndDraftRowsWhereDefined) {
  for (uint32_t n : {1u, 2u, 7u, 8u, 9u, 16u, 17u, 130u})
    for (uint32_t from = 0; from < n; from += 3)
      for (uint32_t max_rows : {1u, 4u, 8u, 128u})
        for (bool every : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "n " << n << " from " << from << " max_rows " << max_rows << " every " << every);
          const std::vector<PrefillChunk> chunks = prefill_chunks(n, from, max_rows, every);
          ASSERT_FALSE(chunks.empty());
          uint32_t next = from;
          std::vector<uint32_t> logits_rows, draft_rows;
          for (size_t c = 0; c < chunks.size(); ++c) {
            const PrefillChunk& chunk = chunks[c];
            EXPECT_EQ(chunk.begin, next);
            EXPECT_GE(chunk.rows, 1u);
            EXPECT_LE(chunk.rows, max_rows);
            EXPECT_EQ(chunk.last, c + 1 == chunks.size());
            EXPECT_EQ(chunk.logits_rows(), chunk.rows - chunk.logits_from);
            for (uint32_t i = chunk.logits_from; i < chunk.rows; ++i) logits_rows.push_back(chunk.begin + i);
            for (uint32_t i = 0; i < chunk.draft_rows; ++i) draft_rows.push_back(chunk.begin + i);
            next += chunk.rows;
          }
          EXPECT_EQ(next, n);
          std::vector<uint32_t> want_logits, want_draft;
          for (uint32_t p = from; p < n; ++p) {
            if (every || p == n - 1) want_logits.push_back(p);
            if (p + 1 < n) want_draft.push_back(p);
          }
          EXPECT_EQ(logits_rows, want_logits);
          EXPECT_EQ(draft_rows, want_draft);
        }
}

TEST(PrefillInputs, TargetRowsReadTheirTokenAndDraftRowsTheNext) {
  const std::vector<int32_t> prompt = {11, 12, 13, 14, 15, 16, 17};
  const std::vector<PrefillChunk> chunks = prefill_chunks(uint32_t(prompt.size()), 1, 4, false);
  ASSERT_EQ(chunks.size(), 2u);
  for (const PrefillChunk& chunk : chunks) {
    std::vector<int32_t> t_ids(8, -1), t_pos(8, -1), t_slots(8, -1), d_ids(8, -1), d_pos(8, -1), d_slots(8, -1);
    write_prefill_inputs(chunk, prompt, {t_ids.data(), t_pos.data(), t_slots.data(), 100, d_ids.data(), d_pos.data(),
                                         d_slots.data(), 200});
    for (uint32_t i = 0; i < 8; ++i) {
      const int32_t p = int32_t(chunk.begin + i);
      EXPECT_EQ(t_ids[i], i < chunk.rows ? prompt[p] : -1);
      EXPECT_EQ(t_pos[i], i < chunk.rows ? p : -1);
      EXPECT_EQ(t_slots[i], i < chunk.rows ? 100 + p : -1);
      EXPECT_EQ(d_ids[i], i < chunk.draft_rows ? prompt[p + 1] : -1);
      EXPECT_EQ(d_pos[i], i < chunk.draft_rows ? p : -1);
      EXPECT_EQ(d_slots[i], i < chunk.draft_rows ? 200 + p : -1);
    }
  }
  // The last chunk holds the prompt's last row, whose next token is not known yet.
  EXPECT_EQ(chunks[1].draft_rows, chunks[1].rows - 1);
  // Without cache regions (null slot arrays) only ids and positions are written.
  std::vector<int32_t> ids(4, -1), pos(4, -1);
  PrefillInputs plain;
  plain.target_ids = ids.data();
  plain.target_positions = pos.data();
  write_prefill_inputs(chunks[0], prompt, plain);
  EXPECT_EQ(ids, (std::vector<int32_t>{12, 13, 14, 15}));
  EXPECT_EQ(pos, (std::vector<int32_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace eaglevk::engine
