#include "runtime/ops/gpu.h"

namespace eaglevk::ops {

Gpu::Gpu(const vk::ContextOptions& options)
    : ctx(options), pipelines(ctx), dummy(ctx, 256, vk::MemoryKind::Device, "dummy binding") {}

}  // namespace eaglevk::ops
