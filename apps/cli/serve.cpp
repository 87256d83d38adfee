// `eaglevk serve`: an OpenAI-compatible HTTP server on one model (docs/serve.md). The model
// loads as for `run`; then a scheduler thread decodes the requests of every client together
// (api::BatchSession) while the front's connection threads take requests within their limits
// and cpp-httplib's routes answer them (serve_front.h, serve_http.h).
#include <algorithm>
#include <cstdlib>
#include <memory>

#include <fmt/core.h>

#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "apps/cli/device_flags.h"
#include "apps/cli/integer_flags.h"
#include "apps/cli/model_files.h"
#include "apps/cli/serve_http.h"
#include "apps/cli/serve_scheduler.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/usage.h"
#include "loader/input_path.h"

namespace eaglevk::cli {
namespace {

struct ServeArgs {
  std::string model, draft, mmproj, chat_template, host = "127.0.0.1", api_key, seed, cors_origin;
  std::vector<std::string> allowed_image_dirs;
  std::optional<bool> check_tensors, experts_in_host;
  SpecFlags spec;
  DeviceFlags devices;
  CLI::Option *parallel_option = nullptr, *seed_option = nullptr, *api_key_option = nullptr,
              *cors_origin_option = nullptr;
  uint32_t parallel = 4, ctx = 0, max_queue = 64, timeout = 600, max_body_mib = 32, port = 8080;
  uint32_t io_timeout = 20, max_connections = 256;
  bool greedy_drafts = false;
};

int serve_command(const ServeArgs& a) {
  if (a.draft.empty() && (a.spec.k_option->count() || a.greedy_drafts))
    usage_fail("{} needs a draft (-d)", a.spec.k_option->count() ? "-k" : "--greedy-drafts");
  if (a.draft.empty() && a.spec.tree()) usage_fail("the --spec-* tree flags need a draft (-d)");
  engine::TreeParams tree;
  uint32_t parallel = a.parallel;
  if (a.spec.tree()) {
    tree = a.spec.tree_params();
    // `auto` calibrates on prompts (run's, eval's dataset); a server has none before it starts.
    if (a.spec.auto_tokens())
      usage_fail("--spec-draft-tokens auto needs prompts to calibrate on, which serve does not have: give a "
                 "count (`eaglevk run --spec-draft-tokens auto` on typical prompts prints the shape it chose)");
    // The decoder drafts trees for one sequence at a time: requests then decode one after another.
    if (a.parallel_option->count() && a.parallel != 1)
      usage_fail("tree drafting (--spec-*) decodes one request at a time: --parallel must be 1, got {}", a.parallel);
    parallel = 1;
  } else if (!a.draft.empty() && a.spec.k != 0) {  // -k 0 loads the draft but turns speculation off
    a.spec.check_chain();
  }
  if (a.host.empty()) usage_fail("--host is empty");
  for (const std::string& folder : a.allowed_image_dirs)
    if (std::string p = loader::folder_problem(folder, "--allowed-image-dir"); !p.empty()) fail("{}", p);
  serve::ServerOptions options;
  serve::FrontOptions& front = options.front;
  front.host = a.host;
  front.port = uint16_t(a.port);
  // The key may come from the environment, where other users cannot read it (a command line
  // shows in `ps`). An empty one is a mistake (an unset variable in a script), never "no key".
  if (a.api_key_option->count()) {
    front.api_key = a.api_key;
    if (front.api_key.empty()) usage_fail("--api-key is empty: give the key clients must send, or leave the flag out");
  } else if (const std::optional<std::string> key = api::environment_switch("EAGLEVK_API_KEY")) {
    front.api_key = *key;
    if (front.api_key.empty()) fail("EAGLEVK_API_KEY is set but empty: give it the key clients must send, or unset it");
  }
  if (std::any_of(front.api_key.begin(), front.api_key.end(), [](char c) { return uint8_t(c) <= 0x20 || uint8_t(c) >= 0x7f; }))
    usage_fail("the API key has spaces or characters outside printable ASCII, which an Authorization header cannot carry");
  front.max_body_bytes = uint64_t(a.max_body_mib) << 20;
  front.io_timeout = std::chrono::seconds(a.io_timeout);
  front.max_connections = a.max_connections;
  // The origin goes into a header as given: one word of printable ASCII, never a line break.
  if (a.cors_origin_option->count() &&
      (a.cors_origin.empty() ||
       std::any_of(a.cors_origin.begin(), a.cors_origin.end(), [](char c) { return uint8_t(c) <= 0x20 || uint8_t(c) >= 0x7f; })))
    usage_fail("--cors-origin '{}' is not an origin (such as https://example.com, or *)", a.cors_origin);
  options.cors_origin = a.cors_origin;
  options.timeout = std::chrono::seconds(a.timeout);
  options.allowed_image_dirs.assign(a.allowed_image_dirs.begin(), a.allowed_image_dirs.end());
  const std::optional<uint64_t> seed = a.seed_option->count() ? parse_seed(a.seed) : std::nullopt;
  options.default_seed = seed ? *seed : announced_random_seed();
  if (a.host != "127.0.0.1" && a.host != "localhost" && a.host != "::1" && front.api_key.empty())
    fmt::print(stderr, "eaglevk: warning: --host {} lets other machines reach the server, and no --api-key is set\n",
               a.host);

  serve::StopSignals signals;  // first: before any thread starts
  serve::Metrics metrics;
  // Bound before the model loads: a port in use fails now, not after a minute of loading.
  serve::Front listener(front, metrics);
  const std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  const api::Runtime runtime = open_runtime_of(a.devices);
  const std::shared_ptr<const api::Model> model = load_planned(
      runtime, plan_model(runtime, dir, {a.draft, {}, api::kSessionMaxRows, a.ctx, a.mmproj, a.chat_template, a.check_tensors,
                                     a.experts_in_host, split_shares(a.devices)}));
  options.model_name = api::model_name(dir);

  api::BatchParams batch;
  batch.sequences = parallel;
  batch.context = model->planned_context;
  batch.k = model->draft && !tree.enabled() ? a.spec.k : 0;
  batch.greedy_drafts = a.greedy_drafts;
  if (std::string problem = api::batch_memory_problem(model->memory, batch.sequences, batch.context); !problem.empty())
    fail("{} (lower --parallel or --ctx)", problem);
  serve::Scheduler scheduler(model, batch, tree, a.max_queue, metrics);
  return serve::run_server(model, scheduler, metrics, options, listener, signals);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API (docs/serve.md)");
  sub->footer("Example: eaglevk serve -m assets/tiny-llama3 -d assets/tiny-llama3-eagle3 --port 8080");
  sub->add_option("-m,--model", args->model, "model: a Hugging Face folder or a GGUF file (default: the bundled one)");
  sub->add_option("-d,--draft", args->draft, "EAGLE-3 draft head (folder or GGUF file): speculative decoding");
  add_spec_flags(sub, args->spec);
  sub->add_flag("--greedy-drafts", args->greedy_drafts, "at temperature > 0: propose the draft's argmax");
  sub->add_option("--mmproj", args->mmproj, "llama.cpp's vision file (mmproj-*.gguf) for a Llama-4 GGUF model");
  sub->add_option("--chat-template", args->chat_template, "a Jinja chat template file to use instead of the model's")
      ->type_name("FILE");
  add_check_tensors_flags(sub, args->check_tensors);
  add_experts_in_host_flags(sub, args->experts_in_host);
  sub->add_option("--host", args->host, "address to listen on (other machines reach only a public one)")
      ->capture_default_str();
  sub->add_option("--port", args->port, "TCP port (0: a free one, printed)")->capture_default_str()->check(integer_in(0, 65535));
  args->parallel_option = sub->add_option("--parallel", args->parallel, "the most requests decoding together (1 with tree drafting)")
      ->capture_default_str()
      ->check(integer_in(1, 64));
  sub->add_option("--ctx", args->ctx, "tokens of context per request (default: the most that fits)")
      ->check(integer_flag<uint32_t>());
  args->api_key_option =
      sub->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' (or set EAGLEVK_API_KEY)");
  sub->add_option("--max-queue", args->max_queue, "the most requests waiting; more get 429")
      ->capture_default_str()
      ->check(integer_in(0, 100000));
  sub->add_option("--timeout", args->timeout, "seconds a request may take, queue included")
      ->capture_default_str()
      ->check(integer_in(1, 86400));
  sub->add_option("--max-body-mib", args->max_body_mib, "the largest request body in MiB; larger get 413")
      ->capture_default_str()
      ->check(integer_in(1, 4096));
  sub->add_option("--io-timeout", args->io_timeout, "seconds a client may take to send a request or take an answer")
      ->capture_default_str()
      ->check(integer_in(1, 3600));
  sub->add_option("--max-connections", args->max_connections, "open connections; idle ones give way to new clients")
      ->capture_default_str()
      ->check(integer_in(1, 512));
  args->cors_origin_option = sub->add_option("--cors-origin", args->cors_origin, "let browser pages from this origin call the API (CORS)")
      ->type_name("ORIGIN");
  sub->add_option("--allowed-image-dir", args->allowed_image_dirs, "a folder image paths in requests may be in")
      ->type_name("DIR");
  args->seed_option = sub->add_option("--seed", args->seed, "seed of requests at temperature > 0 that give none");
  add_device_flags(sub, args->devices);
  register_runner(sub, [args] { return serve_command(*args); });
}

}  // namespace eaglevk::cli
