#include "runtime/engine/spec_stats.h"

#include <algorithm>

#include <fmt/format.h>

namespace eaglevk::engine {

void SpecStats::record_round(uint32_t proposed, uint32_t accepted, uint32_t positions) {
  if (proposed == 0) return;
  if (positions == 0) positions = proposed;
  ++num_drafts;
  num_draft_tokens += proposed;
  num_accepted_tokens += accepted;
  if (accepted_at.size() < positions) accepted_at.resize(positions, 0);
  for (uint32_t i = 0; i < accepted; ++i) ++accepted_at[i];
  if (rounds_by_accepted.size() <= accepted) rounds_by_accepted.resize(accepted + 1, 0);
  ++rounds_by_accepted[accepted];
}

void SpecStats::merge(const SpecStats& o) {
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  total_output_tokens += o.total_output_tokens;
  if (accepted_at.size() < o.accepted_at.size()) accepted_at.resize(o.accepted_at.size(), 0);
  for (size_t i = 0; i < o.accepted_at.size(); ++i) accepted_at[i] += o.accepted_at[i];
  if (rounds_by_accepted.size() < o.rounds_by_accepted.size()) rounds_by_accepted.resize(o.rounds_by_accepted.size(), 0);
  for (size_t i = 0; i < o.rounds_by_accepted.size(); ++i) rounds_by_accepted[i] += o.rounds_by_accepted[i];
}

double SpecStats::mean_acceptance_length() const {
  return num_drafts ? 1.0 + double(num_accepted_tokens) / double(num_drafts) : 1.0;
}

std::vector<double> SpecStats::acceptance_per_position() const {
  std::vector<double> out;
  for (uint64_t n : accepted_at) out.push_back(num_drafts ? double(n) / double(num_drafts) : 0.0);
  return out;
}

std::string SpecStats::block() const {
  std::string rule(50, '-');
  std::string s = fmt::format(
      "{}\ntotal_num_output_tokens: {}\nnum_drafts: {}\nnum_draft_tokens: {}\nnum_accepted_tokens: {}\n"
      "mean acceptance length: {:.2f}\n{}\n",
      rule, total_output_tokens, num_drafts, num_draft_tokens, num_accepted_tokens, mean_acceptance_length(), rule);
  auto rates = acceptance_per_position();
  for (size_t i = 0; i < rates.size(); ++i) s += fmt::format("acceptance at token {}: {:.2f}\n", i, rates[i]);
  return s;
}

}  // namespace eaglevk::engine
