#pragma once
// `eaglevk serve`'s front: the listening socket, its connections and every limit on what a client
// may send, ahead of cpp-httplib (docs/serve.md says why). A thread per connection reads the
// request head (serve_head.h) and the whole body within their deadlines and sizes, and only then
// hands the request on; what the front refuses (400, 401, 408, 411, 413, 431, ...) it answers
// itself and closes. At the connection cap a new client takes the place of the connection that
// has waited longest for a request head, so idle and slow sockets cannot crowd others out.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "apps/cli/serve_head.h"
#include "apps/cli/serve_metrics.h"

namespace eaglevk::cli::serve {

using Clock = std::chrono::steady_clock;

struct FrontOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: a free one
  std::string api_key;   // empty: none asked for
  uint64_t max_body_bytes = 32 << 20;
  // A client's time to send a request head, then its body, and to take each piece of an answer;
  // also how long a kept-alive connection may sit idle.
  std::chrono::seconds io_timeout{20};
  size_t max_connections = 256;
};

// The request a connection thread is serving, for the handler that runs on that thread
// (current_exchange()): whether its client is still there, and what goes into its log line.
struct Exchange {
  int fd = -1;
  std::string method, path;
  int status = 0;
  uint64_t tokens = 0;  // generated tokens, for the log line
  Clock::time_point start;
  // Whether the client closed its side or reset the connection (a request that nobody will read
  // should stop decoding).
  bool client_gone() const;
};
Exchange* current_exchange();

// A request read in full: the head as forwarded (serve_head.h) and the body.
struct FullRequest {
  std::string head, body;
  bool keep_alive = true;
};

class Front {
 public:
  // Handles a request on the connection's thread, writing the answer to the socket; returns
  // whether the connection may carry another request.
  using Handler = std::function<bool(Exchange& exchange, const FullRequest& request, bool last)>;

  // Binds and listens; fails, naming the address, when it cannot (a port in use included: the
  // socket takes SO_REUSEADDR only, never SO_REUSEPORT, so a second server cannot share it).
  Front(const FrontOptions& options, Metrics& metrics);
  ~Front();
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;

  int listen_fd() const { return listen_fd_; }
  uint16_t port() const { return port_; }
  // Accepts and serves until stop(); then waits for the requests under way to end.
  void run(const Handler& handler);
  // Callable from any thread: stops accepting and closes the idle connections.
  void stop();

 private:
  struct Connection {
    int fd;
    bool waiting;  // for a request head: what may be closed to make room
    Clock::time_point since;
  };
  void serve_connection(uint64_t id, int fd, const Handler& handler);  // then closes it
  void exchanges(uint64_t id, int fd, const Handler& handler);         // its requests, one by one
  // Marks a connection as waiting for a request head or not; false once stopping.
  bool set_waiting(uint64_t id, bool waiting);
  // Room for one more connection: true when there was room or a waiting one was closed for it.
  bool make_room();
  void refuse(int fd, const Exchange& x, const HttpError& e, bool drain);

  FrontOptions options_;
  Metrics& metrics_;
  int listen_fd_ = -1, wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::mutex mutex_;
  std::condition_variable ended_;
  std::map<uint64_t, Connection> connections_;
  bool stopping_ = false;
};

// Writes all of `data`, waiting at most `timeout` for the socket to take each piece; false when
// the client is gone or too slow.
bool send_all(int fd, std::string_view data, std::chrono::seconds timeout);

}  // namespace eaglevk::cli::serve
