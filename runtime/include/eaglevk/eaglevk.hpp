#pragma once
// The embedding facade behind the C API (eaglevk.h): a Runtime (one Vulkan device), a Model
// (target, optional EAGLE-3 draft, tokenizer, chat template) and a Session (one sequence's
// device state and generation settings). It is C++ linked from eaglevk_core; libeaglevk.so
// exports only the C functions, so programs using the shared library go through eaglevk.h.
//
// Ownership is shared: a Model keeps its Device alive and a Session keeps its Model alive,
// so the C handles can be freed in any order.
//
// Failures throw ApiError, an eaglevk::Error carrying the kind the C API reports as a status.
// eaglevk throws one exception type everywhere, so the kind is decided by where the facade
// was when it was thrown: its own checks of paths and arguments, device creation, loading,
// generation (see runtime/api/errors.h).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_template.h"
#include "loader/image_decode.h"
#include "loader/tokenizer.h"
#include "runtime/engine/elapsed.h"  // the clock front doors time with
#include "runtime/engine/generate.h"
#include "runtime/engine/memory_plan.h"
#include "runtime/engine/memory_plan_split.h"
#include "runtime/engine/sampler.h"
#include "runtime/engine/spec_stats.h"
#include "runtime/engine/tree_params.h"
#include "runtime/vk/profile.h"  // the profiler's summary type (request_profiling below)

struct eaglevk_runtime;  // eaglevk.h's handles
struct eaglevk_model;

namespace eaglevk {
namespace ops {
struct Gpu;
}
namespace loader {
struct ModelFiles;
}
namespace models {
struct TargetModel;
struct Eagle3Model;
}  // namespace models
namespace engine {
class Decoder;
struct ImageSupport;
}  // namespace engine

namespace api {

enum class ErrorKind { InvalidArgument, Io, Model, Device, ContextFull, BufferTooSmall, Internal, DeviceLost, OutOfMemory };

struct ApiError : Error {
  ApiError(ErrorKind kind, const std::string& message, Setting setting = Setting::None)
      : Error(message, setting), kind(kind) {}
  ErrorKind kind;
};

template <typename... Args>
[[noreturn]] void fail_as(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(kind, fmt::format(format, std::forward<Args>(args)...));
}

// One Vulkan device shared by the models and sessions made on it. Everything that submits to
// its queue holds `queue_mutex`: the queue needs external synchronisation, and sessions may run
// on different threads.
struct Device {
  std::unique_ptr<ops::Gpu> gpu;
  std::mutex queue_mutex;
  ~Device();
};

struct Runtime {
  std::shared_ptr<Device> device;
  std::string device_name;
  // Layers split across devices (issue 47): every device this runtime opened, in the order
  // given; `device` is the first. A model loaded on a runtime of several devices places
  // contiguous layer ranges on each, in that order (LoadOptions::split).
  std::vector<std::shared_ptr<Device>> devices;
};

// `device`: an index ("1") or a case-insensitive substring of the device name; empty takes
// EAGLEVK_DEVICE from the environment, else the best device. EAGLEVK_VALIDATE=1 turns on the
// validation layer as for the CLI.
Runtime open_runtime(const std::string& device = {});
// Several devices, each named as above, for a model split across them; a name may repeat (the
// same device opened again is its own logical device: how one GPU, or lavapipe, runs a split).
Runtime open_runtime(std::span<const std::string> devices);

// Every Vulkan device as `eaglevk devices` lists it (name, type, probed features), without
// creating a logical device.
std::vector<std::string> describe_devices();
// `eaglevk devices --env`: every EAGLEVK_* variable eaglevk reads, with its value in force (set,
// or the default) and meaning; then each device's profile (every kernel choice, with
// EAGLEVK_PROFILE_OVERRIDE and EAGLEVK_PROFILE_FILE applied), by key.
std::string describe_environment();
std::vector<std::string> describe_device_profiles();
// The EAGLEVK_* variable `name` (each is declared once, in runtime/vk/switches.cpp); nullopt
// when unset, an empty string when set but empty (the front door decides whether that is a
// mistake). For front doors' own variables (EAGLEVK_API_KEY, EAGLEVK_DEMO_MODEL).
std::optional<std::string> environment_switch(const std::string& name);
// Validation-layer errors this process has seen (EAGLEVK_VALIDATE=1): a front door fails a run
// that had any, even when the run itself succeeded.
uint32_t validation_errors_in_process();

// The profiler's public switch (EAGLEVK_PROFILE=1 turns it on from the start): GPU time per
// command family and host time, summed over every submission of the process.
using ProfileSummary = vk::ProfileSummary;
using ProfiledCommand = vk::ProfiledCommand;
void request_profiling();   // sessions made from now on profile their submissions
void profile_reset();       // forget the totals so far (a run counts from after the upload)
ProfileSummary profile_summary();
// A table of `summary` (or of the totals so far) per `tokens` tokens; empty when nothing was profiled.
std::string profile_report(const ProfileSummary& summary, uint64_t tokens);
std::string profile_report(uint64_t tokens);

// Speculation's limits (the chain's, and the tree kernels'), for front doors that check their
// settings as they parse them: defined by the engine and the kernels, read here.
struct SpeculationLimits {
  uint32_t chain_draft_tokens = 0;  // k
  uint32_t tree_levels = 0, tree_topk = 0, tree_nodes = 0;
};
SpeculationLimits speculation_limits();

constexpr uint32_t kSessionMaxRows = engine::kPrefillRows;  // rows of one prefill pass (longer prompts go in chunks)

// What a load must know before it uploads a byte.
struct LoadOptions {
  std::filesystem::path draft;         // an EAGLE-3 head (folder or GGUF file); empty: none
  std::vector<uint32_t> aux_layers;    // the head's tap layers instead of its config's (the CLI's --aux-layers)
  uint32_t max_rows = kSessionMaxRows; // rows of the largest pass the caller will run (activations, read-back)
  // The context the caller will run with: 0 takes the model's maximum when it fits, else what
  // fits; a larger one is clipped to the model's maximum, one that cannot fit is refused.
  uint32_t context = 0;
  // llama.cpp's vision file (mmproj-*.gguf) for a Llama-4 model: its tower gives the model
  // images (loader/mmproj.h); empty: none.
  std::filesystem::path mmproj;
  // A Jinja chat template file that replaces the checkpoint's; it gets the checkpoint's
  // bos_token and eos_token. Empty: the checkpoint's own template.
  std::filesystem::path chat_template;
  // Scan the weights (target and draft) for NaN and infinity before the upload, refusing the
  // first one found by tensor and element (loader/tensor_check.h). Unset: scan when they take
  // at most loader::kAutoTensorCheckBytes (256 MiB), where it costs well under a second.
  std::optional<bool> check_tensors;
  // The routed experts of a mixture-of-experts target (Llama-4) in host memory, read by the
  // device over the bus, everything else on the device. Unset: only when the whole model does
  // not fit the device and would with them there (LoadPlan::notes says so); true: always (a
  // model without routed experts is refused); false: never.
  std::optional<bool> experts_in_host;
  // Layers split across the runtime's devices (a runtime of one device ignores it): each
  // device's share of the layers, in device order (3, 1: three quarters on the first). Empty:
  // in proportion to each device's memory budget.
  std::vector<double> split = {};
};

// The files opened and measured against the device's memory, before any upload: what the CLI
// shows and checks (a batch that fits, a progress line of `memory.weights` bytes) between
// plan_load and load_model.
struct LoadPlan {
  std::filesystem::path target_dir;
  LoadOptions options;
  std::shared_ptr<const loader::ModelFiles> target_files;
  engine::MemoryPlan memory;
  // A runtime of several devices: each device's layers and memory (memory is then the device
  // whose context limit is the tightest).
  std::optional<engine::SplitMemoryPlan> split;
  uint32_t context = 0;            // LoadOptions::context decided against the budget
  // Sentences a user should hear once: values the GGUF loader defaulted or recovered, a draft
  // trained for another verifier, a context lowered to what fits.
  std::vector<std::string> notes;
};

struct Model {
  std::shared_ptr<Device> device;  // first: destroyed last, after every buffer below
  // Split across devices: every device holding a part, in layer order; `device` is the last
  // (the final norm, lm_head, sampling and read-back), target->earlier has the other parts.
  std::vector<std::shared_ptr<Device>> devices;
  std::optional<engine::SplitMemoryPlan> split;  // LoadPlan::split
  std::filesystem::path target_dir, draft_dir;
  uint32_t planned_context = 0;    // LoadPlan::context
  std::unique_ptr<models::TargetModel> target;
  std::unique_ptr<models::Eagle3Model> draft;  // null without a draft
  loader::Tokenizer tokenizer;
  std::optional<loader::ChatTemplate> chat;    // absent when the model has no usable template
  std::string chat_error;                      // why, when it is absent
  std::vector<int32_t> eos_ids;                // config.json's, then the tokenizer's
  engine::MemoryPlan memory;                   // sessions check their context against it
  std::unique_ptr<engine::ImageSupport> images;  // null when the target cannot take images
  std::string no_images_reason;                // why, when it cannot
  Setting no_images_setting = Setting::None;   // the setting that would give it images (a GGUF's vision file)
  ~Model();

  int32_t vocab_size() const;     // the target's (ids at or past it are refused)
  uint32_t max_context() const;   // max_position_embeddings
};

// Opens the target's (and the draft's) files, checks that they exist, and plans their memory
// and the context against the device: weights that cannot fit, or a requested context that
// cannot, are refused here, before anything is uploaded.
LoadPlan plan_load(const Runtime& runtime, const std::filesystem::path& target_dir, const LoadOptions& options = {});
// Uploads what the plan opened: the target and, with a draft, an EAGLE-3 head that must fit it
// (hidden size, vocabulary, tap layers); the tokenizer, the chat template and image support.
// `on_upload`, when given, hears the bytes of each upload as it goes (a progress line).
std::shared_ptr<const Model> load_model(const Runtime& runtime, LoadPlan plan,
                                        std::function<void(uint64_t bytes)> on_upload = {});
// Both steps: the target from `target_dir` and, when `draft_dir` is not empty, its draft.
std::shared_ptr<const Model> load_model(const Runtime& runtime, const std::filesystem::path& target_dir,
                                        const std::filesystem::path& draft_dir = {});
// The model's name for reports: the folder's name, or the GGUF file's without .gguf.
std::string model_name(const std::filesystem::path& model);

// What a front door reports of a loaded model, read from its config and weights.
struct ModelInfo {
  int32_t vocab_size = 0, bos_token_id = -1;  // -1: the config names no BOS
  uint32_t hidden_size = 0, layers = 0;
  uint64_t weight_bytes = 0, parameters = 0;  // the target's weights as uploaded
  // With a draft: the target layers its taps read, the family default and, when they are not
  // it, the rule the head's config gave for them (with LoadOptions::aux_layers the caller's ids).
  std::vector<uint32_t> draft_taps, default_taps;
  bool draft_taps_default = true;
  std::string draft_taps_rule;
};
ModelInfo model_info(const Model& m);

// What the routed experts of a mixture-of-experts target (Llama-4) cost: where they live, what a
// decode step reads of them (top-k per MoE layer) and, for a verify pass of `verify_rows` rows,
// at most (each expert its rows route to, once per layer): over the bus when in host memory.
// All zero for a model without routed experts.
struct ExpertTraffic {
  uint32_t moe_layers = 0, experts = 0, experts_per_token = 0, verify_rows = 0;
  uint64_t bytes = 0, host_bytes = 0, bytes_per_expert = 0, bytes_per_token = 0, bytes_per_verify_pass_at_most = 0;
};
ExpertTraffic expert_traffic(const Model& m, uint32_t verify_rows);

// --spec-draft-tokens auto: the tree shape within `bounds` (their steps and topk are the
// search's largest) that decodes fastest on this device, from timed passes of the model and its
// draft and their acceptance on `prompts`. The pass costs are cached per device, driver, model
// and draft in the cache folder ($EAGLEVK_CACHE_DIR, else the user's). `report` receives a few
// lines on what was measured and chosen. A shape with draft_tokens set comes back as it is.
engine::TreeParams auto_tree(const Model& m, const engine::TreeParams& bounds,
                             const std::vector<std::vector<int32_t>>& prompts, std::string* report = nullptr);

// What a checkpoint holds, read from its files without a device (`eaglevk inspect`):
// architecture and sizes, parameters, tensor types with their bytes, the bytes its weights take
// on the device, tap layers and d2t for a draft, whether its vision tower is usable, and every
// value the loader defaulted or recovered. `mmproj`: llama.cpp's vision file to check with it.
nlohmann::json describe_checkpoint(const std::filesystem::path& path, const std::filesystem::path& mmproj = {});

std::vector<int32_t> tokenize(const Model& m, std::string_view text, bool add_bos);
std::string detokenize(const Model& m, std::span<const int32_t> ids, bool skip_special);
std::string apply_chat_template(const Model& m, std::span<const loader::ChatMessage> messages,
                                bool add_generation_prompt);

struct SessionParams {
  uint32_t context = 2048;      // prompt + generated tokens; clipped to the model's maximum
  uint32_t k = 3;               // draft tokens per round; 0: no speculation (ignored without a draft)
  engine::SamplingParams sampling;
  uint32_t max_new_tokens = 64;
  bool ignore_eos = false;
  engine::TreeParams tree;      // steps > 0: tree drafting instead of the chain of k
  bool greedy_drafts = false;   // at T > 0: propose the draft's argmax instead of drawing from it
  std::vector<std::string> stop;  // generation ends at the first of these texts
  uint32_t logprobs = 0;        // > 0: each token's log-probability and this many most likely
  // Rows of one prefill pass (longer prompts go in chunks), at most LoadOptions::max_rows:
  // `bench` times prefill in passes of its prompt's length.
  uint32_t max_rows = kSessionMaxRows;
  // Prompt reports: the top_logits largest logits at the last prompt position, and the argmax
  // at every prompt position (research and `run --top-logits`; not with images).
  uint32_t top_logits = 0;
  bool prompt_argmax = false;
};

struct GenerateOutput {
  std::vector<int32_t> tokens;
  engine::SpecStats stats;      // zero without speculation
  bool stopped_at_eos = false;
  bool stopped_at_context = false;
  bool stopped_by_caller = false;
  bool stopped_at_stop_string = false;
  std::vector<engine::TokenLogprobs> logprobs;  // with SessionParams::logprobs
  uint32_t reused_tokens = 0;  // prompt positions taken from the previous sequence (continue_sequence)
  uint32_t prompt_tokens = 0;  // positions the prompt took: with images, each image's tile tokens
  std::vector<int32_t> prompt_ids;  // the prompt as it ran (with images, their tile tokens)
  std::vector<std::pair<int32_t, float>> prompt_top_logits;  // with SessionParams::top_logits
  std::vector<int32_t> prompt_argmax;                        // with SessionParams::prompt_argmax
  // Wall time of the prompt's passes, and of the rest (in a batch, this sequence's share of each
  // round it took part in).
  double prefill_seconds = 0, decode_seconds = 0;
};

// Fails unless every stop string is non-empty: the engine's rule, for a front door that checks
// its flags before it loads a model.
void check_stop_strings(const std::vector<std::string>& stop);

// Why a generation ended, as the CLI reports it: "stop" (a stop string), "eos", "context" or "length".
const char* stop_reason(const GenerateOutput& out);

// A prompt made ready for its images: each <|image|> placeholder expanded into its image's token
// layout and the vision tower run over all tiles (one submission). Apart from generate() so that
// a caller can time it and see the expanded length before generating.
struct ImagePrompt {
  std::vector<int32_t> ids;     // the expanded prompt
  engine::PromptImages images;  // the features of its <|patch|> tokens
  uint32_t tiles = 0;           // of all images, global views included
};
// Fails (Model) when the model cannot take images, (InvalidArgument) when the prompt's
// placeholders do not match the images.
ImagePrompt prepare_images(const Model& m, std::span<const int32_t> prompt, std::span<const loader::RgbImage> images);

// The taps of verified positions: rows of [3 tap layers x hidden] floats, one per position.
using TapCallback = std::function<void(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                       std::span<const float> hidden)>;

// Called with each generated token and its text (whole UTF-8 characters, special tokens
// skipped: often empty); returns false to stop. After the last token, if bytes of an
// incomplete character are still held, it is called once more with token -1 and U+FFFD.
using PieceCallback = std::function<bool(int32_t token, std::string_view piece)>;

class Session {
 public:
  Session(std::shared_ptr<const Model> model, const SessionParams& params);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Each call is a new sequence starting at position 0. Stats are those of this call. With
  // images, the prompt holds one <|image|> placeholder per image (in order), which becomes the
  // image's Llama-4 token layout and features (a model without a usable vision tower refuses).
  GenerateOutput generate(std::span<const int32_t> prompt, const PieceCallback& on_piece = {},
                          std::span<const loader::RgbImage> images = {});
  // Appends `next` (the user's next turn, rendered and tokenized) after the sequence so far
  // (the last call's prompt and its generated tokens) and generates, keeping the KV caches of
  // that sequence: only `next` is prefilled. Without an earlier text-only sequence (none yet,
  // or the last had images) it is generate(next). At temperature 0 the tokens equal those of
  // generate() on the whole sequence.
  GenerateOutput continue_sequence(std::span<const int32_t> next, const PieceCallback& on_piece = {});
  // A prompt whose images prepare_images made ready: generate() with images, in two steps.
  GenerateOutput generate(const ImagePrompt& prompt, const PieceCallback& on_piece = {});
  // A new sequence that keeps the KV rows of the last one's longest common prefix with
  // `prompt` (less its last position, which must run; nothing after a sequence with images): a
  // chat re-rendered whole each turn (`run --interactive`, eval's multi-turn lines), whose ids
  // need not extend the last output exactly. Only the rest is prefilled; reused_tokens says how
  // many positions were kept. At temperature 0 the tokens equal generate()'s.
  GenerateOutput generate_reusing_prefix(std::span<const int32_t> prompt, const PieceCallback& on_piece = {});
  // The tokens the next calls may generate: `bench` times a 1-token prefill and a decode on one
  // session's device state.
  void set_max_new_tokens(uint32_t n) { params_.max_new_tokens = n; }
  // With a draft: every verified position's taps go to `on_taps` (`run --dump-taps`).
  void set_tap_callback(TapCallback on_taps);
  // The tokens of the sequence so far: the last call's prompt and output.
  const std::vector<int32_t>& sequence() const { return sequence_; }
  // From inside on_piece: the log-probabilities (SessionParams::logprobs) of the tokens the
  // running call has generated so far, from index `from` on, for streaming them beside the text;
  // the call's GenerateOutput still gives them all. Empty outside a call.
  std::vector<engine::TokenLogprobs> logprobs_so_far(size_t from = 0) const;

  const Model& model() const { return *model_; }
  const SessionParams& params() const { return params_; }
  uint32_t context() const { return context_; }
  bool speculative() const;

 private:
  std::shared_ptr<const Model> model_;  // first: outlives the device state below
  SessionParams params_;
  uint32_t context_ = 0;
  std::unique_ptr<engine::Decoder> decoder_;  // plain or speculative
  std::vector<int32_t> sequence_;  // empty after a sequence with images (its rows are not its ids)

  GenerateOutput run(std::vector<int32_t> ids, const PieceCallback& on_piece, const engine::PromptImages* images,
                     bool reuse);
  void check_fits(size_t prompt_tokens) const;  // the prompt leaves room for the first new token
};

// Several sequences of one model decoding together (continuous batching, the C API's
// eaglevk_batch and `eaglevk serve`): each starts between rounds with its own prompt and
// settings, every round advances all of them in one submission (the weights are read once for
// all), and each leaves when it finishes. At temperature 0 each sequence's tokens equal a
// Session's on it alone, whichever sequences run beside it.
struct BatchParams {
  uint32_t sequences = 8;       // the most sequences at once (1..64)
  uint32_t context = 2048;      // per sequence, prompt + generated; clipped to the model's maximum
  uint32_t k = 3;               // draft tokens per round with a draft; 0: no speculation
  bool greedy_drafts = false;   // as SessionParams::greedy_drafts
};

// What one sequence decides for itself.
struct SequenceParams {
  engine::SamplingParams sampling;
  uint32_t max_new_tokens = 64;
  bool ignore_eos = false;
  std::vector<std::string> stop;  // generation ends at the first of these texts
  uint32_t logprobs = 0;          // as SessionParams::logprobs
};

// Why `sequences` contexts of `context` tokens do not fit the device (their KV caches share one
// binding per layer, and the memory budget), or "" when they do.
std::string batch_memory_problem(const engine::MemoryPlan& memory, uint32_t sequences, uint32_t context);

class BatchSession {
 public:
  BatchSession(std::shared_ptr<const Model> model, const BatchParams& params);
  ~BatchSession();
  BatchSession(const BatchSession&) = delete;
  BatchSession& operator=(const BatchSession&) = delete;

  // Whether a sequence with these settings can start now: a slot is free (sequences of one
  // batch may differ in every sampling setting: each row samples with its own).
  bool can_start(const SequenceParams& params) const;
  // Checks the prompt and settings, prefills the prompt (one submission per chunk) and emits the
  // first token; returns the sequence's id (0..sequences-1, reused once taken). on_piece is
  // called with each token as for Session::generate, from start() and step(); returning false
  // finishes the sequence (stopped_by_caller).
  uint32_t start(std::span<const int32_t> prompt, const SequenceParams& params, PieceCallback on_piece = {});
  // As start(), in `id` (free: taken since it last ran). With `reuse_prefix` it keeps the KV
  // caches of the longest prefix `prompt` shares with the sequence that ran there, as
  // Session::generate_reusing_prefix: a conversation's next turn prefills only what is new.
  uint32_t start_at(uint32_t id, std::span<const int32_t> prompt, const SequenceParams& params, bool reuse_prefix,
                    PieceCallback on_piece = {});
  // One round of every running sequence; returns the ids that finished in it (or in start()
  // since the last step), each to be taken.
  std::vector<uint32_t> step();
  // The ids that finished since the last step() or collect(), without running a round: a
  // sequence can end in start() (its first token), and its id can be taken and reused before
  // the next round.
  std::vector<uint32_t> collect();
  // Whether any sequence is running (step() has work).
  bool running() const;
  bool finished(uint32_t id) const;
  // The tokens a sequence has generated so far.
  size_t output_tokens(uint32_t id) const;
  // The log-probabilities (SequenceParams::logprobs) of its generated tokens from index `from` on,
  // as far as it has generated: for streaming them; take() still gives them all.
  std::vector<engine::TokenLogprobs> logprobs(uint32_t id, size_t from = 0) const;
  // A finished sequence's output and statistics; frees its id.
  GenerateOutput take(uint32_t id);
  // Finishes a running sequence before the next round (a client that went away); take() then
  // gives what it generated, with stopped_by_caller.
  void cancel(uint32_t id);

  const Model& model() const { return *model_; }
  const BatchParams& params() const { return params_; }
  uint32_t context() const { return context_; }
  bool speculative() const;

 private:
  struct State;
  std::shared_ptr<const Model> model_;  // first: outlives the device state
  BatchParams params_;
  uint32_t context_ = 0;
  std::unique_ptr<State> state_;

  uint32_t start_in(uint32_t id, std::span<const int32_t> prompt, const SequenceParams& params, PieceCallback on_piece,
                    bool reuse);
};

// What `eaglevk eval` asks of a loaded model besides sessions (runtime/api/eval_support.cpp).
constexpr uint32_t kMaxBatchSequences = 64;  // BatchParams::sequences at most
// Sessions made from now on have the draft read `layers` instead (the same weights): one
// loaded head evaluated at other taps without reloading the target (eval --aux-shift-sweep).
// Sessions made before keep theirs; no session may be made on another thread meanwhile.
// As many ids as the draft takes, ascending, distinct, each at most ModelInfo::layers.
void set_draft_taps(const Model& model, std::vector<uint32_t> layers);

// The device behind a C handle (capi.cpp), for tests that check the validation layer's count.
const Device& device_of(const eaglevk_runtime* runtime);
const Device& device_of(const eaglevk_model* model);

}  // namespace api
}  // namespace eaglevk
