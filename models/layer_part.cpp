#include "models/layer_part.h"

#include <fmt/format.h>

#include <eaglevk/error.h>

namespace eaglevk::models {

LayerPart layer_part(const WeightPlacement& placement, uint32_t layers, bool tied, const std::string& prefix) {
  LayerPart p;
  p.range = {placement.layers.first, placement.layers.end_of(layers)};
  if (p.range.first >= p.range.end || p.range.end > layers)
    fail("layers [{}, {}) of a model of {} layers: a device's part must hold at least one of its layers",
         p.range.first, p.range.end, layers);
  p.head = p.range.end == layers;
  p.embed = p.range.first == 0 || (p.head && tied) || placement.embed_always;
  for (uint32_t l = 0; l < layers; ++l)
    if (!p.has(l)) p.elsewhere.push_back(fmt::format("{}model.layers.{}.", prefix, l));
  if (!p.embed) p.elsewhere.push_back(prefix + "model.embed_tokens.");
  if (!p.head) {
    p.elsewhere.push_back(prefix + "model.norm.");
    p.elsewhere.push_back(prefix + "lm_head.");
  }
  return p;
}

}  // namespace eaglevk::models
