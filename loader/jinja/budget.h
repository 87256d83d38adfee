#pragma once
// What one render of a chat template may spend. A template is downloaded data, so every bound
// is counted where the work or the memory is, not only per statement: a step count (every
// statement, expression and loop turn), a work count (the bytes and items walked inside a step:
// indexing, splitting, joining, comparing, printing), the memory the render holds at once (its
// values, their strings and the output), the size of any one value, and nesting (of values, of
// macro calls, of evaluation). Past a bound the render stops with an eaglevk::Error naming it.
#include <cstddef>

namespace eaglevk::loader::jinja {

// The defaults hold any real chat (a 16 MiB message is millions of tokens) and keep a hostile
// template within a few seconds and a few hundred megabytes.
struct Limits {
  size_t max_steps = 2'000'000;
  size_t max_work = size_t{1} << 30;  // bytes walked (an item visited counts kItemWork), in all
  size_t max_memory_bytes = size_t{128} << 20;
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_value_bytes = size_t{16} << 20;  // any one string or list built
  int max_call_depth = 32;                    // macro calls
  int max_eval_depth = 512;                   // statements, expressions and calls inside each other
};

// One render's counters against its Limits.
class Budget {
 public:
  explicit Budget(const Limits& limits) : limits_(limits) {}
  const Limits& limits() const { return limits_; }
  // Inline: every value made or copied in a render comes through here.
  void charge_memory(size_t bytes) {
    if (bytes > limits_.max_memory_bytes - memory_) over_memory();
    memory_ += bytes;
  }
  void refund_memory(size_t bytes) noexcept { memory_ -= bytes < memory_ ? bytes : memory_; }
  void charge_work(size_t units) {
    if (units > limits_.max_work - work_) over_work();
    work_ += units;
  }
  size_t memory() const { return memory_; }

 private:
  [[noreturn]] void over_memory() const;
  [[noreturn]] void over_work() const;
  const Limits& limits_;
  size_t memory_ = 0;
  size_t work_ = 0;
};

// The budget of the render running on this thread; null outside a render. Values are made and
// copied deep inside helpers that know nothing of the render (value.cpp, the builtins), and
// every copy must be charged: an ambient pointer reaches them all, where a context argument
// would have to pass through every signature and every copy constructor.
inline thread_local Budget* active_budget_on_this_thread = nullptr;  // set by ActiveBudget only
inline Budget* active_budget() noexcept { return active_budget_on_this_thread; }

// Makes `budget` the active one for its lifetime (renders do not nest, but this restores).
class ActiveBudget {
 public:
  explicit ActiveBudget(Budget& budget);
  ~ActiveBudget();
  ActiveBudget(const ActiveBudget&) = delete;
  ActiveBudget& operator=(const ActiveBudget&) = delete;

 private:
  Budget* previous_;
};

// Work is counted in bytes walked; visiting an item or a node of a value (copying, comparing,
// printing it) counts as this many, about what a visit costs next to walking a byte.
inline constexpr size_t kItemWork = 16;

// Work charged to the active budget; nothing outside a render.
inline void charge_work(size_t units) {
  if (Budget* b = active_budget()) b->charge_work(units);
}
inline void charge_items(size_t items) { charge_work(items * kItemWork); }
size_t max_value_bytes();  // the active render's, or the default

// Bytes held by one object, charged to the render that made or copied it and refunded when the
// object dies. A copy is charged again (a Value's copy copies its string), and `copy_work` of
// it (the string's bytes) count as work; a move passes the charge on. Made outside a render it
// only remembers its size, so that a copy made inside one (of a template literal, of a message)
// is charged there.
class Charge {
 public:
  Charge() noexcept = default;
  explicit Charge(size_t bytes, size_t copy_work = 0) : bytes_(bytes), copy_work_(copy_work) {
    if (Budget* b = active_budget()) {
      b->charge_memory(bytes);
      budget_ = b;
    }
  }
  Charge(const Charge& other) : Charge(other.bytes_, other.copy_work_) { charge_work(copy_work_); }
  Charge(Charge&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_), copy_work_(other.copy_work_) {
    other.budget_ = nullptr;
    other.bytes_ = 0;
  }
  Charge& operator=(const Charge& other);
  Charge& operator=(Charge&& other) noexcept {
    if (this != &other) {
      release();
      budget_ = other.budget_;
      bytes_ = other.bytes_;
      copy_work_ = other.copy_work_;
      other.budget_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  ~Charge() { release(); }
  size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (budget_) budget_->refund_memory(bytes_);
    budget_ = nullptr;
    bytes_ = 0;
  }
  Budget* budget_ = nullptr;  // where bytes_ was charged; null when it was not
  size_t bytes_ = 0;
  size_t copy_work_ = 0;
};

}  // namespace eaglevk::loader::jinja
