#pragma once
// Which part of a dataset one `eaglevk eval` process evaluates: prompt i of the dataset goes to
// shard i mod N. The shard comes from --shard i/N, or with --shard auto from the job array of
// the scheduler that started the process: a Slurm array (SLURM_ARRAY_TASK_ID, less
// SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT) or a Kubernetes Indexed Job
// (JOB_COMPLETION_INDEX, of --shard-count, since the Job's completion count is not in its
// pods' environment).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "apps/cli/eval_report.h"

namespace eaglevk::cli {

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> process_env(const char* name);

// `value`: "" (the whole dataset), "i/N" or "auto"; `count_flag`: --shard-count (0: not given).
// Bad values are usage errors that say what was expected.
EvalShard resolve_shard(const std::string& value, uint32_t count_flag, const EnvLookup& env = process_env);

inline bool in_shard(const EvalShard& s, size_t index) { return index % s.count == s.index; }

}  // namespace eaglevk::cli
