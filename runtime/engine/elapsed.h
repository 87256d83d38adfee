#pragma once
// Wall time since a point, in seconds: the one clock the generation loops report with.
#include <chrono>

namespace eaglevk::engine {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace eaglevk::engine
