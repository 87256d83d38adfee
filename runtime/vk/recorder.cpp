#include "runtime/vk/recorder.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "runtime/vk/check.h"
#include "runtime/vk/context.h"
#include "runtime/vk/fault.h"
#include "runtime/vk/pipeline.h"
#include "runtime/vk/profile.h"
#include "runtime/vk/switches.h"

namespace eaglevk::vk {
namespace {

constexpr uint32_t kSetsPerPool = 512;
// Distinct descriptor sets a recorder keeps (a decode step binds about 80, a speculative round a
// few hundred; an 8B prefill in chunks a few thousand over its rows): beyond, all are dropped.
constexpr size_t kMaxCachedSets = 16384;
constexpr uint32_t kDescriptorsPerPool = kSetsPerPool * 8;
constexpr uint32_t kMaxTimestamps = 4096;

Access whole(BufferRange r, bool read, bool write) {
  return Access{r.buffer, r.offset, r.bytes, r.bytes, 1, read, write};
}

}  // namespace

Arg reads(BufferRange r) { return {r, whole(r, true, false)}; }
Arg writes(BufferRange r) { return {r, whole(r, false, true)}; }
Arg updates(BufferRange r) { return {r, whole(r, true, true)}; }
Arg unused(BufferRange r) { return {r, Access{r.buffer, r.offset, 0, 0, 1, false, false}}; }
Arg writes_rows(BufferRange bind, uint64_t first_byte, uint64_t row_bytes, uint64_t stride, uint32_t rows) {
  return {bind, Access{bind.buffer, bind.offset + first_byte, row_bytes, stride, rows, false, true}};
}
Arg reads_rows(BufferRange bind, uint64_t first_byte, uint64_t row_bytes, uint64_t stride, uint32_t rows) {
  return {bind, Access{bind.buffer, bind.offset + first_byte, row_bytes, stride, rows, true, false}};
}
Arg writes_scattered(BufferRange range, uint64_t bytes) { return {range, whole(range, false, true), bytes}; }

SyncMode sync_mode_from_env() { return switch_choice("EAGLEVK_SYNC") == "full" ? SyncMode::Full : SyncMode::Tracked; }

bool replay_from_env() { return switch_bool("EAGLEVK_REPLAY"); }

Recorder::Recorder(const Context& ctx) : ctx_(ctx) {
  sync = sync_mode_from_env();
  profile = profiling_requested();
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = ctx.queue_family;
  EAGLEVK_VK(vkCreateCommandPool(ctx.device, &pool_info, nullptr, &pool_));
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  EAGLEVK_VK(vkAllocateCommandBuffers(ctx.device, &alloc, &cmd_));
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  EAGLEVK_VK(vkCreateFence(ctx.device, &fence_info, nullptr, &fence_));
}

Recorder::Recorder(const Context& ctx, Dry) : ctx_(ctx), dry_(true) {}

Recorder::~Recorder() {
  if (dry_) return;
  // The command buffer may not be freed while it runs. A lost device's driver answers at once;
  // a hung one gets a second only, since the user already waited fence_timeout_ns for it, and
  // if it still runs its pool and fence are left allocated: destroying objects a device may
  // still use is worse than leaking them once.
  if (pending_ &&
      vkWaitForFences(ctx_.device, 1, &fence_, VK_TRUE, ctx_.lost ? 1'000'000'000ull : ctx_.fence_timeout_ns) ==
          VK_TIMEOUT)
    return;
  for (VkDescriptorPool p : descriptor_pools_) vkDestroyDescriptorPool(ctx_.device, p, nullptr);
  if (queries_) vkDestroyQueryPool(ctx_.device, queries_, nullptr);
  vkDestroyFence(ctx_.device, fence_, nullptr);
  vkDestroyCommandPool(ctx_.device, pool_, nullptr);
}

void Recorder::begin() {
  if (dry_) {
    recording_ = true;
    ++recordings_;
    hazards_.clear();
    barriers_ = dispatches_ = 0;
    return;
  }
  if (pending_) wait();
  ctx_.check_usable();
  if (!cache_descriptor_sets || sets_.size() >= kMaxCachedSets) {
    for (VkDescriptorPool p : descriptor_pools_) EAGLEVK_VK(vkResetDescriptorPool(ctx_.device, p, 0));
    current_pool_ = 0;
    sets_.clear();
  }
  EAGLEVK_VK(vkResetCommandBuffer(cmd_, 0));
  VkCommandBufferBeginInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  EAGLEVK_VK(vkBeginCommandBuffer(cmd_, &info));
  recording_ = true;
  ++recordings_;
  wrote_anything_ = false;
  hazards_.clear();
  barriers_ = 0;
  dispatches_ = 0;
  query_names_.clear();
  query_bytes_.clear();
  began_ = std::chrono::steady_clock::now();
  if (profile && ctx_.info.features.timestamps) {
    if (!queries_) {
      VkQueryPoolCreateInfo q{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      q.queryType = VK_QUERY_TYPE_TIMESTAMP;
      q.queryCount = kMaxTimestamps;
      EAGLEVK_VK(vkCreateQueryPool(ctx_.device, &q, nullptr, &queries_));
      query_capacity_ = kMaxTimestamps;
    }
    vkCmdResetQueryPool(cmd_, queries_, 0, query_capacity_);
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 0);
    query_names_.push_back("begin");
    query_bytes_.push_back(0);
  }
}

void Recorder::barrier() {
  // Compute and transfer commands share buffers, so one global memory barrier covers both.
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT |
                    VK_ACCESS_TRANSFER_READ_BIT;
  b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT;
  VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  if (!dry_) vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &b, 0, nullptr, 0, nullptr);
  hazards_.clear();
  ++barriers_;
}

// What a binding counts as for barriers: what it touches, and at least a read of its whole
// bound range. Vulkan orders a dispatch by the ranges its shader statically binds, not by what one
// variant touches, so a binding the dispatch never reads (unused) or reads only rows of still
// must not share bytes with an unordered write: arena planning may put another tensor there.
static Access barrier_access(const Arg& a) {
  Access access = a.access;
  if (access.write && (access.rows != 1 || access.bytes != a.bind.bytes || access.offset != a.bind.offset))
    return access;  // a partial write: its own rows (two halves of one row may run unordered)
  access.offset = a.bind.offset;
  access.bytes = a.bind.bytes;
  access.stride = 0;
  access.rows = 1;
  access.read = true;
  return access;
}

void Recorder::before_command(std::span<const Arg> args) {
  if (!recording_) fail("command recorded outside begin()/submit()");
  for (const Arg& a : args)
    if (hazards_.conflicts(barrier_access(a))) {
      barrier();
      break;
    }
  command_bytes_ = 0;
  if (log) {
    for (const Arg& a : args)
      if (a.access.read || a.access.write) log->entries.push_back({log->commands, a.access});
    ++log->commands;
  }
  for (const Arg& a : args) {
    hazards_.add(barrier_access(a));
    wrote_anything_ |= a.access.write;
    command_bytes_ +=
        a.moved ? *a.moved : a.access.bytes * a.access.rows * ((a.access.read ? 1 : 0) + (a.access.write ? 1 : 0));
  }
}

void Recorder::after_command(const char* name, const std::string* kernel) {
  if (sync == SyncMode::Full) barrier();
  if (!query_names_.empty() && query_names_.size() < query_capacity_) {
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, uint32_t(query_names_.size()));
    // The profile groups commands by shader family and op name, layer numbers folded away.
    std::string label = kernel ? kernel->substr(0, kernel->find('<')) + " " : std::string("transfer ");
    for (const char* c = name; *c; ++c) {
      const bool digit = std::isdigit(static_cast<unsigned char>(*c));
      if (!digit) label += *c;
      else if (label.back() != '#') label += '#';
    }
    query_names_.push_back(std::move(label));
    query_bytes_.push_back(command_bytes_);
  }
}

VkDescriptorSet Recorder::allocate_set(VkDescriptorSetLayout layout) {
  for (;; ++current_pool_) {
    if (current_pool_ == descriptor_pools_.size()) {
      const VkDescriptorPoolSize sizes[] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDescriptorsPerPool},
                                            {VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER, kDescriptorsPerPool}};
      VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
      info.maxSets = kSetsPerPool;
      info.poolSizeCount = 2;
      info.pPoolSizes = sizes;
      VkDescriptorPool pool;
      EAGLEVK_VK(vkCreateDescriptorPool(ctx_.device, &info, nullptr, &pool));
      descriptor_pools_.push_back(pool);
    }
    VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    alloc.descriptorPool = descriptor_pools_[current_pool_];
    alloc.descriptorSetCount = 1;
    alloc.pSetLayouts = &layout;
    VkDescriptorSet set;
    VkResult r = vkAllocateDescriptorSets(ctx_.device, &alloc, &set);
    if (r == VK_SUCCESS) return set;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) check(r, "vkAllocateDescriptorSets");
  }
}

void Recorder::dispatch(const Kernel& kernel, std::span<const Arg> args, const void* push, uint32_t push_bytes,
                        uint32_t gx, uint32_t gy, uint32_t gz, const char* name) {
  const ShaderInterface& iface = kernel.interface;
  if (args.size() != iface.bindings)
    fail("dispatch of {}: {} buffers given, the shader binds {}", kernel.name, args.size(), iface.bindings);
  if (push_bytes != iface.push_constant_bytes)
    fail("dispatch of {}: {} bytes of push constants given, the shader declares {}", kernel.name, push_bytes,
         iface.push_constant_bytes);
  if (gx == 0 || gy == 0 || gz == 0) return;  // nothing to do: an empty batch
  const uint32_t groups[3] = {gx, gy, gz};
  for (int i = 0; i < 3; ++i)
    if (groups[i] > ctx_.max_workgroups[i])
      fail("dispatch of {}: {} workgroups in dimension {} exceed the device's maxComputeWorkGroupCount {}",
           kernel.name, groups[i], "xyz"[i], ctx_.max_workgroups[i]);
  const uint64_t align = ctx_.info.features.min_storage_buffer_offset_alignment;
  for (size_t i = 0; i < args.size(); ++i) {
    const BufferRange& r = args[i].bind;
    if (!r.buffer || !(r.buffer->handle || (dry_ && r.buffer->dry()))) fail("dispatch of {}: unbound buffer", kernel.name);
    if (r.offset + r.bytes > r.buffer->bytes)
      fail("dispatch of {}: range [{}, +{}) outside buffer '{}' of {} bytes", kernel.name, r.offset, r.bytes,
           r.buffer->name, r.buffer->bytes);
    if (iface.texel_formats[i] != VK_FORMAT_UNDEFINED) continue;  // texel_view() checks its own limits
    if (r.bytes > ctx_.max_binding_range)
      fail("dispatch of {}: binding of {} bytes of '{}' exceeds maxStorageBufferRange {}", kernel.name, r.bytes,
           r.buffer->name, ctx_.max_binding_range);
    if (align && r.offset % align)
      fail("dispatch of {}: offset {} into '{}' is not a multiple of {}", kernel.name, r.offset, r.buffer->name,
           align);
  }
  before_command(args);
  ++dispatches_;
  if (dry_) return;
  VkDescriptorSet set = descriptor_set(kernel, args);
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline);
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, kernel.layout, 0, 1, &set, 0, nullptr);
  if (push_bytes) vkCmdPushConstants(cmd_, kernel.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cmd_, gx, gy, gz);
  after_command(name, &kernel.name);
}

size_t Recorder::KeyHash::operator()(const std::vector<uint64_t>& key) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (uint64_t w : key) h = (h ^ w) * 1099511628211ull;
  return size_t(h);
}

VkDescriptorSet Recorder::descriptor_set(const Kernel& kernel, std::span<const Arg> args) {
  const ShaderInterface& iface = kernel.interface;
  key_scratch_.clear();
  key_scratch_.push_back(uint64_t(reinterpret_cast<uintptr_t>(kernel.set_layout)));
  for (size_t i = 0; i < args.size(); ++i) {
    const BufferRange& r = args[i].bind;
    key_scratch_.insert(key_scratch_.end(), {r.buffer->serial, r.offset, r.bytes, uint64_t(iface.texel_formats[i])});
  }
  if (!cache_descriptor_sets) key_scratch_.push_back(sets_written_);  // never found again
  if (auto found = sets_.find(key_scratch_); found != sets_.end()) return found->second;

  VkDescriptorSet set = allocate_set(kernel.set_layout);
  infos_scratch_.resize(args.size());
  views_scratch_.resize(args.size());
  writes_scratch_.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    VkWriteDescriptorSet& w = writes_scratch_[i];
    w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.dstBinding = uint32_t(i);
    w.descriptorCount = 1;
    if (iface.texel_formats[i] == VK_FORMAT_UNDEFINED) {
      infos_scratch_[i] = {args[i].bind.buffer->handle, args[i].bind.offset, args[i].bind.bytes};
      w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      w.pBufferInfo = &infos_scratch_[i];
    } else {
      views_scratch_[i] = texel_view(args[i].bind, iface.texel_formats[i], kernel.name.c_str());
      w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
      w.pTexelBufferView = &views_scratch_[i];
    }
  }
  vkUpdateDescriptorSets(ctx_.device, uint32_t(writes_scratch_.size()), writes_scratch_.data(), 0, nullptr);
  sets_.emplace(key_scratch_, set);
  ++sets_written_;
  return set;
}

void Recorder::copy(BufferRange src, BufferRange dst, const char* name) {
  if (src.bytes != dst.bytes) fail("copy of {} bytes into a {}-byte range", src.bytes, dst.bytes);
  if (src.bytes == 0) return;
  if (src.offset + src.bytes > src.buffer->bytes || dst.offset + dst.bytes > dst.buffer->bytes)
    fail("copy '{}' outside its buffers", name);
  Arg args[] = {reads(src), writes(dst)};
  before_command(args);
  if (dry_) return;
  VkBufferCopy region{src.offset, dst.offset, src.bytes};
  vkCmdCopyBuffer(cmd_, src.buffer->handle, dst.buffer->handle, 1, &region);
  after_command(name);
}

void Recorder::fill(BufferRange dst, uint32_t value, const char* name) {
  if (dst.bytes == 0) return;
  if (dst.offset % 4 || dst.bytes % 4) fail("fill '{}' needs 4-byte aligned offset and size", name);
  Arg args[] = {writes(dst)};
  before_command(args);
  if (dry_) return;
  vkCmdFillBuffer(cmd_, dst.buffer->handle, dst.offset, dst.bytes, value);
  after_command(name);
}

void Recorder::submit() {
  if (!recording_) fail("submit without begin()");
  if (dry_) fail("a dry recorder submits nothing");
  if (wrote_anything_) {
    // Make device writes visible to the host before the fence releases the read-back.
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
  }
  EAGLEVK_VK(vkEndCommandBuffer(cmd_));
  recording_ = false;
  record_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began_).count();
  submit_recorded();
  replayed_ = false;
}

void Recorder::resubmit() {
  if (dry_) fail("a dry recorder submits nothing");
  if (recording_) fail("resubmit while recording");
  if (recordings_ == 0) fail("resubmit before anything was recorded");
  if (pending_) wait();
  record_ms_ = 0;
  submit_recorded();
  replayed_ = true;
}

void Recorder::submit_recorded() {
  if (pending_) wait();
  ctx_.check_usable();
  EAGLEVK_VK(vkResetFences(ctx_.device, 1, &fence_));
  VkSubmitInfo info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd_;
  VkResult result = take_fault(FaultPoint::Submit);
  if (result == VK_SUCCESS) result = vkQueueSubmit(ctx_.queue, 1, &info, fence_);
  ctx_.check_result(result, "vkQueueSubmit");
  pending_ = true;
}

void Recorder::wait() {
  if (!pending_) return;
  const auto t0 = std::chrono::steady_clock::now();
  VkResult result = take_fault(FaultPoint::Wait);
  if (result == VK_SUCCESS) result = vkWaitForFences(ctx_.device, 1, &fence_, VK_TRUE, ctx_.fence_timeout_ns);
  // On a timeout the submission may still be running: the fence stays pending, the device hung.
  if (result == VK_TIMEOUT)
    ctx_.raise(VulkanError(VK_TIMEOUT, fmt::format("the device did not finish a submission within {} s "
                                                   "(EAGLEVK_FENCE_TIMEOUT): treated as lost",
                                                   ctx_.fence_timeout_ns / 1'000'000'000ull)));
  ctx_.check_result(result, "vkWaitForFences");
  pending_ = false;
  if (profile) {
    const double wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<TimedCommand> commands = timings();
    add_profiled_submission(commands.data(), commands.size(), record_ms_, wait_ms, replayed_);
  }
}

void Recorder::submit_and_wait() {
  submit();
  wait();
}

std::vector<TimedCommand> Recorder::timings() const {
  std::vector<TimedCommand> out;
  if (query_names_.size() < 2 || pending_) return out;
  std::vector<uint64_t> ticks(query_names_.size());
  EAGLEVK_VK(vkGetQueryPoolResults(ctx_.device, queries_, 0, uint32_t(ticks.size()), ticks.size() * 8, ticks.data(),
                                   8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const double ns = ctx_.info.features.timestamp_period_ns;
  for (size_t i = 1; i < ticks.size(); ++i)
    out.push_back({query_names_[i], double(ticks[i] - ticks[i - 1]) * ns * 1e-6, query_bytes_[i]});
  return out;
}

}  // namespace eaglevk::vk
