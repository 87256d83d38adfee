#pragma once
// Buffers: device-local storage, host-visible staging for upload and read-back.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include <vulkan/vulkan.h>

namespace eaglevk::vk {

struct Context;

enum class MemoryKind {
  Device,    // device-local; written and read only through copies and shaders
  Upload,    // host-visible, coherent: staging for uploads
  Readback,  // host-visible, preferably cached: staging for read-back
  // Weights kept in system memory and read by the device in place over the bus (a Llama-4
  // model's routed experts when they do not fit the device): host-visible, and on a discrete
  // GPU preferably not device-local (that would be the BAR window into the card's own memory).
  // Not mapped: written through copies, as Device buffers are.
  HostWeights,
};

// Bytes of Vulkan memory held by the live buffers of this process (every allocation is a
// Buffer's): the soak test checks that generation does not grow it.
uint64_t memory_in_use();

// While one is alive on a thread, the buffers that thread makes are dry: a size, a name and a
// serial, no VkBuffer and no memory, and copies into them (upload, Uploader::put) do nothing.
// Memory planning loads a model and records its forward so, to learn the arena's size before
// a byte is allocated (models::target_arena_bytes).
class DryAllocations {
 public:
  DryAllocations();
  ~DryAllocations();
  DryAllocations(const DryAllocations&) = delete;
  DryAllocations& operator=(const DryAllocations&) = delete;
  static bool active();

 private:
  bool was_active_;
};

// One VkBuffer with its own memory (none when dry). Move-only; destroyed with its owner.
struct Buffer {
  const Context* ctx = nullptr;
  VkBuffer handle = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t bytes = 0;
  MemoryKind kind = MemoryKind::Device;
  void* mapped = nullptr;  // host pointer for Upload and Readback buffers
  VkMemoryPropertyFlags memory_flags = 0;  // of the memory type allocated (0 when dry)
  // Unique in the process, never reused (a VkBuffer handle can be): what a cached descriptor
  // set is keyed by (Recorder), so a set never outlives its buffer into another one.
  uint64_t serial = 0;
  std::string name;
  // Texel views of ranges of this buffer, made on first use by texel_view() and destroyed with
  // it. Kernels bind the same few ranges (weights, arena slots) every step, so this stays small.
  // Recording on a device takes turns (the C API's queue lock), as for the pipeline cache.
  mutable std::map<std::tuple<uint64_t, uint64_t, VkFormat>, VkBufferView> views;
  bool made_dry = false;

  Buffer() = default;
  Buffer(const Context& ctx, uint64_t bytes, MemoryKind kind, std::string name);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void release();
  // A dry buffer counts as present: code that asks whether a model has a tensor must take the
  // same path on a dry load as on a real one.
  explicit operator bool() const { return handle != VK_NULL_HANDLE || made_dry; }
  bool dry() const { return made_dry; }  // made under DryAllocations
};

// A byte range of a buffer: what an op binds and declares as read or written.
struct BufferRange {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;

  BufferRange() = default;
  BufferRange(const Buffer& b) : buffer(&b), offset(0), bytes(b.bytes) {}  // NOLINT: whole buffer
  BufferRange(const Buffer& b, uint64_t offset, uint64_t bytes) : buffer(&b), offset(offset), bytes(bytes) {}
  BufferRange sub(uint64_t off, uint64_t n) const { return {*buffer, offset + off, n}; }
};

// A view of `r` as texels of `format` (16- or 4-byte texels), for a storage texel buffer binding.
// The range must start on minTexelBufferOffsetAlignment; its end is rounded up to a whole texel,
// which must still lie inside the buffer. Fails with a message naming `what` otherwise.
VkBufferView texel_view(const BufferRange& r, VkFormat format, const char* what);
// Whether texel_view(r, format) would succeed: the device has texel buffers, the offset is
// aligned, and the rounded range fits the buffer and maxTexelBufferElements.
bool texel_view_possible(const BufferRange& r, VkFormat format);

// Copies host bytes into a device buffer (through a staging buffer and one submission) and back.
// For setup and tests; per-token transfers are recorded into the round's command buffer instead.
void upload(const Context& ctx, BufferRange dst, const void* data, uint64_t bytes);
void download(const Context& ctx, BufferRange src, void* data, uint64_t bytes);

}  // namespace eaglevk::vk
