#include "runtime/vk/uploader.h"

#include <algorithm>
#include <cstring>

#include "runtime/vk/check.h"
#include "runtime/vk/context.h"

namespace eaglevk::vk {

Uploader::Uploader(const Context& ctx, uint64_t staging_bytes)
    : ctx_(ctx), staging_(ctx, staging_bytes, MemoryKind::Upload, "weight staging"), rec_(ctx) {
  rec_.sync = SyncMode::Tracked;
}

// Pending copies are dropped, never submitted: when an exception unwinds a load, their
// destination buffers may already be gone. Callers flush() on success.
Uploader::~Uploader() = default;

void Uploader::put(BufferRange dst, const void* data, uint64_t bytes) {
  if (bytes > dst.bytes) fail("upload of {} bytes into a {}-byte range of '{}'", bytes, dst.bytes, dst.buffer->name);
  const auto* src = static_cast<const uint8_t*>(data);
  uint64_t done = 0;
  while (done < bytes) {
    if (used_ == staging_.bytes) flush();
    if (!open_) {
      rec_.begin();
      open_ = true;
    }
    uint64_t n = std::min(bytes - done, staging_.bytes - used_);
    std::memcpy(static_cast<uint8_t*>(staging_.mapped) + used_, src + done, n);
    rec_.copy(BufferRange(staging_, used_, n), dst.sub(done, n), "upload");
    used_ += n;
    done += n;
  }
}

void Uploader::flush() {
  if (!open_) return;
  rec_.submit_and_wait();
  open_ = false;
  used_ = 0;
}

}  // namespace eaglevk::vk
