#include "support/decoding.h"

#include "support/gpu_fixture.h"

namespace eaglevk::testing {

engine::Decoder plain_decoder(const models::TargetModel& target, uint32_t context, uint32_t max_rows) {
  return engine::Decoder(gpu(), target, nullptr, {.context = context, .max_rows = max_rows});
}

engine::Decoder chain_decoder(const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
                              uint32_t k, uint32_t max_rows) {
  return engine::Decoder(gpu(), target, &draft, {.context = context, .k = k, .max_rows = max_rows});
}

engine::Decoder tree_decoder(const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
                             const engine::TreeParams& tree, uint32_t max_rows) {
  return engine::Decoder(gpu(), target, &draft, {.context = context, .tree = tree, .max_rows = max_rows});
}

engine::GenerationResult generate(engine::Decoder& decoder, std::vector<int32_t> prompt,
                                  const engine::GenerationOptions& options, const engine::TokenCallback& on_token) {
  engine::SpecStats stats;
  return decoder.generate(std::move(prompt), options, stats, on_token);
}

}  // namespace eaglevk::testing
