#pragma once
// The HTTP/1.1 request head as `eaglevk serve`'s front reads it off the socket (serve_front.h),
// before cpp-httplib sees anything: the request line and headers within their limits, the body's
// framing (Content-Length or chunked) checked, a chunked body decoded within --max-body-mib, and
// the API key. Plain bytes in, a Head or an HttpError out: no socket, testable alone.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "apps/cli/serve_request.h"  // HttpError

namespace eaglevk::cli::serve {

// What one request head may hold. The API's requests carry a dozen short headers; a client
// that needs more than this is not one of its clients (a header flood gets 431 at once, never
// a buffer that grows with it).
inline constexpr size_t kMaxHeadBytes = 32 << 10;  // request line and headers, CRLFs included
inline constexpr size_t kMaxHeaderLine = 8 << 10;  // one line (cpp-httplib's own limit)
inline constexpr size_t kMaxHeaders = 64;

struct Head {
  std::string method, target, version;  // "POST", "/v1/completions?x", "HTTP/1.1"
  std::vector<std::pair<std::string, std::string>> headers;  // in order, values trimmed
  std::optional<uint64_t> content_length;
  bool chunked = false;
  bool expect_continue = false;  // "Expect: 100-continue": the client waits before its body
  bool keep_alive = true;        // false: "Connection: close", or HTTP/1.0 without keep-alive

  // The first value of a header (names compare without case); empty when absent.
  std::string_view header(std::string_view name) const;
  std::string_view path() const;  // the target without its query
  bool has_body() const { return chunked || content_length.value_or(0) > 0; }
};

// Where the head ends in `data`: the offset just past its blank line, or 0 while it has not
// ended. An HttpError 431 when the head is already longer than kMaxHeadBytes.
std::variant<size_t, HttpError> head_end(std::string_view data);

// Parses a whole head (as head_end delimited it) and checks its framing: a request line of
// method, origin-form target and HTTP/1.x; at most kMaxHeaders lines of kMaxHeaderLine bytes
// (431); one Content-Length of decimal digits (400) no larger than max_body (413); chunked as
// the only transfer coding and never with a length (400, a smuggling trick otherwise); a
// POST/PUT/PATCH with neither (411).
std::variant<Head, HttpError> parse_head(std::string_view head, uint64_t max_body);

// A chunked body, decoded as its bytes arrive: never holding more than max_body bytes of
// payload, nor a size line or trailer longer than a header line.
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(uint64_t max_body) : max_body_(max_body) {}
  // Takes bytes from `data`, appending payload to `body`. Returns how many bytes it used (all
  // of them unless the body ended inside `data`: the rest is the next request's), or the error
  // (400 malformed, 413 past max_body).
  std::variant<size_t, HttpError> feed(std::string_view data, std::string& body);
  bool done() const { return state_ == State::Done; }

 private:
  enum class State { Size, Data, DataEnd, Trailer, Done };
  uint64_t max_body_;
  State state_ = State::Size;
  uint64_t left_ = 0;  // payload bytes left in the current chunk
  std::string line_;   // a size or trailer line being read
};

// The head passed on to cpp-httplib once the front has the whole body: the same request line
// and headers, less the framing the front consumed (Transfer-Encoding, Content-Length, Expect),
// with the body's length.
std::string forwarded_head(const Head& head, uint64_t body_size);

// Whether the head carries `Authorization: Bearer KEY` with this key (the scheme in any case, as
// RFC 9110 has it), compared in time that does not depend on where a wrong key differs.
bool authorized(const Head& head, std::string_view key);

// The answer the front sends itself (an error, 503 at the connection cap): status line, the
// error in OpenAI's shape, and "Connection: close".
std::string error_response(const HttpError& e, std::string_view extra_headers = {});

}  // namespace eaglevk::cli::serve
