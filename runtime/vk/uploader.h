#pragma once
// Weight uploads through a bounded staging ring: the host copies one slot while the device
// copies the slots already submitted, so reading the file and the device transfer overlap,
// and host memory for staging stays at the ring's size however large the model is.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/vk/buffer.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::vk {

struct Context;

class Uploader {
 public:
  explicit Uploader(const Context& ctx, uint64_t staging_bytes = 64ull << 20, uint32_t slots = 4);
  ~Uploader();  // drops copies not yet submitted
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  // Returns with no copy in flight: only the open slot's copies, not yet submitted, wait for
  // a later put() or flush(). A load that throws between two puts therefore never has the
  // device write into buffers its unwinding frees.
  void put(BufferRange dst, const void* data, uint64_t bytes);
  void flush();

 private:
  struct Slot {
    explicit Slot(const Context& ctx) : rec(ctx) {}
    Recorder rec;
    uint64_t used = 0;
    bool open = false;      // recording
    bool in_flight = false; // submitted, not yet waited for
  };
  void submit_open_slot();
  void wait_in_flight();

  const Context& ctx_;
  Buffer staging_;
  uint64_t slot_bytes_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;
  uint32_t current_ = 0;
};

}  // namespace eaglevk::vk
