// `eaglevk run`: generate from a prompt, streaming text to stdout and statistics to stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <span>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.hpp>
#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "apps/cli/device_flags.h"
#include "apps/cli/eval_report.h"
#include "apps/cli/integer_flags.h"
#include "apps/cli/model_files.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/usage.h"
#include "loader/input_path.h"
#include "loader/output_file.h"
#include "loader/safetensors.h"
#include "loader/text_file.h"

namespace eaglevk::cli {
namespace {

constexpr uint32_t kMaxRows = api::kSessionMaxRows;  // of a prefill pass and of the memory plan

struct RunArgs {
  std::string model, mmproj, prompt, file, prompt_ids, system, draft, aux_layers, dump_taps, messages,
      chat_template, seed;
  std::vector<std::string> images, stop, allowed_image_dirs;
  SpecFlags spec;
  DeviceFlags devices;
  std::optional<bool> check_tensors, experts_in_host;
  CLI::Option *prompt_option = nullptr, *prompt_ids_option = nullptr, *seed_option = nullptr, *top_k_option = nullptr,
              *top_p_option = nullptr;
  uint32_t n_predict = 64, ctx = 0, top_logits = 0, logprobs = 0;
  bool chat = false, ignore_eos = false, json = false, draft_sampling = false, greedy_drafts = false,
       interactive = false;
  float temp = 0, top_p = 1;
  int32_t top_k = 0;
};

// Flags that only mean something beside another one: each given alone is refused, naming both,
// instead of being dropped without a word.
void check_flag_pairs(const RunArgs& a) {
  if (!a.system.empty() && !a.chat)
    usage_fail("--system needs --chat (a system message is a turn of the chat template){}",
               a.messages.empty() ? "" : "; with --messages, put it in the messages");
  if (!a.chat_template.empty() && !a.chat && a.messages.empty())
    usage_fail("--chat-template needs --chat or --messages (a raw prompt is not rendered with a template)");
  if (a.top_logits && !a.json) usage_fail("--top-logits goes with --json (they are reported there)");
  if (!a.allowed_image_dirs.empty() && a.messages.empty())
    usage_fail("--allowed-image-dir goes with --messages (it allows the file's images from another folder)");
  if (a.draft.empty()) {
    if (a.spec.k_option && a.spec.k_option->count()) usage_fail("-k needs a draft (-d): it sets the draft tokens per round");
    if (a.draft_sampling || a.greedy_drafts)
      usage_fail("{} needs a draft (-d)", a.draft_sampling ? "--draft-sampling" : "--greedy-drafts");
  }
  // At --temp 0 decoding is greedy: a cut-off of the distribution changes nothing.
  if (a.temp == 0 && a.top_k_option->count() && a.top_k != 0)
    usage_fail("--top-k {} needs --temp > 0 (at --temp 0 decoding is greedy)", a.top_k);
  if (a.temp == 0 && a.top_p_option->count() && a.top_p != 1)
    usage_fail("--top-p {} needs --temp > 0 (at --temp 0 decoding is greedy)", a.top_p);
  if (a.temp == 0 && (a.draft_sampling || a.greedy_drafts))
    fmt::print(stderr, "eaglevk: warning: {} does nothing at --temp 0: greedy drafts are the draft's argmax\n",
               a.draft_sampling ? "--draft-sampling" : "--greedy-drafts");
}

// Collects the taps of verified positions and writes them as one safetensors file.
struct TapDump {
  std::vector<int32_t> tokens, positions;
  std::vector<float> hidden;
  void add(std::span<const int32_t> t, std::span<const int32_t> p, std::span<const float> h) {
    tokens.insert(tokens.end(), t.begin(), t.end());
    positions.insert(positions.end(), p.begin(), p.end());
    hidden.insert(hidden.end(), h.begin(), h.end());
  }
  void write(const std::string& path, const std::vector<uint32_t>& layers, int hidden_size) const {
    auto bytes = [](const auto& v) { return std::as_bytes(std::span(v)); };
    int64_t n = int64_t(tokens.size());
    std::vector<loader::TensorData> tensors = {
        {"hidden_states", loader::DType::F32, {n, int64_t(layers.size()) * hidden_size}, bytes(hidden)},
        {"token_ids", loader::DType::I32, {n}, bytes(tokens)},
        {"positions", loader::DType::I32, {n}, bytes(positions)}};
    loader::write_safetensors(path, tensors,
                              {{"aux_layers", fmt::format("{},{},{}", layers[0], layers[1], layers[2])},
                               {"layout", "hidden_states[i] = concat of the residual stream entering each aux layer"}});
    fmt::print(stderr, "eaglevk: wrote the taps of {} positions to {}\n", n, path);
  }
};

int run_command(const RunArgs& a) {
  std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  const bool given_prompt = a.prompt_option->count() > 0, given_ids = a.prompt_ids_option->count() > 0;
  if (!a.file.empty() && given_prompt) usage_fail("give either -p or -f, not both");
  // No prompt is an error, not a stand-in text: the demo prompt is the bare `eaglevk`'s only.
  if (!given_prompt && a.file.empty() && !given_ids && a.messages.empty())
    usage_fail("run needs a prompt: -p TEXT, -f FILE, --prompt-ids IDS or --messages FILE.json");
  if (given_prompt && a.prompt.empty()) usage_fail("the prompt (-p) is empty");
  check_flag_pairs(a);
  // The output path is checked before the generation that fills it.
  if (!a.dump_taps.empty())
    if (std::string p = loader::output_problem(a.dump_taps, "--dump-taps"); !p.empty()) fail("{}", p);
  for (const std::string& folder : a.allowed_image_dirs)
    if (std::string p = loader::folder_problem(folder, "--allowed-image-dir"); !p.empty()) fail("{}", p);
  PromptSource source;
  source.text = !a.file.empty() ? loader::read_text_file(a.file) : a.prompt;
  if (!a.file.empty() && source.text.empty()) fail("the prompt file '{}' is empty", a.file);
  source.chat = a.chat;
  source.system = a.system;
  source.images = a.images;
  source.messages_file = a.messages;
  source.allowed_image_dirs.assign(a.allowed_image_dirs.begin(), a.allowed_image_dirs.end());
  if (given_ids) {
    if (given_prompt || !a.file.empty() || a.chat) usage_fail("--prompt-ids cannot be combined with -p, -f or --chat");
    source.ids = parse_id_list(a.prompt_ids, "--prompt-ids");
  }
  if (a.interactive && !a.chat) usage_fail("--interactive is a chat: it needs --chat");
  if (a.logprobs && !a.json) usage_fail("--logprobs goes with --json (they are reported there)");
  as_usage_error([&] { engine::check_logprobs(a.logprobs); });
  if (a.interactive && !a.images.empty()) usage_fail("--interactive does not take images");
  if (a.interactive && !a.dump_taps.empty()) usage_fail("--dump-taps writes one generation's taps: not with --interactive");
  if (a.draft_sampling && a.greedy_drafts) usage_fail("--draft-sampling and --greedy-drafts choose opposite schemes");
  as_usage_error([&] { api::check_stop_strings(a.stop); });
  // No --seed, or --seed -1: a new draw each run at --temp > 0 (printed, and in --json).
  const std::optional<uint64_t> seed = a.seed_option->count() ? parse_seed(a.seed) : std::nullopt;
  engine::SamplingParams sampling{a.temp, a.top_k, a.top_p, seed.value_or(0)};
  as_usage_error([&] { engine::check_sampling(sampling); });
  if (a.temp > 0 && !seed) sampling.seed = announced_random_seed();

  engine::TreeParams tree;
  if (a.spec.tree()) {
    if (a.draft.empty()) usage_fail("the --spec-* tree flags need a draft (-d)");
    tree = a.spec.tree_params();
    if (a.draft_sampling)
      usage_fail("--draft-sampling is for chain drafting (-k): a tree's children are the draft's top-K tokens");
  } else if (!a.draft.empty()) {
    a.spec.check_chain();
  }
  if (!a.dump_taps.empty() && a.draft.empty()) usage_fail("--dump-taps needs a draft (-d): it writes the draft's tap layers");
  if (!a.aux_layers.empty() && a.draft.empty()) usage_fail("--aux-layers needs a draft (-d)");
  std::vector<uint32_t> aux;
  if (!a.aux_layers.empty())
    for (int32_t id : parse_id_list(a.aux_layers, "--aux-layers")) aux.push_back(uint32_t(id));
  const api::Runtime runtime = open_runtime_of(a.devices);
  const std::shared_ptr<const api::Model> loaded =
      load_planned(runtime, plan_model(runtime, dir, {a.draft, aux, kMaxRows, a.ctx, a.mmproj, a.chat_template,
                                                      a.check_tensors, a.experts_in_host, split_shares(a.devices)}));
  const api::Model& m = *loaded;
  const api::ModelInfo info = api::model_info(m);
  const bool draft = m.draft != nullptr;
  const uint32_t context = m.planned_context;
  if (draft) print_draft_taps(info, !a.aux_layers.empty());
  PreparedPrompt prepared = prepare_prompt(m, source);
  const std::vector<int32_t>& prompt = prepared.ids;
  if (prompt.size() >= context) fail("the prompt has {} tokens {}", prompt.size(), context_advice(m, context));

  if (draft && tree.enabled()) tree = resolve_tree(m, tree, {prompt});

  // The session lives across the turns of --interactive, whose next turns continue its KV
  // caches. At T > 0 chain drafts are drawn from the draft's distribution unless
  // --greedy-drafts: it accepts more (both keep the target's distribution).
  api::SessionParams params;
  params.context = context;
  params.max_rows = kMaxRows;
  params.k = tree.enabled() ? 0 : a.spec.k;
  params.tree = tree;
  params.greedy_drafts = a.greedy_drafts;
  params.sampling = sampling;
  params.max_new_tokens = a.n_predict;
  params.ignore_eos = a.ignore_eos;
  params.stop = a.stop;
  params.logprobs = a.logprobs;
  params.top_logits = a.top_logits;
  api::Session session(loaded, params);
  TapDump dump;
  if (draft && !a.dump_taps.empty())
    session.set_tap_callback([&](auto tokens, auto positions, auto hidden) { dump.add(tokens, positions, hidden); });

  api::GenerateOutput r;
  std::string text;
  std::string prompt_text = prepared.text;
  // One generation: streams its text (up to a stop string) unless --json, then reports it.
  auto generate_turn = [&](const std::vector<int32_t>& ids, bool reuse) {
    text.clear();
    const api::PieceCallback emit = [&](int32_t, std::string_view piece) {
      text += piece;
      if (!a.json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    };
    r = reuse ? session.generate_reusing_prefix(ids, emit)
        : prepared.images ? session.generate(*prepared.images, emit)
                          : session.generate(ids, emit);
    const engine::SpecStats& stats = r.stats;
    const char* reason = api::stop_reason(r);
    double prefill_tps = r.prefill_seconds > 0 ? (r.prompt_ids.size() - r.reused_tokens) / r.prefill_seconds : 0;
    double decode_tps = r.tokens.size() > 1 && r.decode_seconds > 0 ? (r.tokens.size() - 1) / r.decode_seconds : 0;
    if (a.json) {
      nlohmann::json j;
      if (a.prompt_ids.empty()) j["prompt_text"] = prompt_text;  // as encoded: the rendered chat, or -p/-f
      j["prompt_tokens"] = r.prompt_ids;
      j["tokens"] = r.tokens;
      j["text"] = text;
      j["stop_reason"] = reason;
      j["reused_tokens"] = r.reused_tokens;
      j["context"] = context;
      j["seed"] = sampling.seed;
      j["timing"] = {{"prefill_tokens_per_s", prefill_tps}, {"decode_tokens_per_s", decode_tps}};
      if (prepared.images) {
        j["timing"]["image_seconds"] = prepared.image_seconds;
        j["image_tiles"] = prepared.images->tiles;
      }
      if (draft)
        j["stats"] = {{"num_drafts", stats.num_drafts},
                      {"num_draft_tokens", stats.num_draft_tokens},
                      {"num_accepted_tokens", stats.num_accepted_tokens},
                      {"mean_acceptance_length", stats.mean_acceptance_length()},
                      {"acceptance_per_position", stats.acceptance_per_position()}};
      if (a.top_logits) {
        nlohmann::json top = nlohmann::json::array();
        for (auto& [id, v] : r.prompt_top_logits) top.push_back({id, v});
        j["prompt_top_logits"] = top;
      }
      if (a.logprobs) j["logprobs"] = logprobs_json(r.logprobs);
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("\n");
    }
    fmt::print(stderr, "\nprompt tokens: {}{}  generated tokens: {}\nprefill: {:.1f} tokens/s  decode: {:.1f} tokens/s  (stopped: {})\n",
               r.prompt_ids.size(), r.reused_tokens ? fmt::format(" ({} from the cache)", r.reused_tokens) : "",
               r.tokens.size(), prefill_tps, decode_tps, reason);
    if (draft) fmt::print(stderr, "{}", stats.block());
  };

  api::profile_reset();  // the profile covers generation, not the model's upload
  generate_turn(prompt, false);
  if (!a.dump_taps.empty()) dump.write(a.dump_taps, info.draft_taps, int(info.hidden_size));
  size_t generated = r.tokens.size();
  if (a.interactive) {
    // A chat on the terminal (or lines piped in): each line is the next user turn, asked
    // after the model's answer; the conversation's KV caches are kept from turn to turn. An
    // empty line or the end of input ends it.
    std::vector<loader::ChatMessage> conversation;
    if (!a.system.empty()) conversation.push_back({"system", a.system});
    conversation.push_back({"user", source.text});
    const bool tty = isatty(STDIN_FILENO);
    for (std::string line;;) {
      conversation.push_back({"assistant", text});
      if (tty) fmt::print(stderr, "\n> ");
      if (!std::getline(std::cin, line) || line.empty()) break;
      conversation.push_back({"user", line});
      prompt_text = api::apply_chat_template(m, conversation, true);
      const std::vector<int32_t> ids = api::tokenize(m, prompt_text, false);
      if (ids.size() >= context) fail("the conversation has {} tokens {}", ids.size(), context_advice(m, context));
      generate_turn(ids, true);
      generated += r.tokens.size();
    }
  }
  // EAGLEVK_PROFILE=1: GPU time per command family over the generation (prefill included),
  // divided by the generated tokens, and the host's recording and waiting time.
  if (const std::string profile = api::profile_report(generated); !profile.empty()) fmt::print(stderr, "{}", profile);
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt (the bundled tiny model without -m)");
  sub->footer("Example: eaglevk run -d assets/tiny-llama3-eagle3 -p \"The modules described in this chapter\" -n 64");
  sub->add_option("-m,--model", args->model, "model: a Hugging Face folder or a GGUF file (default: the bundled one)");
  args->prompt_option = sub->add_option("-p,--prompt", args->prompt, "prompt text");
  sub->add_option("-f,--file", args->file, "read the prompt from a file");
  args->prompt_ids_option = sub->add_option("--prompt-ids", args->prompt_ids, "comma-separated token ids, used as given (no BOS added)");
  sub->add_option("--mmproj", args->mmproj,
                  "llama.cpp's vision file (mmproj-*.gguf) for a Llama-4 GGUF model");
  sub->add_option("-n,--n-predict", args->n_predict, "tokens to generate")->capture_default_str()->check(integer_flag<uint32_t>());
  sub->add_flag("--chat", args->chat, "render the prompt as one user turn with the chat template");
  sub->add_option("--chat-template", args->chat_template,
                  "a Jinja chat template file to use instead of the model's")->type_name("FILE");
  add_check_tensors_flags(sub, args->check_tensors);
  add_experts_in_host_flags(sub, args->experts_in_host);
  sub->add_option("--image", args->images,
                  "PNG or JPEG for a Llama-4 vision model, before the text (repeatable)");
  sub->add_option("--messages", args->messages,
                  "a conversation as Hugging Face chat JSON, with or without images");
  sub->add_option("--allowed-image-dir", args->allowed_image_dirs,
                  "with --messages: a folder besides the file's own its images may be in")->type_name("DIR");
  sub->add_option("--system", args->system, "system message (with --chat)");
  sub->add_option("--temp", args->temp, "temperature; 0 is greedy")->capture_default_str();
  args->top_k_option = sub->add_option("--top-k", args->top_k, "keep the k most likely tokens (0: off)")
                           ->capture_default_str()
                           ->check(integer_flag<int32_t>());
  args->top_p_option = sub->add_option("--top-p", args->top_p, "nucleus sampling mass (1: off)")->capture_default_str();
  args->seed_option = sub->add_option("--seed", args->seed, "random seed; -1 or none at --temp > 0: a random one, printed");
  sub->add_option("--stop", args->stop, "end generation at this text, which is not printed (repeatable)");
  sub->add_flag("-i,--interactive", args->interactive,
                "with --chat: read further user turns from stdin, keeping the KV cache");
  sub->add_option("--ctx", args->ctx, "context length in tokens (default: the model's maximum, or what fits)")
      ->check(integer_flag<uint32_t>());
  sub->add_flag("--ignore-eos", args->ignore_eos, "keep generating through end-of-sequence tokens");
  sub->add_option("-d,--draft", args->draft, "EAGLE-3 draft head (folder or GGUF file): speculative decoding");
  add_spec_flags(sub, args->spec);
  sub->add_flag("--draft-sampling", args->draft_sampling,
                "the default at --temp > 0: drafts drawn from the draft, min(1, p/q)");
  sub->add_flag("--greedy-drafts", args->greedy_drafts,
                "at --temp > 0: propose the draft's argmax instead (vLLM's default)");
  sub->add_option("--aux-layers", args->aux_layers, "tap layer ids a,b,c (overrides the draft config)");
  sub->add_option("--dump-taps", args->dump_taps, "write the taps of verified positions to a safetensors file");
  add_device_flags(sub, args->devices);
  sub->add_flag("--json", args->json, "print one JSON object instead of streaming text");
  sub->add_option("--top-logits", args->top_logits, "with --json: the K largest logits at the last prompt position")
      ->check(integer_flag<uint32_t>());
  sub->add_option("--logprobs", args->logprobs,
                  "with --json: each token's log-probability and the N most likely ones")
      ->check(integer_flag<uint32_t>());
  register_runner(sub, [args] { return run_command(*args); });
}

}  // namespace eaglevk::cli
