#pragma once
// Integer flag values, parsed by one function for every flag: a decimal integer (an optional
// minus sign, then digits, nothing else) within the flag's range, else a usage error naming the
// flag and the range: "'abc' is not an integer", "4294967297 is too large (the range is
// 0..4294967295)". Values are checked before CLI11 converts them, so that nothing wraps (-1 as
// 2^64 - 1) or is clipped on the way.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace eaglevk::cli {

// The reason `text` is not an integer in [min, max], or "" when it is one.
std::string integer_problem(std::string_view text, int64_t min, uint64_t max);

// The value, or a usage error "FLAG: REASON".
int64_t parse_integer(std::string_view text, std::string_view flag, int64_t min, int64_t max);
uint64_t parse_unsigned(std::string_view text, std::string_view flag, uint64_t max = UINT64_MAX);

// The same check for a CLI11 option (CLI11 prefixes the reason with the option's name and
// main() reports it as a usage error); no text is added to the help.
CLI::Validator integer_in(int64_t min, uint64_t max);
template <typename T>
CLI::Validator integer_flag() {
  return integer_in(int64_t(std::numeric_limits<T>::min()), uint64_t(std::numeric_limits<T>::max()));
}

// --seed: -1 asks for a random seed (llama.cpp's convention: nullopt here; the command draws it
// with announced_random_seed, spec_flags.h); any other value is a seed in 0..2^64-1.
std::optional<uint64_t> parse_seed(std::string_view text);

}  // namespace eaglevk::cli
