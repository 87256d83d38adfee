#pragma once
// Every EAGLEVK_* environment variable, declared once (switches.cpp's table): its type, range,
// default and meaning. All of them are read through this file, so that each is parsed one way:
// a malformed value is an error naming the variable and what it accepts, an EAGLEVK_* name the
// table does not know is a warning with the closest known name, and a retired tuning variable
// (replaced by EAGLEVK_PROFILE_OVERRIDE's keys) is an error that spells its replacement.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::vk {

enum class SwitchType {
  Bool,     // 1/0, true/false, on/off, yes/no, any case
  Choice,   // one of `values` ("full|tracked")
  Uint,     // a decimal whole number in min..max
  Size,     // bytes, or with a K/M/G suffix (context.cpp parses it)
  Seconds,  // a positive number of seconds
  Text,     // any text (a device name, a key)
  Path,     // a file or folder
  List,     // a comma-separated list (its reader checks the items)
  Profile,  // EAGLEVK_PROFILE_OVERRIDE's key=value list (profile_settings.h)
  Retired,  // no longer read: `values` names the replacement; setting it is an error
};

struct Switch {
  const char* name;
  SwitchType type;
  const char* values = "";    // Choice: the choices, '|'-separated; Retired: the replacement
  uint64_t min = 0, max = 0;  // Uint
  const char* fallback = "";  // the value when unset or empty, as text ("" for none)
  const char* meaning = "";
  // Read only by the test harness (tests/, tools/): declared so that setting it is no warning.
  bool test_only = false;
};

std::span<const Switch> switch_table();
// The declared switch `name`, or null.
const Switch* find_switch(std::string_view name);

// The value of a declared switch; nullopt when unset or empty. An undeclared name is a
// programmer's mistake and throws.
std::optional<std::string> switch_value(std::string_view name);
// The same, but a set and empty variable gives an empty string: for values whose emptiness is
// a mistake to report (an API key), not a default.
std::optional<std::string> switch_text(std::string_view name);
// A Bool switch: its value, or its table fallback when unset.
bool switch_bool(std::string_view name);
// A Choice switch: the chosen value, or its table fallback when unset.
std::string switch_choice(std::string_view name);
// A Uint switch: its value in the table's range, or nullopt when unset.
std::optional<uint64_t> switch_uint(std::string_view name);

// The parsers behind them, pure for tests; each error names `name` (a variable, or a profile key
// with its variable) and what it accepts.
bool parse_switch_bool(std::string_view name, std::string_view text);
uint64_t parse_switch_uint(std::string_view name, std::string_view text, uint64_t min, uint64_t max);
std::string parse_switch_choice(std::string_view name, std::string_view text, std::string_view choices);

// For `names` (the EAGLEVK_* names set in an environment): a warning for each the table does not
// know (with the closest known name where one is close), and an error message for each retired
// one that is set. Pure, for tests.
struct EnvironmentCheck {
  std::vector<std::string> warnings, errors;
};
EnvironmentCheck check_switch_names(std::span<const std::string> names);
// check_switch_names on this process's environment: throws the first error; prints the warnings
// to stderr once per process. Contexts call it when they are made.
void check_environment();
// The closest declared name to `name` (edit distance at most 3), or empty.
std::string closest_switch(std::string_view name);
// Levenshtein distance, for such suggestions (the profile's keys too).
size_t edit_distance(std::string_view a, std::string_view b);

// Every declared switch with its value in force (set, or the fallback), for the CLI's device
// listing.
struct SwitchInForce {
  const Switch* declared;
  std::string value;
  bool set = false;
};
std::vector<SwitchInForce> switches_in_force();

}  // namespace eaglevk::vk
