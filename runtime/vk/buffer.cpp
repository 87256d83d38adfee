#include "runtime/vk/buffer.h"

#include <atomic>
#include <cstring>
#include <utility>

#include "runtime/vk/check.h"
#include "runtime/vk/context.h"
#include "runtime/vk/fault.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::vk {
namespace {

std::atomic<uint64_t> bytes_in_use{0};
std::atomic<uint64_t> next_serial{1};
thread_local bool dry_allocations = false;

}  // namespace

DryAllocations::DryAllocations() : was_active_(dry_allocations) { dry_allocations = true; }
DryAllocations::~DryAllocations() { dry_allocations = was_active_; }
bool DryAllocations::active() { return dry_allocations; }

uint64_t memory_in_use() { return bytes_in_use.load(); }

Buffer::Buffer(const Context& context, uint64_t size, MemoryKind memory_kind, std::string buffer_name)
    : ctx(&context), bytes(size), kind(memory_kind), serial(next_serial++), name(std::move(buffer_name)) {
  if (size == 0) fail("buffer '{}' has size 0", name);
  ctx->check_usable();
  // A dry buffer may be larger than one allocation: the arena laid out without reuse is.
  if (dry_allocations) {
    made_dry = true;
    return;
  }
  if (size > ctx->max_allocation)
    fail("buffer '{}' needs {} MiB in one allocation, more than the device allows ({} MiB, maxMemoryAllocationSize)",
         name, (size + (1 << 20) - 1) >> 20, ctx->max_allocation >> 20);
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT |
               VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  EAGLEVK_VK(vkCreateBuffer(ctx->device, &info, nullptr, &handle));

  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(ctx->device, handle, &req);
  VkMemoryPropertyFlags required = 0, preferred = 0, avoided = 0;
  switch (kind) {
    case MemoryKind::Device: required = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT; break;
    case MemoryKind::Upload:
      required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
      break;
    case MemoryKind::Readback:
      required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
      preferred = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
      break;
    case MemoryKind::HostWeights:
      required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
      avoided = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
      break;
  }
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = ctx->find_memory_type(req.memoryTypeBits, required, preferred, avoided);
  memory_flags = ctx->memory.memoryTypes[alloc.memoryTypeIndex].propertyFlags;
  VkResult result = take_fault(FaultPoint::Allocation);
  if (result == VK_SUCCESS) result = vkAllocateMemory(ctx->device, &alloc, nullptr, &memory);
  if (result != VK_SUCCESS) {
    vkDestroyBuffer(ctx->device, handle, nullptr);
    handle = VK_NULL_HANDLE;
    memory = VK_NULL_HANDLE;
    ctx->raise(VulkanError(result, fmt::format("cannot allocate {} MiB for buffer '{}': {}", size >> 20, name,
                                               result_name(result))));
  }
  bytes_in_use += bytes;
  EAGLEVK_VK(vkBindBufferMemory(ctx->device, handle, memory, 0));
  if (kind == MemoryKind::Upload || kind == MemoryKind::Readback)
    EAGLEVK_VK(vkMapMemory(ctx->device, memory, 0, VK_WHOLE_SIZE, 0, &mapped));
}

Buffer::~Buffer() { release(); }

void Buffer::release() {
  if (!ctx) return;
  for (auto& [key, view] : views) vkDestroyBufferView(ctx->device, view, nullptr);
  views.clear();
  if (handle) vkDestroyBuffer(ctx->device, handle, nullptr);
  if (memory) {
    vkFreeMemory(ctx->device, memory, nullptr);
    bytes_in_use -= bytes;
  }
  handle = VK_NULL_HANDLE;
  memory = VK_NULL_HANDLE;
  mapped = nullptr;
  memory_flags = 0;
  made_dry = false;
}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    ctx = std::exchange(other.ctx, nullptr);
    handle = std::exchange(other.handle, VK_NULL_HANDLE);
    memory = std::exchange(other.memory, VK_NULL_HANDLE);
    bytes = std::exchange(other.bytes, 0);
    kind = other.kind;
    memory_flags = std::exchange(other.memory_flags, 0);
    serial = std::exchange(other.serial, 0);
    mapped = std::exchange(other.mapped, nullptr);
    made_dry = std::exchange(other.made_dry, false);
    name = std::move(other.name);
    views = std::move(other.views);
    other.views.clear();
  }
  return *this;
}

namespace {

uint32_t texel_bytes(VkFormat format) {
  switch (format) {
    case VK_FORMAT_R32_SFLOAT:
    case VK_FORMAT_R32_UINT: return 4;
    case VK_FORMAT_R32G32B32A32_SFLOAT:
    case VK_FORMAT_R32G32B32A32_UINT: return 16;
    default: fail("texel buffers of format {} are not used", int(format));
  }
}

uint64_t texel_view_bytes(const BufferRange& r, VkFormat format) {
  const uint32_t texel = texel_bytes(format);
  return (r.bytes + texel - 1) / texel * texel;
}

// Why `r` cannot be viewed as texels of `format`, or "" when it can.
std::string texel_view_problem(const BufferRange& r, VkFormat format) {
  const Buffer& b = *r.buffer;
  const DeviceFeatures& f = b.ctx->info.features;
  const uint32_t texel = texel_bytes(format);
  const uint64_t bytes = texel_view_bytes(r, format);
  if (!f.storage_texel_buffers) return "the device has no storage texel buffers";
  if (f.min_texel_buffer_offset_alignment && r.offset % f.min_texel_buffer_offset_alignment)
    return fmt::format("offset {} into '{}' is not a multiple of minTexelBufferOffsetAlignment {}", r.offset, b.name,
                       f.min_texel_buffer_offset_alignment);
  if (r.offset + bytes > b.bytes)
    return fmt::format("{} bytes at {} of '{}' rounded up to whole {}-byte texels pass its end", r.bytes, r.offset,
                       b.name, texel);
  if (bytes / texel > f.max_texel_buffer_elements)
    return fmt::format("{} texels of '{}' exceed maxTexelBufferElements {}", bytes / texel, b.name,
                       f.max_texel_buffer_elements);
  return "";
}

}  // namespace

bool texel_view_possible(const BufferRange& r, VkFormat format) { return texel_view_problem(r, format).empty(); }

VkBufferView texel_view(const BufferRange& r, VkFormat format, const char* what) {
  const std::string problem = texel_view_problem(r, format);
  if (!problem.empty()) fail("{}: {}", what, problem);
  const Buffer& b = *r.buffer;
  const uint64_t bytes = texel_view_bytes(r, format);
  auto key = std::make_tuple(r.offset, bytes, format);
  auto found = b.views.find(key);
  if (found != b.views.end()) return found->second;
  VkBufferViewCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
  info.buffer = b.handle;
  info.format = format;
  info.offset = r.offset;
  info.range = bytes;
  VkBufferView view;
  EAGLEVK_VK(vkCreateBufferView(b.ctx->device, &info, nullptr, &view));
  return b.views[key] = view;
}

void upload(const Context& ctx, BufferRange dst, const void* data, uint64_t bytes) {
  if (bytes == 0 || dst.buffer->dry()) return;
  if (bytes > dst.bytes) fail("upload of {} bytes into a {}-byte range of '{}'", bytes, dst.bytes, dst.buffer->name);
  Buffer staging(ctx, bytes, MemoryKind::Upload, "upload staging");
  std::memcpy(staging.mapped, data, bytes);
  Recorder rec(ctx);
  rec.begin();
  rec.copy(BufferRange(staging), dst.sub(0, bytes), "upload");
  rec.submit_and_wait();
}

void download(const Context& ctx, BufferRange src, void* data, uint64_t bytes) {
  if (bytes == 0) return;
  if (bytes > src.bytes) fail("download of {} bytes from a {}-byte range of '{}'", bytes, src.bytes, src.buffer->name);
  Buffer staging(ctx, bytes, MemoryKind::Readback, "readback staging");
  Recorder rec(ctx);
  rec.begin();
  rec.copy(src.sub(0, bytes), BufferRange(staging), "download");
  rec.submit_and_wait();
  std::memcpy(data, staging.mapped, bytes);
}

}  // namespace eaglevk::vk
