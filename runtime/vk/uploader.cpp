#include "runtime/vk/uploader.h"

#include <algorithm>
#include <cstring>

#include "runtime/vk/check.h"
#include "runtime/vk/context.h"

namespace eaglevk::vk {

Uploader::Uploader(const Context& ctx, uint64_t staging_bytes, uint32_t slots)
    : ctx_(ctx), staging_(ctx, staging_bytes, MemoryKind::Upload, "weight staging") {
  slots = std::max(1u, slots);
  slot_bytes_ = staging_bytes / slots / 16 * 16;
  if (slot_bytes_ == 0) fail("a staging ring of {} bytes cannot hold {} slots", staging_bytes, slots);
  slots_.reserve(slots);
  for (uint32_t i = 0; i < slots; ++i) {
    slots_.push_back(std::make_unique<Slot>(ctx));
    slots_.back()->rec.sync = SyncMode::Tracked;
  }
}

// Copies not yet submitted are dropped: when an exception unwinds a load, their destination
// buffers may already be gone. Callers flush() on success. Recorder waits for its own
// submission, so nothing in flight outlives the staging buffer.
Uploader::~Uploader() = default;

void Uploader::submit_open_slot() {
  Slot& s = *slots_[current_];
  if (!s.open) return;
  s.rec.submit();
  s.open = false;
  s.in_flight = true;
  if (ctx_.on_upload) ctx_.on_upload(s.used);
  current_ = (current_ + 1) % uint32_t(slots_.size());
}

void Uploader::wait_in_flight() {
  for (auto& s : slots_)
    if (s->in_flight) {
      s->rec.wait();
      s->in_flight = false;
      s->used = 0;
    }
}

void Uploader::put(BufferRange dst, const void* data, uint64_t bytes) {
  if (bytes > dst.bytes) fail("upload of {} bytes into a {}-byte range of '{}'", bytes, dst.bytes, dst.buffer->name);
  if (dst.buffer->dry()) return;  // a dry load (DryAllocations) copies nothing
  const auto* src = static_cast<const uint8_t*>(data);
  uint64_t done = 0;
  while (done < bytes) {
    Slot* s = slots_[current_].get();
    if (s->open && s->used == slot_bytes_) {
      submit_open_slot();
      s = slots_[current_].get();
    }
    if (s->in_flight) {  // the ring came round: this slot's previous copies must be done
      s->rec.wait();
      s->in_flight = false;
      s->used = 0;
    }
    if (!s->open) {
      s->rec.begin();
      s->open = true;
    }
    const uint64_t base = uint64_t(current_) * slot_bytes_;
    const uint64_t n = std::min(bytes - done, slot_bytes_ - s->used);
    std::memcpy(static_cast<uint8_t*>(staging_.mapped) + base + s->used, src + done, n);
    s->rec.copy(BufferRange(staging_, base + s->used, n), dst.sub(done, n), "upload");
    s->used += n;
    done += n;
  }
  wait_in_flight();
}

void Uploader::flush() {
  submit_open_slot();
  wait_in_flight();
}

}  // namespace eaglevk::vk
