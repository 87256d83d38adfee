#pragma once
// One evaluation pass of `eaglevk eval` over a dataset (this shard of it) with the model's
// draft at its current taps: the lines' prompts (single prompts, chats, multi-turn
// conversations, images), one line after another in an api::Session, or B at a time in an
// api::BatchSession (continuous batching), with progress, stop strings, the plain baseline and
// the resume file. eval.cpp has the command.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <eaglevk/eaglevk.hpp>

#include "apps/cli/device_flags.h"
#include "apps/cli/eval_report.h"
#include "apps/cli/eval_resume.h"
#include "apps/cli/eval_shard.h"
#include "apps/cli/model_files.h"
#include "apps/cli/spec_flags.h"
#include "loader/chat_messages.h"
#include "loader/dataset.h"

namespace eaglevk::cli {

struct EvalArgs {
  std::string model, mmproj, draft, dataset, json_out, aux_layers, shard, resume, chat_template, seed;
  std::vector<std::string> stop, allowed_image_dirs;
  SpecFlags spec;
  DeviceFlags devices;
  uint32_t n_predict = 128, limit = 0, ctx = 2048, shard_count = 0, logprobs = 0, batch = 0;
  bool chat = false, baseline = false, strict = false, draft_sampling = false, greedy_drafts = false,
       aux_sweep = false, no_kv_reuse = false;
  float temp = 0;
  CLI::Option* seed_option = nullptr;
  std::optional<bool> check_tensors, experts_in_host;
};

using PromptResult = EvalRecord;

// One pass over the dataset (this shard of it) with one draft.
struct EvalPass {
  std::vector<PromptResult> results;
  std::vector<std::vector<int32_t>> outputs;  // every generation's tokens, in order
  engine::SpecStats total;
  double spec_seconds = 0;
  size_t spec_tokens = 0;
};

// What every pass shares: the dataset, the model and the generation settings.
struct EvalSetup {
  const EvalArgs& args;
  const loader::Dataset& data;
  size_t count = 0;
  std::shared_ptr<const api::Model> model;
  // The speculative sessions' settings (context, -k or the tree, sampling, stop strings,
  // logprobs, draft scheme); the baseline's are the same without speculation.
  api::SessionParams session;
  EvalShard shard;
  uint32_t batch = 1;           // sequences decoded together (chain drafting, text lines)
};

// The prompt of generation `g` of an item; `conversation` carries a multi-turn item's turns
// and answers so far. `text`, when given, receives what was encoded.
std::vector<int32_t> item_prompt_ids(const EvalArgs& a, const api::Model& m, const loader::DatasetItem& item,
                                     size_t g, std::vector<loader::ChatMessage>& conversation,
                                     std::string* text = nullptr);

// Evaluates the lines of this shard that `resume` (when given) does not hold yet, appending
// each to it as it finishes; records come back in dataset order, the resumed ones included.
// `plain` (with --baseline: a session without speculation) also decodes each line plainly.
EvalPass evaluate(const EvalSetup& e, api::Session* plain, ResumeFile* resume);

}  // namespace eaglevk::cli
