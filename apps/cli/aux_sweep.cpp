#include "apps/cli/aux_sweep.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>

namespace eaglevk::cli {

std::optional<std::vector<uint32_t>> shift_aux_layers(const std::vector<uint32_t>& ids, int shift, uint32_t layers,
                                                      std::string& why) {
  std::vector<uint32_t> out;
  for (uint32_t id : ids) {
    const int64_t moved = int64_t(id) + shift;
    if (moved < 0 || moved > int64_t(layers)) {
      why = fmt::format("layer {}{:+d} leaves the range 0..{}", id, shift, layers);
      return std::nullopt;
    }
    out.push_back(uint32_t(moved));
  }
  return out;
}

const AuxSweepRow* best_aux_row(const std::vector<AuxSweepRow>& rows) {
  const AuxSweepRow* configured = nullptr;
  const AuxSweepRow* best = nullptr;
  for (const AuxSweepRow& r : rows) {
    if (!r.skipped.empty()) continue;
    if (r.shift == 0) configured = &r;
    const double al = r.stats.mean_acceptance_length();
    if (!best || al > best->stats.mean_acceptance_length() ||
        (al == best->stats.mean_acceptance_length() && std::abs(r.shift) < std::abs(best->shift)))
      best = &r;
  }
  if (configured && best != configured &&
      best->stats.mean_acceptance_length() <= configured->stats.mean_acceptance_length() * (1 + kAuxSweepMargin))
    return configured;
  return best;
}

std::string format_ids(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::string aux_sweep_report(const std::vector<AuxSweepRow>& rows, const std::vector<uint32_t>& configured,
                             uint32_t layers) {
  std::string s = fmt::format(
      "aux-layer shift sweep: configured ids {} of {} layers (id i = the residual stream entering layer i)\n",
      format_ids(configured), layers);
  s += fmt::format("{:>5}  {:<10} {:>8} {:>9} {:>8}  {}\n", "shift", "ids", "drafts", "accepted", "mean AL",
                   "acceptance per position");
  for (const AuxSweepRow& r : rows) {
    if (!r.skipped.empty()) {
      s += fmt::format("{:>+5}  {:<10} skipped: {}\n", r.shift, "-", r.skipped);
      continue;
    }
    std::string per;
    for (double rate : r.stats.acceptance_per_position()) per += fmt::format("{}{:.2f}", per.empty() ? "" : " ", rate);
    s += fmt::format("{:>+5}  {:<10} {:>8} {:>9} {:>8.3f}  {}\n", r.shift, format_ids(r.ids), r.stats.num_drafts,
                     r.stats.num_accepted_tokens, r.stats.mean_acceptance_length(), per);
  }
  uint64_t fewest = UINT64_MAX;
  for (const AuxSweepRow& r : rows)
    if (r.skipped.empty()) fewest = std::min<uint64_t>(fewest, r.stats.num_drafts);
  if (fewest < kAuxSweepFewDrafts)
    s += fmt::format("only {} drafts in a row: the ranking is noisy; a few hundred drafts per row (a larger dataset "
                     "or -n) settle it\n",
                     fewest);
  if (const AuxSweepRow* best = best_aux_row(rows)) {
    s += fmt::format("best: shift {:+d} (mean acceptance length {:.3f}); pass --aux-layers {}\n", best->shift,
                     best->stats.mean_acceptance_length(), format_ids(best->ids));
    for (const AuxSweepRow& r : rows)
      if (best->shift == 0 && r.shift != 0 && r.skipped.empty() &&
          r.stats.mean_acceptance_length() > best->stats.mean_acceptance_length())
        s += fmt::format("shift {:+d} accepts {:.1f}% more, within the {:.0f}% noise margin: the configured ids stay\n",
                         r.shift, 100 * (r.stats.mean_acceptance_length() / best->stats.mean_acceptance_length() - 1),
                         100 * kAuxSweepMargin);
    if (best->shift == 1)
      s += "the head appears to count tap ids as layer outputs (SGLang's ModelOpt convention)\n";
    else if (best->shift == -1)
      s += "the head's configured ids appear to be one layer deeper than the taps it was trained on\n";
  }
  return s;
}

nlohmann::json aux_sweep_json(const std::vector<AuxSweepRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  const AuxSweepRow* best = best_aux_row(rows);
  for (const AuxSweepRow& r : rows) {
    nlohmann::json e = {{"shift", r.shift}, {"skipped", !r.skipped.empty()}};
    if (!r.skipped.empty()) {
      e["reason"] = r.skipped;
    } else {
      e["aux_layers"] = r.ids;
      e["num_drafts"] = r.stats.num_drafts;
      e["num_draft_tokens"] = r.stats.num_draft_tokens;
      e["num_accepted_tokens"] = r.stats.num_accepted_tokens;
      e["mean_acceptance_length"] = r.stats.mean_acceptance_length();
      e["acceptance_per_position"] = r.stats.acceptance_per_position();
      e["output_tokens"] = r.output_tokens;
      e["seconds"] = r.seconds;
      e["best"] = &r == best;
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace eaglevk::cli
