#pragma once
// Decoders as the tests build them, and a generation whose statistics are not looked at.
#include <cstdint>
#include <string>
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/decoder.h"

namespace eaglevk::testing {

// Plain decoding (no draft), prefill passes of `max_rows` rows.
engine::Decoder plain_decoder(const models::TargetModel& target, uint32_t context, uint32_t max_rows);
// Chain drafting of k tokens a round.
engine::Decoder chain_decoder(const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
                              uint32_t k, uint32_t max_rows = engine::kPrefillRows);
// Tree drafting of the given shape.
engine::Decoder tree_decoder(const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
                             const engine::TreeParams& tree, uint32_t max_rows = engine::kPrefillRows);

// One generation on slot 0 of `decoder`.
engine::GenerationResult generate(engine::Decoder& decoder, std::vector<int32_t> prompt,
                                  const engine::GenerationOptions& options, const engine::TokenCallback& on_token = {});

// gtest failures naming `what` unless `got` has `want`'s tokens and every logprob report's
// values to the bit (a sequence decoded beside others against the same alone).
void expect_same_generation(const engine::GenerationResult& got, const engine::GenerationResult& want,
                            const std::string& what);

}  // namespace eaglevk::testing
