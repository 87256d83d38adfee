#include "apps/cli/serve_http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

#include <fmt/core.h>
#include <httplib.h>

#include <eaglevk/error.h>

#include "apps/cli/model_files.h"
#include "apps/cli/serve_response.h"
#include "loader/input_path.h"

namespace eaglevk::cli::serve {
namespace {

using json = nlohmann::json;

struct Server {
  Server(std::shared_ptr<const api::Model> model, Scheduler& scheduler, Metrics& metrics, const ServerOptions& options)
      : model(std::move(model)), scheduler(scheduler), metrics(metrics), options(options) {}
  std::shared_ptr<const api::Model> model;
  Scheduler& scheduler;
  Metrics& metrics;
  const ServerOptions& options;
  // The chat template, the tokenizer and the image decoders run on handler threads; one at a
  // time, which costs little next to decoding and leaves no doubt about what they share.
  std::mutex text_mutex;
  std::atomic<uint64_t> next_id{1};
};

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(json_text(error_json(e)), "application/json");
}

std::vector<int32_t> prompt_of(Server& s, const Request& r, uint32_t context) {
  const api::Model& m = *s.model;
  std::vector<int32_t> ids;
  try {
    if (r.endpoint == Endpoint::Chat) {
      if (!m.chat) refuse(400, "messages", fmt::format("this model has no usable chat template: {}", m.chat_error));
      const std::string rendered = api::apply_chat_template(m, r.messages, true);
      check_text_fits(m, rendered, "the chat prompt");
      ids = api::tokenize(m, rendered, false);  // the rendered template carries BOS itself
    } else if (!r.prompt_ids.empty()) {
      ids = r.prompt_ids;
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= m.vocab_size())
          refuse(400, "prompt", fmt::format("prompt token {} (at {}) is outside the vocabulary of {}", ids[i], i, m.vocab_size()));
    } else {
      check_text_fits(m, r.prompt, "the prompt");
      ids = api::tokenize(m, r.prompt, true);
    }
  } catch (const Error& e) {
    refuse(400, r.endpoint == Endpoint::Chat ? "messages" : "prompt", e.what());
  }
  if (ids.size() >= context)
    refuse(400, r.endpoint == Endpoint::Chat ? "messages" : "prompt",
           fmt::format("the prompt has {} tokens but the context holds {} (one more is needed for the first new token)",
                       ids.size(), context),
           "context_length_exceeded");
  return ids;
}

std::vector<loader::RgbImage> images_of(Server& s, const Request& r) {
  std::vector<loader::RgbImage> images;
  if (r.images.empty()) return images;
  if (!s.model->images) refuse(400, "messages", fmt::format("this model cannot take images: {}", s.model->no_images_reason));
  for (size_t i = 0; i < r.images.size(); ++i) {
    const ImageInput& in = r.images[i];
    const std::string name = fmt::format("image {}", i + 1);
    try {
      if (!in.bytes.empty()) {
        const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(in.bytes.data()), in.bytes.size());
        images.push_back(loader::decode_image(bytes, {}, name));
        continue;
      }
      // A file is read only from a folder the server was told to allow (never "../../.ssh/...").
      const auto& dirs = s.options.allowed_image_dirs;
      if (dirs.empty())
        refuse(400, "messages", fmt::format("{} is a file path; the server reads image files only with "
                                            "--allowed-image-dir (or send a data URL)", name));
      if (std::none_of(dirs.begin(), dirs.end(), [&](const auto& d) { return loader::path_is_inside(in.path, d); }))
        refuse(400, "messages", fmt::format("{} lies outside --allowed-image-dir", name));
      images.push_back(loader::load_image(in.path));
    } catch (const Error& e) {
      refuse(400, "messages", fmt::format("{}: {}", name, e.what()));
    }
  }
  return images;
}

std::shared_ptr<Job> prepare(Server& s, const std::string& body, Endpoint endpoint) {
  auto job = std::make_shared<Job>();
  job->request = parse_request(body, endpoint);
  const Request& r = job->request;
  if (r.model != s.options.model_name)
    refuse(404, "model", fmt::format("the model '{}' does not exist; this server serves '{}'", r.model.substr(0, 200),
                                     s.options.model_name),
           "model_not_found");
  const uint32_t context = s.scheduler.context();
  {
    std::lock_guard lock(s.text_mutex);
    job->prompt = prompt_of(s, r, context);
    job->images = images_of(s, r);
  }
  api::SequenceParams& p = job->params;
  // At temperature 0 the other settings change nothing: cleared, so that greedy requests share
  // a batch whatever else they say.
  if (r.temperature > 0) p.sampling = {r.temperature, r.top_k, r.top_p, r.seed.value_or(s.options.default_seed)};
  try {
    engine::check_sampling(p.sampling);
  } catch (const Error& e) {
    refuse(400, "", e.what());
  }
  const uint32_t room = context - uint32_t(job->prompt.size());
  p.max_new_tokens = std::min(r.max_tokens.value_or(room), room);
  p.ignore_eos = r.ignore_eos;
  p.stop = r.stop;
  p.logprobs = r.logprobs ? std::max(r.top_logprobs, 1u) : 0;  // 1 at least: the token's own
  job->deadline = Clock::now() + s.options.timeout;
  return job;
}

Usage usage_of(const Server& s, const Job& job) {
  const api::GenerateOutput& out = job.output;
  Usage u;
  u.prompt_tokens = out.prompt_tokens;  // with images, their tile tokens too
  u.completion_tokens = out.tokens.size();
  u.speculative = s.model->draft && s.scheduler.speculative();
  u.drafts = out.stats.num_drafts;
  u.draft_tokens = out.stats.num_draft_tokens;
  u.accepted_tokens = out.stats.num_accepted_tokens;
  u.acceptance_length = out.stats.num_drafts ? out.stats.mean_acceptance_length() : 0;
  return u;
}

std::string finish_reason(const api::GenerateOutput& out) {
  return out.stopped_at_eos || out.stopped_at_stop_string ? "stop" : "length";
}

// The engine's log-probabilities with their tokens' texts.
std::vector<TokenLogprob> token_logprobs_of(Server& s, const std::vector<engine::TokenLogprobs>& logprobs) {
  std::vector<TokenLogprob> out;
  std::lock_guard lock(s.text_mutex);
  auto token_text = [&](int32_t id) { return api::detokenize(*s.model, std::span(&id, 1), false); };
  for (const engine::TokenLogprobs& t : logprobs) {
    TokenLogprob entry{token_text(t.token), t.logprob, {}};
    for (const auto& [id, logprob] : t.top) entry.top.emplace_back(token_text(id), logprob);
    out.push_back(std::move(entry));
  }
  return out;
}

Answer answer_of(Server& s, const Job& job, std::string text) {
  Answer a;
  a.text = std::move(text);
  a.finish_reason = finish_reason(job.output);
  a.token_ids = job.output.tokens;
  a.usage = usage_of(s, job);
  if (job.request.logprobs) a.logprobs = token_logprobs_of(s, job.output.logprobs);
  return a;
}

AnswerId answer_id(Server& s, Endpoint endpoint) {
  return {fmt::format("{}-{}", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl", s.next_id++), int64_t(std::time(nullptr)),
          s.options.model_name};
}

// Streams the answer: one event per round's text (and its tokens' log-probabilities when asked),
// the finish reason, usage when asked, [DONE].
// A client that goes away makes a write fail: the job is abandoned and the scheduler cancels
// its sequence at the next round.
void stream_answer(Server& s, const httplib::Request& req, httplib::Response& res, std::shared_ptr<Job> job,
                   std::string first_text, std::vector<int32_t> first_ids) {
  struct State {
    AnswerId id;
    bool first = true, sent_first = false;
    std::string text;
    std::vector<int32_t> ids;
    std::vector<engine::TokenLogprobs> logprobs;  // with Request::logprobs
    size_t text_offset = 0;                       // the token texts' length streamed so far
  };
  auto state = std::make_shared<State>();
  state->id = answer_id(s, job->request.endpoint);
  state->text = std::move(first_text);
  state->ids = std::move(first_ids);
  const std::string path = req.path;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&s, job, state, path](size_t, httplib::DataSink& sink) {
        const Request& r = job->request;
        const bool finished = job->wait(state->text, state->ids, std::chrono::milliseconds(state->sent_first ? 250 : 0),
                                        r.logprobs ? &state->logprobs : nullptr);
        auto send = [&](const std::string& event) {
          if (sink.write(event.data(), event.size())) return true;
          job->abandoned = true;
          return false;
        };
        if (!state->text.empty() || !state->sent_first || !state->logprobs.empty()) {
          const std::vector<TokenLogprob> logprobs = token_logprobs_of(s, state->logprobs);
          if (!send(sse_event(chunk_json(r, state->id, state->text, state->first, std::nullopt, state->ids, logprobs,
                                         state->text_offset))))
            return false;
          for (const TokenLogprob& t : logprobs) state->text_offset += t.token.size();
          state->first = false;
          state->sent_first = true;
          state->text.clear();
          state->ids.clear();
          state->logprobs.clear();
        }
        if (!finished) return true;
        if (job->error) {
          send(sse_event(error_json(*job->error)));
          s.metrics.count_request(path, job->error->status);
        } else {
          if (Exchange* x = current_exchange()) x->tokens = job->output.tokens.size();
          send(sse_event(chunk_json(r, state->id, "", false, finish_reason(job->output))));
          if (r.include_usage) send(sse_event(usage_chunk_json(r, state->id, usage_of(s, *job))));
          send(std::string(kSseDone));
          s.metrics.count_request(path, 200);
        }
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->abandoned = true;
      });
}

// Whether the client of a request that has not been answered yet went away (closed or reset its
// connection): then nobody reads the answer, and the job is abandoned so that its decoding stops.
// 499 (nginx's "client closed request") only names it in the log: nobody receives it.
bool client_left(Job& job, httplib::Response& res) {
  const Exchange* x = current_exchange();
  if (!x || !x->client_gone()) return false;
  job.abandoned = true;
  res.status = 499;
  return true;
}

void completions(Server& s, const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  std::shared_ptr<Job> job;
  try {
    if (!s.scheduler.healthy()) throw RequestRefused{{503, "the server cannot decode any more (see its log)", "server_error", "", "unavailable"}};
    job = prepare(s, req.body, endpoint);
    if (!s.scheduler.submit(job))
      throw RequestRefused{{429, fmt::format("the queue is full ({} requests wait): try again later",
                                             s.scheduler.gauges().max_queue),
                            "rate_limit_exceeded", "", "queue_full"}};
  } catch (const RequestRefused& e) {
    send_error(res, e.error);
    if (e.error.status == 429) res.set_header("Retry-After", "1");  // a queue slot frees within a request
    s.metrics.count_request(req.path, e.error.status);
    return;
  }
  // Wait for the first text (or the end): an error found by the scheduler (a prompt too long
  // once its images are laid out) still gets its status instead of a stream already begun.
  // A client that leaves meanwhile abandons its job: the scheduler drops or cancels it.
  std::string text;
  std::vector<int32_t> ids;
  bool finished = false;
  while (!(finished = job->wait(text, ids, std::chrono::milliseconds(250))) && text.empty() && ids.empty())
    if (client_left(*job, res)) return;
  if (finished && job->error) {
    send_error(res, *job->error);
    s.metrics.count_request(req.path, job->error->status);
    return;
  }
  if (job->request.stream) return stream_answer(s, req, res, job, std::move(text), std::move(ids));
  while (!finished && !(finished = job->wait(text, ids, std::chrono::milliseconds(250))))
    if (client_left(*job, res)) return;
  if (job->error) {
    send_error(res, *job->error);
    s.metrics.count_request(req.path, job->error->status);
    return;
  }
  if (Exchange* x = current_exchange()) x->tokens = job->output.tokens.size();
  res.set_content(json_text(answer_json(job->request, answer_id(s, endpoint), answer_of(s, *job, std::move(text)))),
                  "application/json");
  s.metrics.count_request(req.path, 200);
}

// Bodies for the answers httplib makes itself (no route, a body over the limit), in OpenAI's shape.
void describe_error(const Server& s, const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;
  HttpError e{res.status, fmt::format("HTTP {}", res.status), "invalid_request_error", "", ""};
  if (res.status == 404) {
    e.message = fmt::format("unknown endpoint: {} {}", req.method, req.path.substr(0, 200));
    e.code = "unknown_url";
  } else if (res.status == 413) {
    e.message = fmt::format("the request body is larger than --max-body-mib ({} bytes)", s.options.front.max_body_bytes);
    e.code = "request_too_large";
  } else if (res.status == 400) {
    e.message = "malformed HTTP request";
  }
  res.set_content(json_text(error_json(e)), "application/json");
  s.metrics.count_request(req.path, res.status);
}

json model_json(const Server& s) {
  return {{"id", s.options.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "eaglevk"}};
}

// cpp-httplib's request processing on a request the front has read in full: process_request
// parses the forwarded head, routes, and writes the answer (streamed ones too) to the socket.
// Only the socket loop of httplib::Server goes unused, and with it its unbounded reads.
class Router : public httplib::Server {
 public:
  // httplib cuts a streamed answer short once its listening socket is gone (svr_sock_, which
  // its own listen() would set): the front's stands in for it.
  explicit Router(int listen_fd) { svr_sock_ = listen_fd; }
  bool serve(httplib::Stream& stream, bool last, bool& closed) { return process_request(stream, last, closed, nullptr); }
};

// The request as bytes in memory (the forwarded head, then the body), and the client's socket
// for the answer, each write within the front's deadline.
class ExchangeStream final : public httplib::Stream {
 public:
  ExchangeStream(int fd, const FullRequest& request, std::chrono::seconds timeout)
      : fd_(fd), request_(request), timeout_(timeout) {}
  bool is_readable() const override { return offset_ < request_.head.size() + request_.body.size(); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return poll(&p, 1, int(std::chrono::milliseconds(timeout_).count())) > 0 && !(p.revents & (POLLERR | POLLHUP));
  }
  ssize_t read(char* ptr, size_t size) override {
    const std::string& part = offset_ < request_.head.size() ? request_.head : request_.body;
    const size_t at = offset_ < request_.head.size() ? offset_ : offset_ - request_.head.size();
    const size_t n = std::min(size, part.size() - at);
    std::copy_n(part.data() + at, n, ptr);
    offset_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    return send_all(fd_, std::string_view(ptr, size), timeout_) ? ssize_t(size) : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(getsockname, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t size = sizeof a;
    char host[NI_MAXHOST] = "", service[NI_MAXSERV] = "0";
    if (get(fd_, reinterpret_cast<sockaddr*>(&a), &size) == 0)
      getnameinfo(reinterpret_cast<sockaddr*>(&a), size, host, sizeof host, service, sizeof service,
                  NI_NUMERICHOST | NI_NUMERICSERV);
    ip = host;
    port = std::atoi(service);
  }
  int fd_;
  const FullRequest& request_;
  std::chrono::seconds timeout_;
  size_t offset_ = 0;
};

}  // namespace

int run_server(const std::shared_ptr<const api::Model>& model, Scheduler& scheduler, Metrics& metrics,
               const ServerOptions& options, Front& front, StopSignals& signals) {
  Server s(model, scheduler, metrics, options);
  Router http(front.listen_fd());
  http.set_payload_max_length(options.front.max_body_bytes);  // the front has checked; a second guard
  http.set_keep_alive_timeout(options.front.io_timeout.count());
  http.set_keep_alive_max_count(100);
  // The status of each request, for the front's log line.
  http.set_logger([](const httplib::Request&, const httplib::Response& res) {
    if (Exchange* x = current_exchange()) x->status = res.status;
  });
  if (!options.cors_origin.empty()) {
    // Opt-in: a browser page served from that origin may call the API (the key still applies).
    http.set_default_headers({{"Access-Control-Allow-Origin", options.cors_origin}, {"Vary", "Origin"}});
    http.Options(R"(/v1/.*)", [](const httplib::Request&, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    });
  }
  http.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) { describe_error(s, req, res); });
  http.set_exception_handler([&s](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, {500, what, "server_error", "", ""});
    s.metrics.count_request(req.path, 500);
  });

  http.Post("/v1/chat/completions",
            [&s](const httplib::Request& req, httplib::Response& res) { completions(s, req, res, Endpoint::Chat); });
  http.Post("/v1/completions",
            [&s](const httplib::Request& req, httplib::Response& res) { completions(s, req, res, Endpoint::Completion); });
  http.Get("/v1/models", [&s](const httplib::Request& req, httplib::Response& res) {
    res.set_content(json_text({{"object", "list"}, {"data", json::array({model_json(s)})}}), "application/json");
    s.metrics.count_request(req.path, 200);
  });
  http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id == s.options.model_name) {
      res.set_content(json_text(model_json(s)), "application/json");
    } else {
      send_error(res, {404, fmt::format("the model '{}' does not exist; this server serves '{}'", id.substr(0, 200),
                                        s.options.model_name),
                       "invalid_request_error", "model", "model_not_found"});
    }
    s.metrics.count_request("/v1/models", res.status);
  });
  http.Get("/health", [&s](const httplib::Request& req, httplib::Response& res) {
    const bool ok = s.scheduler.healthy();
    res.status = ok ? 200 : 503;
    res.set_content(json_text({{"status", ok ? "ok" : "error"}}), "application/json");
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics.text(s.scheduler.gauges()), "text/plain; version=0.0.4");
  });

  const FrontOptions& f = options.front;
  fmt::print(stderr, "eaglevk: serving {} on http://{}:{} (OpenAI API under /v1; Ctrl-C stops)\n", options.model_name,
             f.host, front.port());
  signals.on_stop([&front] { front.stop(); });
  front.run([&http, &f](Exchange& x, const FullRequest& request, bool last) {
    ExchangeStream stream(x.fd, request, f.io_timeout);
    bool closed = false;
    const bool written = http.serve(stream, last, closed);
    return written && !closed;
  });
  signals.on_stop({});
  fmt::print(stderr, "eaglevk: server stopped\n");
  return 0;
}

}  // namespace eaglevk::cli::serve
