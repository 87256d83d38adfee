#pragma once
// The two tiny target + draft pairs, loaded once per test process: A = tiny-llama3 with its
// original-format head, B = tiny-llama4 (MoE) with its speculators-format head on layers 1,3,6.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/spec_stats.h"
#include "support/golden.h"

namespace eaglevk::testing {

struct Pair {
  std::string target_dir, draft_dir;
  models::TargetModel target;
  models::Eagle3Model draft;
  Golden golden;
  std::vector<std::vector<int32_t>> plain;  // eaglevk's own greedy output per golden prompt

  // 64 greedy tokens (EOS ignored) for golden prompt i, computed on first use: the reference
  // for losslessness.
  const std::vector<int32_t>& plain_tokens(size_t i);
};

Pair& pair(const std::string& name);  // "A" or "B"

// Greedy speculative output at k equals p.plain_tokens on every golden prompt, or on the first
// `prompts` of them (gtest failures otherwise); returns the acceptance counters over them.
engine::SpecStats expect_lossless(Pair& p, const models::Eagle3Model& draft, uint32_t k, size_t prompts = SIZE_MAX);

// For each k: greedy speculative output equals plain greedy output on the first `prompts` golden
// prompts, AL = 1 + sum of per-position rates, and acceptance within 5% of golden.json's
// over the same prompts. Returns each k's counters, in order.
std::vector<engine::SpecStats> check_lossless_and_acceptance(Pair& p, const std::vector<uint32_t>& ks, size_t prompts);

}  // namespace eaglevk::testing
