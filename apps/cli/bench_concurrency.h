#pragma once
// `eaglevk bench --concurrency C`: C clients, each sending its next request as soon as its last
// one finished (a closed loop), decoded together by api::BatchSession as `eaglevk serve` decodes
// them, without HTTP: requests and output tokens per second, time to first token and the time
// between the token groups a client receives (one per round: with a draft a round brings
// several tokens), their p50 and p99.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.hpp>

namespace eaglevk::cli {

struct ConcurrencyResult {
  uint32_t clients = 0;
  size_t requests = 0;
  double seconds = 0;
  uint64_t output_tokens = 0;
  std::vector<double> ttft, itl;  // seconds
  double acceptance_length = 0;   // 0 without a draft
};

// `requests_per_client` requests of `n_prompt` random tokens and `n_gen` generated tokens each
// (end of sequence ignored), after one untimed request that builds the pipelines.
ConcurrencyResult bench_concurrency(const std::shared_ptr<const api::Model>& model, uint32_t clients,
                                    uint32_t requests_per_client, uint32_t n_prompt, uint32_t n_gen, uint32_t k,
                                    uint32_t context);

// The value below which `fraction` of the samples lie (nearest rank); 0 for none.
double percentile(std::vector<double> samples, double fraction);

std::string concurrency_table(const std::string& model, const std::string& device,
                              const std::vector<ConcurrencyResult>& results);
nlohmann::json concurrency_json(const std::string& model, const std::string& device, const ConcurrencyResult& r);

}  // namespace eaglevk::cli
