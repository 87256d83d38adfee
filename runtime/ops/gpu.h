#pragma once
// What every op needs: the device, the pipeline cache, and a small dummy buffer that fills
// optional bindings (no mask, no d2t). Ops record into a Recorder the caller owns.
#include "runtime/vk/buffer.h"
#include "runtime/vk/context.h"
#include "runtime/vk/pipeline.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::ops {

struct Gpu {
  vk::Context ctx;
  vk::PipelineCache pipelines;
  vk::Buffer dummy;

  explicit Gpu(const vk::ContextOptions& options = vk::ContextOptions::from_env());
};

struct OpContext {
  Gpu& gpu;
  vk::Recorder& rec;
};

}  // namespace eaglevk::ops
