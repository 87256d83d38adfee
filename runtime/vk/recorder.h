#pragma once
// Records dispatches and copies into one command buffer. Every command declares the buffer
// ranges it reads and writes; the recorder puts a barrier exactly where a hazard exists since
// the last one (read-after-write, write-after-write, write-after-read) and nowhere else.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <vulkan/vulkan.h>

#include "runtime/vk/buffer.h"
#include "runtime/vk/hazard.h"

namespace eaglevk::vk {

struct Context;
struct Kernel;

// One binding of a dispatch: the range bound to the shader and the bytes it really touches
// (by default the whole bound range).
struct Arg {
  BufferRange bind;
  Access access;
  // Bytes the profile counts for it; unset: the access's rows, once per read and per write.
  std::optional<uint64_t> moved = std::nullopt;
};

Arg reads(BufferRange range);
Arg writes(BufferRange range);
Arg updates(BufferRange range);  // read and written by the same dispatch (in place)
// Bound because the shader declares the binding, never touched by this dispatch (a variant
// that does not use it): no hazard, no bytes in the profile.
Arg unused(BufferRange range);
// Writes `rows` rows of `row_bytes` each, `stride` bytes apart, starting `first_byte` into the
// bound range: one half of each row of a concatenated activation, for instance.
Arg writes_rows(BufferRange bind, uint64_t first_byte, uint64_t row_bytes, uint64_t stride, uint32_t rows);
Arg reads_rows(BufferRange bind, uint64_t first_byte, uint64_t row_bytes, uint64_t stride, uint32_t rows);
// Writes `bytes` somewhere in the range, where only the device knows (KV-cache rows at slots the
// device reads): a hazard on the whole range, `bytes` in the profile.
Arg writes_scattered(BufferRange range, uint64_t bytes);

enum class SyncMode {
  Tracked,  // barriers only where a hazard exists
  Full,     // a barrier after every command (EAGLEVK_SYNC=full), for debugging and tests
};
SyncMode sync_mode_from_env();
// Whether a pass that matches the one last recorded is resubmitted instead of recorded again
// (EAGLEVK_REPLAY=0 records every pass: the reference for tests, and for measuring replay).
bool replay_from_env();

// The buffer ranges each recorded command touched, in order: what arena lifetimes are derived
// from (vk::ArenaPlan::derive). Command i's accesses carry command == i.
struct CommandLog {
  struct Entry {
    uint32_t command = 0;
    Access access;
  };
  std::vector<Entry> entries;
  uint32_t commands = 0;
};

struct TimedCommand {
  std::string name;
  double ms = 0;
  uint64_t bytes = 0;  // of its bindings' declared ranges, read plus written
};

class Recorder {
 public:
  explicit Recorder(const Context& ctx);
  // A dry recorder checks and logs commands as a real one does but records nothing: it makes no
  // Vulkan object, accepts dry buffers (vk::DryAllocations) and refuses to submit.
  struct Dry {};
  Recorder(const Context& ctx, Dry);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  SyncMode sync = SyncMode::Tracked;
  bool profile = false;  // write a GPU timestamp after every named command
  // Reuse a descriptor set written for the same kernel layout and bound ranges (below); off,
  // every dispatch writes a set of its own, as before: for measuring what the cache saves.
  bool cache_descriptor_sets = true;
  // Where each command's accesses are appended, when set (dry recordings for arena planning).
  CommandLog* log = nullptr;

  void begin();
  void dispatch(const Kernel& kernel, std::span<const Arg> args, const void* push, uint32_t push_bytes,
                uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1, const char* name = "");
  void dispatch(const Kernel& kernel, std::initializer_list<Arg> args, const void* push, uint32_t push_bytes,
                uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1, const char* name = "") {
    dispatch(kernel, std::span<const Arg>(args.begin(), args.size()), push, push_bytes, groups_x, groups_y,
             groups_z, name);
  }
  template <typename Push>
  void dispatch(const Kernel& kernel, std::initializer_list<Arg> args, const Push& push, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1, const char* name = "") {
    dispatch(kernel, args, &push, uint32_t(sizeof(Push)), gx, gy, gz, name);
  }
  void copy(BufferRange src, BufferRange dst, const char* name = "copy");
  void fill(BufferRange dst, uint32_t value, const char* name = "fill");
  // An explicit barrier, for a hazard the declared ranges cannot express.
  void barrier();

  void submit();         // end recording and submit with the fence
  void wait();           // wait for the last submission
  void submit_and_wait();
  // Submits the commands last recorded again, as they are: their descriptor sets, barriers and
  // push constants included, so whatever changes between submissions must live in buffers
  // (a decode step's token id and position come from the upload buffer it copies). The
  // profile counts no host recording for it.
  void resubmit();

  // How many times begin() has run: a caller that recorded at count n may resubmit while the
  // count is still n, that is, while no one has recorded anything else into this recorder.
  uint64_t recordings() const { return recordings_; }

  // Counters for tests and profiling.
  uint32_t barriers() const { return barriers_; }
  uint32_t dispatches() const { return dispatches_; }
  // Descriptor sets allocated and written since this recorder was made: a dispatch whose
  // kernel layout and bound ranges were seen before reuses that set.
  uint64_t descriptor_sets_written() const { return sets_written_; }
  // Per-command GPU times of the last submission (profile = true).
  std::vector<TimedCommand> timings() const;

 private:
  void before_command(std::span<const Arg> args);
  void after_command(const char* name, const std::string* kernel = nullptr);
  void submit_recorded();
  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout);
  VkDescriptorSet descriptor_set(const Kernel& kernel, std::span<const Arg> args);

  // Descriptor sets by (set layout, then each binding's buffer serial, offset, bytes and texel
  // format), written once and never updated again, so a set may be bound by any number of
  // recordings while earlier ones still run. Cleared, with the pools, at a begin() once it
  // holds kMaxCachedSets (nothing is in flight then).
  struct KeyHash {
    size_t operator()(const std::vector<uint64_t>& key) const;
  };
  std::unordered_map<std::vector<uint64_t>, VkDescriptorSet, KeyHash> sets_;
  std::vector<uint64_t> key_scratch_;
  uint64_t sets_written_ = 0;

  const Context& ctx_;
  bool dry_ = false;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> descriptor_pools_;
  size_t current_pool_ = 0;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t query_capacity_ = 0;
  std::vector<std::string> query_names_;
  std::vector<uint64_t> query_bytes_;  // TimedCommand::bytes of each timed command
  uint64_t command_bytes_ = 0;         // of the command being recorded
  // Host times of the profiled submission in flight (profile = true).
  std::chrono::steady_clock::time_point began_;
  double record_ms_ = 0;
  HazardSet hazards_;
  bool recording_ = false;
  bool pending_ = false;
  bool replayed_ = false;  // the submission in flight resubmits earlier commands
  bool wrote_anything_ = false;
  uint32_t barriers_ = 0;
  uint32_t dispatches_ = 0;
  uint64_t recordings_ = 0;
  std::vector<VkWriteDescriptorSet> writes_scratch_;
  std::vector<VkDescriptorBufferInfo> infos_scratch_;
  std::vector<VkBufferView> views_scratch_;
};

}  // namespace eaglevk::vk
