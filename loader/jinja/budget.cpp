#include "loader/jinja/budget.h"

#include <eaglevk/error.h>

namespace eaglevk::loader::jinja {
namespace {

// "128 MiB" for round sizes, else the byte count.
std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

}  // namespace

void Budget::over_memory() const {
  fail("the render holds more than {} (the template memory budget)", size_text(limits_.max_memory_bytes));
}

void Budget::over_work() const {
  fail("the render does more than {} units of work (the template work budget: bytes and items walked)",
       limits_.max_work);
}

ActiveBudget::ActiveBudget(Budget& budget) : previous_(active_budget_on_this_thread) {
  active_budget_on_this_thread = &budget;
}
ActiveBudget::~ActiveBudget() { active_budget_on_this_thread = previous_; }

size_t max_value_bytes() {
  const Budget* b = active_budget();
  return b ? b->limits().max_value_bytes : Limits{}.max_value_bytes;
}

Charge& Charge::operator=(const Charge& other) {
  if (this != &other) *this = Charge(other);
  return *this;
}


}  // namespace eaglevk::loader::jinja
