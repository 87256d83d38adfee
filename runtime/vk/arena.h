#pragma once
// Activation memory planned per pass: every intermediate gets an offset from its lifetimes, so
// tensors never live at the same command share bytes. The lifetimes are not written down: a
// forward is recorded dry (Recorder::Dry) against the arena laid out without reuse, and each
// tensor's live ranges are read off the commands that touched its bytes (derive). With reuse
// off every intermediate gets its own range, which tests use to show that reuse changes no
// result.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/vk/buffer.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::vk {

struct Context;

// How long a tensor's bytes must hold beyond the commands of a pass that touch them.
enum class Lifetime {
  Pass,     // only between its writes and their last reads in the pass
  Output,   // also from its last write to the end of the pass: read by what is recorded after
            // the pass (the engine samples the logits)
  Carried,  // through every pass: it carries rows from one pass to the next (the draft's feature)
};

// Commands [first, last] of a recorded pass; a pass of n commands calls its end n.
struct LiveRange {
  uint32_t first = 0, last = 0;
};

struct ArenaPlan {
  struct Tensor {
    std::string name;
    uint64_t bytes = 0;
    Lifetime lifetime = Lifetime::Pass;
    uint64_t offset = 0;  // set by plan()
  };
  std::vector<Tensor> tensors;
  // Tensors i and j may not share bytes: conflicts[i * tensors.size() + j]. Filled by derive().
  std::vector<uint8_t> conflicts;
  std::vector<uint8_t> touched;  // by some derived pass
  uint32_t passes_derived = 0;
  uint64_t total_bytes = 0;
  uint64_t alignment = 256;

  // Returns the tensor's id in this plan.
  uint32_t add(std::string name, uint64_t bytes, Lifetime lifetime = Lifetime::Pass);
  // Lays the tensors out one after another (what a dry recording runs against: plan(false)).
  // Then, for each pass recorded against `layout` (a buffer of at least total_bytes), adds its
  // conflicts: two tensors conflict when their live ranges in that pass meet. A tensor no
  // derived pass touches conflicts with every other (nothing says when it could be used).
  void derive(const Buffer& layout, const CommandLog& pass);
  bool conflict(uint32_t a, uint32_t b) const;
  // Reuse: greedy by size, each tensor at the lowest offset that meets no conflicting tensor.
  // Reuse needs at least one derived pass.
  void plan(bool reuse);
  // Pairs of tensors that share bytes although they conflict: empty for a plan that plan() made.
  std::vector<std::pair<uint32_t, uint32_t>> aliased() const;
};

// Each tensor's live ranges in one pass recorded against the plan laid out without reuse in
// `layout`: a range opens at a write that follows a read (or at the first access) and runs to
// the last read before the next such write; Output and Carried tensors as their Lifetime says.
// Fails for a Pass tensor read before the pass writes it (it would read a stale value).
std::vector<std::vector<LiveRange>> live_ranges(const ArenaPlan& plan, const Buffer& layout, const CommandLog& pass);

bool arena_reuse_from_env();  // EAGLEVK_ARENA_REUSE=0 turns reuse off

// A planned arena backed by one device buffer.
struct Arena {
  ArenaPlan plan;
  Buffer buffer;

  void allocate(const Context& ctx, bool reuse, const std::string& name);
  // The layout without reuse in a dry buffer (no memory): what a dry recording runs against.
  void lay_out_dry(const Context& ctx, const std::string& name);
  BufferRange operator[](uint32_t id) const {
    return {buffer, plan.tensors[id].offset, plan.tensors[id].bytes};
  }
};

}  // namespace eaglevk::vk
