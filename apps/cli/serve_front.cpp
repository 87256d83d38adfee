#include "apps/cli/serve_front.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/core.h>

#include <eaglevk/error.h>

namespace eaglevk::cli::serve {
namespace {

thread_local Exchange* t_exchange = nullptr;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

enum class Got { Bytes, Closed, TimedOut };

// Reads what the socket has (at most `size` bytes), waiting until `deadline`.
Got receive(int fd, char* buffer, size_t size, Clock::time_point deadline, size_t& n) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Got::TimedOut;
    const ssize_t r = recv(fd, buffer, size, MSG_DONTWAIT);
    if (r > 0) {
      n = size_t(r);
      return Got::Bytes;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    return Got::Closed;
  }
}

// What a client sent, fit for a log line: printable ASCII, a bounded length.
std::string printable(std::string_view s) {
  std::string out(s.substr(0, 120));
  for (char& c : out)
    if (uint8_t(c) < 0x20 || uint8_t(c) > 0x7e) c = '?';
  return out;
}

void log_exchange(const Exchange& x) {
  const double seconds = std::chrono::duration<double>(Clock::now() - x.start).count();
  fmt::print(stderr, "eaglevk: {} {} {} {} tokens {:.3f} s\n", x.method.empty() ? "-" : printable(x.method),
             x.path.empty() ? "-" : printable(x.path), x.status ? std::to_string(x.status) : "-", x.tokens, seconds);
}

}  // namespace

bool Exchange::client_gone() const {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

Exchange* current_exchange() { return t_exchange; }

bool send_all(int fd, std::string_view data, std::chrono::seconds timeout) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return false;
    // The client has not taken what was sent before: give it `timeout` to take some.
    pollfd p{fd, POLLOUT, 0};
    const int ready = poll(&p, 1, int(std::chrono::milliseconds(timeout).count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
  }
  return true;
}

Front::Front(const FrontOptions& options, Metrics& metrics) : options_(options), metrics_(metrics) {
  const std::string where = fmt::format("{}:{}", options.host, options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(options.host.c_str(), std::to_string(options.port).c_str(), &hints, &found); e != 0)
    fail("cannot listen on {}: --host '{}' is not an address ({})", where, options.host, gai_strerror(e));
  int error = 0;
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    // SO_REUSEADDR lets a restarted server bind over its predecessor's closing connections; it
    // never lets two listen on one port (SO_REUSEPORT would, and would split the clients).
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      error = errno;
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    if (error == EADDRINUSE)
      fail("cannot listen on {}: the port is in use (another server, perhaps another eaglevk serve, holds it): "
           "stop it or choose another --port", where);
    if (error == EADDRNOTAVAIL) fail("cannot listen on {}: {} is not an address of this machine", where, options.host);
    if (error == EACCES) fail("cannot listen on {}: ports below 1024 need privileges", where);
    fail("cannot listen on {}: {}", where, std::strerror(error));
  }
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &size);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                            : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) fail("cannot make a pipe: {}", std::strerror(errno));
}

Front::~Front() {
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) close(fd);
}

void Front::stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  // Connections waiting for a request end now; those in a request finish it first.
  for (auto& [id, c] : connections_)
    if (c.waiting) shutdown(c.fd, SHUT_RDWR);
  [[maybe_unused]] ssize_t n = write(wake_[1], "x", 1);
}

bool Front::make_room() {
  std::lock_guard lock(mutex_);
  if (connections_.size() < options_.max_connections) return true;
  // Full: the connection that has waited longest for a request head gives way. A client that
  // is really sending one takes milliseconds, so only idle and slow sockets are ever chosen.
  Connection* oldest = nullptr;
  for (auto& [id, c] : connections_)
    if (c.waiting && (!oldest || c.since < oldest->since)) oldest = &c;
  if (!oldest) return false;  // every connection is in a request
  shutdown(oldest->fd, SHUT_RDWR);
  oldest->waiting = false;  // its thread ends at once: not chosen twice
  return true;
}

bool Front::set_waiting(uint64_t id, bool waiting) {
  std::lock_guard lock(mutex_);
  // Under the lock that stop() takes: a connection either sees the stop here or is closed by it.
  if (waiting && stopping_) return false;
  Connection& c = connections_.at(id);
  c.waiting = waiting;
  c.since = Clock::now();
  return true;
}

void Front::run(const Handler& handler) {
  uint64_t next_id = 0;
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) fail("waiting for connections failed: {}", std::strerror(errno));
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: wait for connections to end rather than spin.
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // streamed tokens go out at once
    if (!make_room()) {
      send_all(fd, error_response({503, fmt::format("the server has {} connections, each in a request: try again later",
                                                    options_.max_connections),
                                   "server_error", "", "too_many_connections"},
                                  "Retry-After: 1\r\n"),
               std::chrono::seconds(0));
      close(fd);
      continue;
    }
    const uint64_t id = next_id++;
    {
      std::lock_guard lock(mutex_);
      connections_[id] = {fd, true, Clock::now()};
    }
    try {
      std::thread([this, id, fd, &handler] { serve_connection(id, fd, handler); }).detach();
    } catch (const std::system_error&) {  // no thread to be had: the client is turned away
      std::lock_guard lock(mutex_);
      connections_.erase(id);
      close(fd);
    }
  }
  close(listen_fd_);  // new clients are refused by the system from here on
  listen_fd_ = -1;
  std::unique_lock lock(mutex_);
  ended_.wait(lock, [&] { return connections_.empty(); });
}

void Front::refuse(int fd, const Exchange& x, const HttpError& e, bool drain) {
  send_all(fd, error_response(e), options_.io_timeout);
  metrics_.count_request(x.path.empty() ? "other" : std::string(x.path), e.status);
  Exchange logged = x;
  logged.status = e.status;
  log_exchange(logged);
  if (!drain) return;
  // The client may still be sending the body it was refused: read and drop it for a moment,
  // so that closing does not reset the connection before the answer is read.
  shutdown(fd, SHUT_WR);
  const Clock::time_point until = Clock::now() + std::chrono::seconds(2);
  char sink[16384];
  size_t n = 0;
  while (receive(fd, sink, sizeof sink, until, n) == Got::Bytes) {
  }
}

void Front::serve_connection(uint64_t id, int fd, const Handler& handler) {
  // A thread of its own: what escapes it would end the process, so nothing does.
  try {
    exchanges(id, fd, handler);
  } catch (const std::exception& e) {
    fmt::print(stderr, "eaglevk: a connection failed: {}\n", e.what());
  }
  t_exchange = nullptr;
  shutdown(fd, SHUT_RDWR);
  close(fd);
  std::lock_guard lock(mutex_);
  connections_.erase(id);
  if (connections_.empty()) ended_.notify_all();
}

void Front::exchanges(uint64_t id, int fd, const Handler& handler) {
  std::string buffer;  // bytes read past the previous request (a pipelined one)
  char chunk[65536];
  while (true) {
    if (!set_waiting(id, true)) break;  // stopping
    Exchange x;
    x.fd = fd;
    x.start = Clock::now();
    Clock::time_point deadline = Clock::now() + options_.io_timeout;
    size_t end = 0, n = 0;
    Got got = Got::Bytes;
    while (true) {
      auto found = head_end(buffer);
      if (auto* e = std::get_if<HttpError>(&found)) {
        refuse(fd, x, *e, true);
        got = Got::Closed;
        break;
      }
      if ((end = std::get<size_t>(found)) != 0) break;
      if ((got = receive(fd, chunk, sizeof chunk, deadline, n)) != Got::Bytes) break;
      buffer.append(chunk, n);
    }
    if (end == 0) {
      // A connection closed or idle between requests ends quietly; one that stopped halfway
      // through a head is told why.
      if (got == Got::TimedOut && !buffer.empty())
        refuse(fd, x, {408, fmt::format("the request head did not arrive within {} s", options_.io_timeout.count()),
                       "invalid_request_error", "", "request_timeout"}, false);
      break;
    }
    set_waiting(id, false);
    x.start = Clock::now();  // the log's time: from the whole head to the answer's end
    auto parsed = parse_head(std::string_view(buffer).substr(0, end), options_.max_body_bytes);
    if (auto* e = std::get_if<HttpError>(&parsed)) {
      refuse(fd, x, *e, true);
      break;
    }
    const Head& head = std::get<Head>(parsed);
    x.method = head.method;
    x.path = head.path();
    buffer.erase(0, end);
    // The key before the body: a client without it never gets a body buffered.
    if (!options_.api_key.empty() && x.path != "/health" && !authorized(head, options_.api_key)) {
      refuse(fd, x, {401, "Incorrect API key provided (the server was started with --api-key)", "invalid_request_error",
                     "", "invalid_api_key"}, true);
      break;
    }

    // The body, in full, within the limits: never more than --max-body-mib of it held.
    std::string body;
    deadline = Clock::now() + options_.io_timeout;
    std::optional<HttpError> problem;
    if (head.has_body() && head.expect_continue && buffer.empty() &&
        !send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", options_.io_timeout))
      break;
    if (head.chunked) {
      ChunkedDecoder decoder(options_.max_body_bytes);
      while (true) {
        auto used = decoder.feed(buffer, body);
        if (auto* e = std::get_if<HttpError>(&used)) {
          problem = *e;
          break;
        }
        buffer.erase(0, std::get<size_t>(used));
        if (decoder.done()) break;
        if ((got = receive(fd, chunk, sizeof chunk, deadline, n)) != Got::Bytes) break;
        buffer.assign(chunk, n);
      }
      if (!problem && !decoder.done() && got == Got::TimedOut)
        problem = HttpError{408, fmt::format("the request body did not arrive within {} s", options_.io_timeout.count()),
                            "invalid_request_error", "", "request_timeout"};
      if (!problem && !decoder.done()) break;  // closed halfway: nobody to answer
    } else if (const uint64_t length = head.content_length.value_or(0); length > 0) {
      const size_t first = size_t(std::min<uint64_t>(length, buffer.size()));
      body.assign(buffer, 0, first);
      buffer.erase(0, first);
      while (body.size() < length && (got = receive(fd, chunk, size_t(std::min<uint64_t>(sizeof chunk, length - body.size())),
                                                    deadline, n)) == Got::Bytes)
        body.append(chunk, n);
      if (body.size() < length && got == Got::TimedOut)
        problem = HttpError{408, fmt::format("the request body did not arrive within {} s", options_.io_timeout.count()),
                            "invalid_request_error", "", "request_timeout"};
      else if (body.size() < length)
        break;
    }
    if (problem) {
      refuse(fd, x, *problem, problem->status == 413);
      break;
    }

    bool last = !head.keep_alive;
    {
      std::lock_guard lock(mutex_);
      last = last || stopping_;
    }
    t_exchange = &x;
    const bool again = handler(x, {forwarded_head(head, body.size()), std::move(body), head.keep_alive}, last);
    t_exchange = nullptr;
    log_exchange(x);
    if (!again || last) break;
  }
}

}  // namespace eaglevk::cli::serve
