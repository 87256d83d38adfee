#pragma once
// What the CLI's commands share to load a model and turn their flags into prompt ids.
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <eaglevk/eaglevk.hpp>

#include "loader/chat_template.h"

namespace eaglevk::cli {

// The tiny trained model that ships with eaglevk (the demo).
std::filesystem::path bundled_model_dir();

// Loading goes through the facade the C API uses (eaglevk.hpp), in its two steps so that each
// command can check the plan (its context, a batch that fits) before anything is uploaded.
// plan_model: the facade's plan_load, with the plan's notes on stderr.
api::LoadPlan plan_model(const api::Runtime& runtime, const std::filesystem::path& model, const api::LoadOptions& options);
// load_planned: the facade's load_model, with a progress line on stderr while the weights upload.
std::shared_ptr<const api::Model> load_planned(const api::Runtime& runtime, api::LoadPlan plan);

// Prompt ids: raw text with BOS, or a chat turn rendered with the template. `text`, when given,
// receives what was encoded (the rendered chat, or the raw text; empty for --prompt-ids).
struct PromptSource {
  std::string text;        // -p, or the contents of -f
  bool chat = false;
  std::string system;
  std::vector<int32_t> ids;  // --prompt-ids: used as given
  std::vector<std::string> images;  // --image: in the user turn, before the text (needs chat)
  std::string messages_file;        // --messages: a whole conversation (Hugging Face chat format)
  // --allowed-image-dir: folders besides the messages file's own that its images may come from.
  std::vector<std::filesystem::path> allowed_image_dirs;
};
std::vector<int32_t> prompt_ids(const api::Model& m, const PromptSource& source, std::string* text = nullptr);

// The prompt with its images: the rendered chat's image placeholders expanded into the
// images' token layouts, and the images' features computed on the device (api::prepare_images).
struct PreparedPrompt {
  std::vector<int32_t> ids;  // with images, images->ids
  std::string text;  // what was encoded: the rendered chat (with the BOS it writes) or the raw text
  std::optional<api::ImagePrompt> images;
  double image_seconds = 0;  // decoding, preprocessing and the vision tower (one submission)
};
PreparedPrompt prepare_prompt(const api::Model& m, const PromptSource& source);

// --check-tensors / --no-check-tensors (run, eval, bench): the weight scan at load, forced on or
// off; unset leaves api::LoadOptions::check_tensors' rule (on up to 256 MiB of weights).
void add_check_tensors_flags(CLI::App* sub, std::optional<bool>& check);
// --experts-in-host / --no-experts-in-host (run, eval, bench, serve): a Llama-4 model's routed
// experts in host memory, forced or forbidden; unset leaves api::LoadOptions::experts_in_host's
// rule (there only when the whole model does not fit the device and would with them there).
void add_experts_in_host_flags(CLI::App* sub, std::optional<bool>& in_host);
// Where a mixture-of-experts target's routed experts live and what a decode step reads of
// them (top-k per MoE layer) and, for a verify pass of `verify_rows` rows (0: none), at most
// (the union of the experts its rows route to, min(E, rows k) per layer); when they live in
// host memory, that is what crosses the bus. Null (and "") for a model without routed experts.
nlohmann::json expert_traffic_json(const api::Model& m, uint32_t verify_rows);
std::string expert_traffic_line(const api::Model& m, uint32_t verify_rows);

// Refuses `text` before it is encoded when it has more bytes than the model's planned context
// can hold in tokens (loader::Tokenizer::max_input_bytes_per_token): encoding a 50 MB prompt
// would cost a gigabyte before the context check could refuse it. `where` names the text.
void check_text_fits(const api::Model& m, std::string_view text, std::string_view where);

// The end of "the prompt has N tokens ..." when a prompt does not fit `context`: the real limit,
// and --ctx only when raising it can help.
std::string context_advice(const api::Model& m, uint32_t context);

// A warning line for each role in `messages` that is none of loader::kKnownChatRoles, once
// per role (per `warned`, when given: eval warns once for a whole dataset): the templates
// eaglevk ships render any role as a header, so it is no error, but a typo ("asistant") would
// otherwise pass unnoticed.
void warn_unusual_roles(const std::vector<loader::ChatMessage>& messages, std::string_view source,
                        std::set<std::string>* warned = nullptr);

// Fails unless every image lies inside one of `folders` (loader::path_is_inside), naming
// `source` (the messages file).
void check_image_folders(const std::vector<std::filesystem::path>& images, const std::vector<std::filesystem::path>& folders,
                         std::string_view source);

// Logs the draft's tap layers and the rule they came from, when they are not the default.
void print_draft_taps(const api::ModelInfo& info, bool overridden);

// Comma-separated integers in 0..INT32_MAX (parse_integer, integer_flags.h); a usage error
// naming `flag` otherwise.
std::vector<int32_t> parse_id_list(const std::string& csv, const char* flag);

}  // namespace eaglevk::cli
