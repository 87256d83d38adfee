#include "runtime/vk/switches.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include <fmt/core.h>

#include <eaglevk/error.h>

extern char** environ;

namespace eaglevk::vk {

namespace {

using T = SwitchType;

// The table. Kernel choices are not here: they are the device profile's keys
// (runtime/ops/device_profile.h), set through EAGLEVK_PROFILE_OVERRIDE or EAGLEVK_PROFILE_FILE.
constexpr Switch kSwitches[] = {
    {"EAGLEVK_DEVICE", T::Text, "", 0, 0, "",
     "the device: an index (\"1\") or a case-insensitive part of its name; unset, the best one (discrete GPU, "
     "integrated, virtual, CPU)"},
    {"EAGLEVK_VALIDATE", T::Bool, "", 0, 0, "off",
     "the Khronos validation layer with synchronization validation; a run it objects to fails"},
    {"EAGLEVK_VALIDATION_IGNORE", T::List, "", 0, 0, "",
     "validation message IDs (0x... or decimal, comma-separated) printed but not counted as errors"},
    {"EAGLEVK_PIPELINE_STATISTICS", T::Bool, "", 0, 0, "off",
     "keep each pipeline's compiler statistics (registers, spills), for the GPU check's kernel table"},
    {"EAGLEVK_DEVICE_MEMORY", T::Size, "", 0, 0, "",
     "cap on the device memory eaglevk plans for (bytes, or 512M, 8G)"},
    {"EAGLEVK_HOST_MEMORY", T::Size, "", 0, 0, "",
     "cap on the host memory eaglevk fills with weights the device reads over the bus (bytes, or 512M, 8G)"},
    {"EAGLEVK_FENCE_TIMEOUT", T::Seconds, "", 0, 0, "600 on a GPU, 7200 on a CPU device",
     "seconds a submission may take before the device counts as hung"},
    {"EAGLEVK_SYNC", T::Choice, "tracked|full", 0, 0, "tracked",
     "barriers: tracked (only where a hazard is) or full (after every command, for debugging)"},
    {"EAGLEVK_REPLAY", T::Bool, "", 0, 0, "on",
     "replay a recorded pass instead of recording it again; off records every pass (the tests' reference)"},
    {"EAGLEVK_ARENA_REUSE", T::Bool, "", 0, 0, "on",
     "activations whose lifetimes do not overlap share arena memory; off gives each its own"},
    {"EAGLEVK_PROFILE", T::Bool, "", 0, 0, "off", "time every command on the GPU: GPU time per command family at the end of a run"},
    {"EAGLEVK_PROFILE_OVERRIDE", T::Profile, "", 0, 0, "",
     "device profile fields, key=value,... (e.g. gemm.block=128,attention.split=256); the device listing's "
     "environment view prints every key"},
    {"EAGLEVK_PROFILE_FILE", T::Path, "", 0, 0, "",
     "a file of device profile key=value lines (# comments), applied before EAGLEVK_PROFILE_OVERRIDE"},
    {"EAGLEVK_CACHE_DIR", T::Path, "", 0, 0, "$XDG_CACHE_HOME/eaglevk or ~/.cache/eaglevk",
     "where the automatic draft-token choice keeps the pass costs it measured"},
    {"EAGLEVK_DEMO_MODEL", T::Path, "", 0, 0, "", "the model `eaglevk demo` runs, instead of the tiny one"},
    {"EAGLEVK_API_KEY", T::Text, "", 0, 0, "", "the HTTP server's key when its command line gives none"},
    // Read by the C example (apps/examples/embed.c) itself, through getenv: it shows the C API only.
    {"EAGLEVK_ASSETS", T::Path, "", 0, 0, "", "the assets folder of the C example program (apps/examples/embed.c)"},

    // The test harness's.
    {"EAGLEVK_LLAMA3_REF", T::Path, "", 0, 0, "", "the Llama-3 tokenizer reference (tests)", true},
    {"EAGLEVK_TEST_ASSETS", T::Path, "", 0, 0, "", "the assets folder the golden tests read (tests)", true},
    {"EAGLEVK_GOLDEN_ALL", T::Bool, "", 0, 0, "off", "every golden prompt, not the first few (tests)", true},
    {"EAGLEVK_KEEP_TEST_FILES", T::Text, "", 0, 0, "", "keep the tests' temporary files (tests)", true},
    {"EAGLEVK_SOAK_TOKENS", T::Uint, "", 1, 1u << 30, "1024", "tokens the soak test generates (tests)", true},
    {"EAGLEVK_CLI_UNDER_TEST", T::Path, "", 0, 0, "", "another CLI build for the bad-input table (tests)", true},
    {"EAGLEVK_NO_VULKAN_STACK", T::Bool, "", 0, 0, "off", "tests/run_all.sh without the newer Vulkan stack", true},
    {"EAGLEVK_TEST_TARGETS", T::Text, "", 0, 0, "", "tests/run_all.sh builds only these targets", true},
    {"EAGLEVK_TEST_REGEX", T::Text, "", 0, 0, "", "tests/run_all.sh runs only the tests matching it", true},
    {"EAGLEVK_REUSE_INDEX", T::Path, "", 0, 0, "", "tests/tools/reuse_objects.py's index of reusable objects", true},

    // The tuning variables before the device profile (CHANGELOG, 0.9): each is now a profile key.
    {"EAGLEVK_MATVEC_SHAPE", T::Retired, "matvec.workgroup=W,matvec.outs=O,matvec.block_outs=O"},
    {"EAGLEVK_GPU_SHAPES", T::Retired, "shapes=gpu"},
    {"EAGLEVK_EXPERT_ROWS", T::Retired, "matvec.expert_rows=N"},
    {"EAGLEVK_MATVEC_ROWS_OUTS", T::Retired, "matvec.rows_outs=N"},
    {"EAGLEVK_ATTENTION_ROWS", T::Retired, "attention.rows=N"},
    {"EAGLEVK_ATTENTION_SPLIT", T::Retired, "attention.split=N"},
    {"EAGLEVK_FOLD_NORMS", T::Retired, "fold.norms=on"},
    {"EAGLEVK_FOLD_ROPE", T::Retired, "fold.rope=off"},
    {"EAGLEVK_COOPMAT", T::Retired, "gemm.coopmat=on (or off)"},
    {"EAGLEVK_GEMM_BLOCK", T::Retired, "gemm.block=64 (or 128)"},
    {"EAGLEVK_GEMM_PRECISION", T::Retired, "gemm.precision=f16 (or split)"},
    {"EAGLEVK_GEMM_PREFETCH", T::Retired, "gemm.prefetch=on"},
    {"EAGLEVK_GEMM_TILE_K", T::Retired, "gemm.tile_k=64"},
    {"EAGLEVK_SUBGROUP_SIZE", T::Retired, "subgroup.size=N"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const Switch& declared(std::string_view name) {
  const Switch* s = find_switch(name);
  if (!s) fail("internal: the environment variable {} is not declared in runtime/vk/switches.cpp", name);
  return *s;
}

std::vector<std::string> environment_names() {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("EAGLEVK_", 0) == 0) names.emplace_back(entry.substr(0, entry.find('=')));
  }
  return names;
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::span<const Switch> switch_table() { return kSwitches; }

const Switch* find_switch(std::string_view name) {
  for (const Switch& s : kSwitches)
    if (name == s.name) return &s;
  return nullptr;
}

std::optional<std::string> switch_text(std::string_view name) {
  const Switch& s = declared(name);
  const char* v = std::getenv(s.name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::optional<std::string> switch_value(std::string_view name) {
  std::optional<std::string> v = switch_text(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

bool parse_switch_bool(std::string_view name, std::string_view text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail("{}='{}': expected 1, 0, true, false, on, off, yes or no", name, text);
}

uint64_t parse_switch_uint(std::string_view name, std::string_view text, uint64_t min, uint64_t max) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // from_chars takes no sign and reports a value past 2^64 as out of range: neither wraps.
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min || value > max)
    fail("{}='{}': expected a whole number from {} to {}", name, text.size() > 40 ? text.substr(0, 40) : text, min,
         max);
  return value;
}

std::string parse_switch_choice(std::string_view name, std::string_view text, std::string_view choices) {
  std::string_view rest = choices;
  while (true) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == text) return std::string(text);
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  std::string listed(choices);
  std::replace(listed.begin(), listed.end(), '|', ' ');
  fail("{}='{}': expected one of: {}", name, text, listed);
}

bool switch_bool(std::string_view name) {
  const Switch& s = declared(name);
  const std::optional<std::string> v = switch_value(name);
  return parse_switch_bool(s.name, v ? *v : s.fallback);
}

std::string switch_choice(std::string_view name) {
  const Switch& s = declared(name);
  const std::optional<std::string> v = switch_value(name);
  return v ? parse_switch_choice(s.name, *v, s.values) : std::string(s.fallback);
}

std::optional<uint64_t> switch_uint(std::string_view name) {
  const Switch& s = declared(name);
  const std::optional<std::string> v = switch_value(name);
  if (!v) return std::nullopt;
  return parse_switch_uint(s.name, *v, s.min, s.max);
}

std::string closest_switch(std::string_view name) {
  std::string best;
  size_t best_distance = 4;
  for (const Switch& s : kSwitches) {
    const size_t d = edit_distance(name, s.name);
    if (d < best_distance) {
      best_distance = d;
      best = s.name;
    }
  }
  return best;
}

EnvironmentCheck check_switch_names(std::span<const std::string> names) {
  EnvironmentCheck out;
  for (const std::string& name : names) {
    const Switch* s = find_switch(name);
    if (s && s->type == SwitchType::Retired) {
      out.errors.push_back(fmt::format("{} is no longer read: the device profile replaced it (set "
                                       "EAGLEVK_PROFILE_OVERRIDE={} instead)",
                                       name, s->values));
    } else if (!s) {
      const std::string near = closest_switch(name);
      out.warnings.push_back(fmt::format("{} is not a variable eaglevk reads{} (docs/cli.md lists them)",
                                         name, near.empty() ? "" : fmt::format(" (did you mean {}?)", near)));
    }
  }
  return out;
}

void check_environment() {
  const std::vector<std::string> names = environment_names();
  const EnvironmentCheck check = check_switch_names(names);
  if (!check.errors.empty()) fail("{}", check.errors.front());
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    for (const std::string& w : check.warnings) fmt::print(stderr, "eaglevk: warning: {}\n", w);
}

std::vector<SwitchInForce> switches_in_force() {
  std::vector<SwitchInForce> out;
  for (const Switch& s : kSwitches) {
    if (s.type == SwitchType::Retired) continue;
    const char* v = std::getenv(s.name);
    const bool set = v && *v;
    out.push_back({&s, set ? std::string(v) : std::string(s.fallback), set});
  }
  return out;
}

}  // namespace eaglevk::vk
