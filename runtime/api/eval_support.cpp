// What `eaglevk eval` asks of a loaded model besides its sessions: the draft's taps for an
// aux-layer sweep, so that the app reaches none of the engine's lower layers.
#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/eaglevk.hpp>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/stop_text.h"
#include "runtime/engine/tree_auto.h"
#include "runtime/ops/gpu.h"
#include "runtime/vk/profile.h"

namespace eaglevk::api {

static_assert(kMaxBatchSequences == engine::kMaxBatch);

void set_draft_taps(const Model& model, std::vector<uint32_t> layers) {
  if (!model.draft) fail_as(ErrorKind::InvalidArgument, "the model has no draft");
  const std::vector<uint32_t>& now = model.draft->aux_layers;
  if (layers.size() != now.size())
    fail_as(ErrorKind::InvalidArgument, "the draft taps {} layers, got {}", now.size(), layers.size());
  const uint32_t top = uint32_t(model.target->config().num_hidden_layers);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] > top)
      fail_as(ErrorKind::InvalidArgument, "tap layer {} is out of range: the target has {} layers (ids 0..{})",
              layers[i], top, top);
    if (i && layers[i] <= layers[i - 1])
      fail_as(ErrorKind::InvalidArgument, "tap layers must be ascending and distinct, got {} after {}", layers[i],
              layers[i - 1]);
  }
  // The decoder copies the ids when a session is made (the weights do not depend on them).
  model.draft->aux_layers = std::move(layers);
}

}  // namespace eaglevk::api
