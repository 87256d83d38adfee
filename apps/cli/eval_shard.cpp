#include "apps/cli/eval_shard.h"

#include <cstdlib>

#include "apps/cli/usage.h"

namespace eaglevk::cli {
namespace {

// A whole decimal number below 2^31, or nothing.
std::optional<uint32_t> number(const std::string& text) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long long v = std::stoull(text);
  if (v >= (1ull << 31)) return std::nullopt;
  return uint32_t(v);
}

uint32_t env_number(const EnvLookup& env, const char* name) {
  const std::optional<std::string> text = env(name);
  if (!text) usage_fail("--shard auto: {} is not set", name);
  const std::optional<uint32_t> v = number(*text);
  if (!v) usage_fail("--shard auto: {}='{}' is not a whole number", name, text->substr(0, 40));
  return *v;
}

EvalShard checked(uint32_t index, uint32_t count, const std::string& source) {
  if (count == 0) usage_fail("{}: the shard count must be at least 1", source);
  if (index >= count) usage_fail("{}: shard {} does not exist among {} (they are numbered 0 to {})", source, index, count, count - 1);
  return {index, count};
}

}  // namespace

std::optional<std::string> process_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

EvalShard resolve_shard(const std::string& value, uint32_t count_flag, const EnvLookup& env) {
  if (value.empty()) {
    if (count_flag) usage_fail("--shard-count needs --shard auto");
    return {};
  }
  if (value != "auto") {
    if (count_flag) usage_fail("--shard-count is for --shard auto (give --shard i/N otherwise)");
    const size_t slash = value.find('/');
    const std::optional<uint32_t> i = slash == std::string::npos ? std::nullopt : number(value.substr(0, slash));
    const std::optional<uint32_t> n = slash == std::string::npos ? std::nullopt : number(value.substr(slash + 1));
    if (!i || !n) usage_fail("--shard must be i/N (e.g. 0/4) or auto, got '{}'", value.substr(0, 40));
    return checked(*i, *n, "--shard " + value);
  }
  if (env("JOB_COMPLETION_INDEX")) {
    if (!count_flag)
      usage_fail("--shard auto in a Kubernetes Indexed Job needs --shard-count N (the Job's completions)");
    return checked(env_number(env, "JOB_COMPLETION_INDEX"), count_flag, "--shard auto (JOB_COMPLETION_INDEX)");
  }
  if (env("SLURM_ARRAY_TASK_ID")) {
    if (count_flag) usage_fail("--shard-count is not used in a Slurm array (SLURM_ARRAY_TASK_COUNT gives it)");
    const uint32_t id = env_number(env, "SLURM_ARRAY_TASK_ID");
    // Arrays may start at any id (--array=1-8); the shard is the task's place in the array.
    const uint32_t min = env("SLURM_ARRAY_TASK_MIN") ? env_number(env, "SLURM_ARRAY_TASK_MIN") : 0;
    if (id < min) usage_fail("--shard auto: SLURM_ARRAY_TASK_ID {} is below SLURM_ARRAY_TASK_MIN {}", id, min);
    return checked(id - min, env_number(env, "SLURM_ARRAY_TASK_COUNT"), "--shard auto (SLURM_ARRAY_TASK_ID)");
  }
  usage_fail("--shard auto found neither a Slurm array (SLURM_ARRAY_TASK_ID) nor a Kubernetes Indexed Job "
             "(JOB_COMPLETION_INDEX) in the environment");
}

}  // namespace eaglevk::cli
