#pragma once
// Batches many host-to-device copies through one staging buffer: weights stream from the
// memory-mapped checkpoint into staging and on to device memory, one host copy each.
#include <cstdint>

#include "runtime/vk/buffer.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::vk {

class Uploader {
 public:
  explicit Uploader(const Context& ctx, uint64_t staging_bytes = 64ull << 20);
  ~Uploader();  // drops copies not yet flushed
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  void put(BufferRange dst, const void* data, uint64_t bytes);
  void flush();

 private:
  const Context& ctx_;
  Buffer staging_;
  Recorder rec_;
  uint64_t used_ = 0;
  bool open_ = false;
};

}  // namespace eaglevk::vk
