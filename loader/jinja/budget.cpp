#include "loader/jinja/budget.h"

#include <utility>

#include <eaglevk/error.h>

namespace eaglevk::loader::jinja {
namespace {

thread_local Budget* active = nullptr;

// "128 MiB" for round sizes, else the byte count.
std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

}  // namespace

void Budget::charge_memory(size_t bytes) {
  if (bytes > limits_.max_memory_bytes - memory_)
    fail("the render holds more than {} (the template memory budget)", size_text(limits_.max_memory_bytes));
  memory_ += bytes;
}

void Budget::charge_work(size_t units) {
  if (units > limits_.max_work - work_)
    fail("the render does more than {} units of work (the template work budget: bytes and items walked)",
         limits_.max_work);
  work_ += units;
}

Budget* active_budget() noexcept { return active; }

ActiveBudget::ActiveBudget(Budget& budget) : previous_(active) { active = &budget; }
ActiveBudget::~ActiveBudget() { active = previous_; }

void charge_work(size_t units) {
  if (active) active->charge_work(units);
}

size_t max_value_bytes() { return active ? active->limits().max_value_bytes : Limits{}.max_value_bytes; }

Charge::Charge(size_t bytes, size_t copy_work) : bytes_(bytes), copy_work_(copy_work) {
  if (active) {
    active->charge_memory(bytes);
    budget_ = active;
  }
}

Charge::Charge(const Charge& other) : Charge(other.bytes_, other.copy_work_) { charge_work(copy_work_); }

Charge& Charge::operator=(const Charge& other) {
  if (this != &other) *this = Charge(other);
  return *this;
}

Charge& Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    copy_work_ = other.copy_work_;
  }
  return *this;
}

void Charge::add(size_t bytes) {
  if (budget_) {
    budget_->charge_memory(bytes);
  } else if (active) {
    active->charge_memory(bytes_ + bytes);  // from now on this one is charged here, all of it
    budget_ = active;
  }
  bytes_ += bytes;
}

void Charge::release() noexcept {
  if (budget_) budget_->refund_memory(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

}  // namespace eaglevk::loader::jinja
