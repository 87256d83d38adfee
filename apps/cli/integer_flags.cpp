#include "apps/cli/integer_flags.h"

#include <charconv>

#include <fmt/format.h>

#include "apps/cli/usage.h"

namespace eaglevk::cli {
namespace {

// The text as typed, shortened: a flag value may be thousands of digits long.
std::string shown(std::string_view text) {
  return text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text);
}

}  // namespace

std::string integer_problem(std::string_view text, int64_t min, uint64_t max) {
  const bool negative = text.starts_with('-');
  const std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return fmt::format("'{}' is not an integer", shown(text));
  const std::string range = fmt::format("the range is {}..{}", min, max);
  uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  const bool overflow = ec == std::errc::result_out_of_range;
  if (negative && magnitude != 0) {
    // -magnitude >= min, with min <= 0, as magnitudes: magnitude <= -min.
    const uint64_t limit = min < 0 ? uint64_t(-(min + 1)) + 1 : 0;
    if (overflow || magnitude > limit) return fmt::format("{} is too small ({})", shown(text), range);
    return "";
  }
  if (overflow || magnitude > max) return fmt::format("{} is too large ({})", shown(text), range);
  if (min > 0 && magnitude < uint64_t(min)) return fmt::format("{} is too small ({})", shown(text), range);
  return "";
}

int64_t parse_integer(std::string_view text, std::string_view flag, int64_t min, int64_t max) {
  if (std::string problem = integer_problem(text, min, uint64_t(max)); !problem.empty())
    usage_fail("{}: {}", flag, problem);
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

uint64_t parse_unsigned(std::string_view text, std::string_view flag, uint64_t max) {
  if (std::string problem = integer_problem(text, 0, max); !problem.empty()) usage_fail("{}: {}", flag, problem);
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;  // "-0"
  uint64_t value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return value;
}

CLI::Validator integer_in(int64_t min, uint64_t max) {
  return CLI::Validator([min, max](std::string& text) { return integer_problem(text, min, max); }, "");
}

std::optional<uint64_t> parse_seed(std::string_view text) {
  if (text == "-1") return std::nullopt;
  if (text.starts_with('-') && integer_problem(text, INT64_MIN, 0).empty() && text != "-0")
    usage_fail("--seed: {} is not a seed (give 0..{}, or -1 for a random one)", shown(text), UINT64_MAX);
  return parse_unsigned(text, "--seed");
}

}  // namespace eaglevk::cli
