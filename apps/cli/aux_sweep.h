#pragma once
// `eaglevk eval --aux-shift-sweep`: which tap-id convention was a downloaded EAGLE-3 head
// trained with? Engines disagree whether a configured aux id i means the residual stream
// entering layer i (vLLM, llama.cpp, this runtime) or the output of layer i (SGLang adds 1 for
// ModelOpt heads), and a head's config does not say. The sweep evaluates the draft with its ids
// shifted by -1, 0 and +1 and reports the acceptance of each: the convention it was trained
// with accepts most. At temperature 0 the output is the same in every row; only acceptance
// differs. This file holds the bookkeeping; eval.cpp runs the passes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.hpp>  // engine::SpecStats

namespace eaglevk::cli {

constexpr int kAuxShifts[] = {-1, 0, +1};

struct AuxSweepRow {
  int shift = 0;
  std::vector<uint32_t> ids;  // the tap ids evaluated (residual stream entering layer i)
  std::string skipped;        // why the row did not run; empty when it ran
  engine::SpecStats stats;
  size_t output_tokens = 0;
  double seconds = 0;
};

// `ids` shifted by `shift`, or nullopt with the reason in `why` when an id would leave 0..layers
// (id `layers` is the output of the last layer, the deepest tap there is).
std::optional<std::vector<uint32_t>> shift_aux_layers(const std::vector<uint32_t>& ids, int shift, uint32_t layers,
                                                      std::string& why);

// Adjacent layers' residual streams are alike, so a head often accepts almost as well one layer
// off; a shift must beat the configured ids by more than this fraction of their mean
// acceptance length to be named best (on pair A's 20-line mix, +1 beats the ids the head was
// trained on by 0.5% and -1 loses 11%).
constexpr double kAuxSweepMargin = 0.02;
// Below this many drafts in a row the report says the ranking is noisy.
constexpr uint64_t kAuxSweepFewDrafts = 200;

// The row with the longest mean acceptance, unless it is within kAuxSweepMargin of the
// configured ids' row (then that one); ties go to the smaller |shift|.
const AuxSweepRow* best_aux_row(const std::vector<AuxSweepRow>& rows);

std::string format_ids(const std::vector<uint32_t>& ids);  // "2,4,5", as --aux-layers takes them

// The printed table, then the best shift and the --aux-layers to pass.
std::string aux_sweep_report(const std::vector<AuxSweepRow>& rows, const std::vector<uint32_t>& configured,
                             uint32_t layers);

// One object per row, for --json.
nlohmann::json aux_sweep_json(const std::vector<AuxSweepRow>& rows);

}  // namespace eaglevk::cli
