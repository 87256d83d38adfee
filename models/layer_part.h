#pragma once
// Which of a checkpoint's tensors one device's part of a target loads (WeightPlacement::layers):
// its layers, the embeddings with the first part, the final norm and lm_head with the last. The
// tensors of the other parts are left on disk and named to TensorUse::check_all_used as
// knowingly skipped, so that a tensor nobody loads is still an error.
#include <cstdint>
#include <string>
#include <vector>

#include "models/family.h"

namespace eaglevk::models {

struct LayerPart {
  LayerRange range;          // resolved: end is a layer count, never 0
  bool embed = true;         // embed_tokens (the first part; the last too when lm_head is tied to it)
  bool head = true;          // the final norm and lm_head (the last part)
  std::vector<std::string> elsewhere;  // name prefixes of the tensors other parts load
  bool has(uint32_t layer) const { return layer >= range.first && layer < range.end; }
};

// `prefix`: what the family puts before "model." (Llama-4's "language_model."). Fails for an
// empty range or one past the model's layers.
LayerPart layer_part(const WeightPlacement& placement, uint32_t layers, bool tied, const std::string& prefix = "");

}  // namespace eaglevk::models
