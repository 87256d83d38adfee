#pragma once
// Speculative decoding counters in vLLM's terms (examples/offline_inference/spec_decode.py).
#include <cstdint>
#include <string>
#include <vector>

namespace eaglevk::engine {

struct SpecStats {
  uint64_t num_drafts = 0;           // verify passes that carried at least one draft token
  uint64_t num_draft_tokens = 0;     // proposed tokens
  uint64_t num_accepted_tokens = 0;  // accepted drafts (bonus tokens excluded)
  std::vector<uint64_t> accepted_at;  // [i]: drafts whose token i was accepted
  std::vector<uint64_t> rounds_by_accepted;  // [a]: rounds that accepted exactly a drafts
  uint64_t total_output_tokens = 0;

  // `positions`: entries of the per-position acceptance this round counts (0: one per proposed
  // token; a tree counts its depths, not its nodes).
  void record_round(uint32_t proposed, uint32_t accepted, uint32_t positions = 0);
  void merge(const SpecStats& other);
  double mean_acceptance_length() const;           // 1 + accepted / drafts
  std::vector<double> acceptance_per_position() const;  // accepted_at[i] / drafts
  std::string block() const;                       // the printed block
};

}  // namespace eaglevk::engine
