#pragma once
// --spec-draft-tokens auto: the tree shape (S, K, M) with the most expected accepted tokens
// per second on this device (docs/tree.md, "Choosing the shape"). Two measurements feed it:
//   - what passes cost here: the wall time of a target verify pass of 1..64 rows and of a draft
//     pass of 1..16 rows (recording, submission and the fence included), measured once per
//     device, model and draft and cached in a file;
//   - what the draft gets accepted: one greedy calibration run per top-k on the user's own
//     prompts with the widest tree, whose verified trees (tokens, parents, depths, scores and
//     the target's argmax) tell how many tokens every smaller tree (S' <= S, M' <= M) of that
//     top-k would have accepted in the same rounds.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/tree_params.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

// Seconds per pass at measured row counts (ascending), linearly interpolated between them.
struct PassCosts {
  std::vector<uint32_t> verify_rows, draft_rows;
  std::vector<double> verify_seconds, draft_seconds;
  double verify(uint32_t rows) const;
  double draft(uint32_t rows) const;
};

// Mean drafts accepted per round for every smaller shape of a calibrated top-k: entry
// (s, m) for 1 <= s <= steps and 2 <= m <= draft_tokens; NaN where the calibration trees
// cannot tell (a tree of m - 1 nodes of depth <= s that the calibration did not verify).
struct AcceptanceTable {
  uint32_t topk = 0, steps = 0, draft_tokens = 0;
  uint64_t rounds = 0;
  std::vector<double> accepted;  // [(s - 1) * draft_tokens + (m - 1)]
  double at(uint32_t s, uint32_t m) const;
};

// The table from the verified trees of a greedy run with shape `calibrated`. The nodes of a
// smaller tree are the root and the best m - 1 nodes of depth <= s by cumulative score (ties
// to the lower index), as the device selects them; its accepted tokens are the walk along
// the target's argmax through those nodes.
AcceptanceTable acceptance_by_shape(const std::vector<TreeRound>& rounds, const TreeParams& calibrated);

struct AutoChoice {
  TreeParams shape;
  double accepted = 0;        // expected drafts accepted per round
  double round_seconds = 0;   // expected time of a round
  double tokens_per_second() const { return round_seconds > 0 ? (1 + accepted) / round_seconds : 0; }
};

// The shape with the most (1 + accepted) / round time over every table's shapes, a round
// costing a catch-up draft pass of (1 + accepted) rows, S - 1 draft passes of K rows and a
// verify pass of M rows. Ties go to the smaller tree.
AutoChoice choose_tree_shape(const std::vector<AcceptanceTable>& tables, const PassCosts& costs);

struct AutoOptions {
  std::vector<std::vector<int32_t>> prompts;  // calibration prompts (the user's)
  uint32_t tokens_per_prompt = 32;
  uint32_t max_steps = 8, max_topk = 8, max_tokens = 64;  // the search space
  std::string cache_key;          // identifies device, model and draft; empty: no cache
  std::filesystem::path cache_dir;
};

// Measures (or loads) the pass costs, calibrates top-k 1, 2, 4, 8 (up to max_topk), chooses.
// `report` receives a few lines saying what was measured and chosen.
AutoChoice auto_tree_shape(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                           const AutoOptions& options, std::string* report = nullptr);

// The cache folder: $EAGLEVK_CACHE_DIR, else $XDG_CACHE_HOME/eaglevk, else ~/.cache/eaglevk
// (empty when none of them is set).
std::filesystem::path default_cache_dir();

}  // namespace eaglevk::engine
