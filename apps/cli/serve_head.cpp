#include "apps/cli/serve_head.h"

#include <algorithm>
#include <cctype>

#include <fmt/core.h>

#include "apps/cli/serve_response.h"

namespace eaglevk::cli::serve {
namespace {

bool same_word(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y)); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// RFC 9110's token characters: what a method or a header name is made of.
bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(uint8_t(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

HttpError bad(int status, std::string message, std::string code = {}) {
  return {status, std::move(message), "invalid_request_error", "", std::move(code)};
}

HttpError too_large(uint64_t max_body) {
  return bad(413, fmt::format("the request body is larger than --max-body-mib ({} bytes)", max_body), "request_too_large");
}

// A decimal Content-Length: digits only (no sign, no space), and at most 19 of them, so that it
// fits 64 bits (no body is that large: a longer number is a client's mistake or a probe).
std::variant<uint64_t, HttpError> content_length(std::string_view v, uint64_t max_body) {
  if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return bad(400, fmt::format("Content-Length '{}' is not a number of bytes", v.substr(0, 40)), "bad_content_length");
  uint64_t n = 0;
  for (char c : v) n = n * 10 + uint64_t(c - '0');
  if (n > max_body) return too_large(max_body);
  return n;
}

}  // namespace

std::string_view Head::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (same_word(key, name)) return value;
  return {};
}

std::string_view Head::path() const {
  return std::string_view(target).substr(0, target.find('?'));
}

std::variant<size_t, HttpError> head_end(std::string_view data) {
  // A head ends at its first empty line; bare LFs are accepted, as most servers do.
  for (size_t i = data.find('\n'); i != std::string_view::npos && i < kMaxHeadBytes + 2; i = data.find('\n', i + 1)) {
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') return i + 3;
  }
  if (data.size() > kMaxHeadBytes)
    return bad(431, fmt::format("the request head is longer than {} bytes", kMaxHeadBytes), "headers_too_large");
  return size_t(0);
}

std::variant<Head, HttpError> parse_head(std::string_view text, uint64_t max_body) {
  if (text.size() > kMaxHeadBytes)
    return bad(431, fmt::format("the request head is longer than {} bytes", kMaxHeadBytes), "headers_too_large");
  Head h;
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxHeaderLine)
      return bad(431, fmt::format("a request head line is longer than {} bytes", kMaxHeaderLine), "headers_too_large");
    if (!line.empty()) lines.push_back(line);
    start = end + 1;
  }
  if (lines.empty()) return bad(400, "malformed HTTP request: no request line");
  if (lines.size() - 1 > kMaxHeaders)
    return bad(431, fmt::format("the request has more than {} headers", kMaxHeaders), "headers_too_large");

  // The request line: METHOD SP /target SP HTTP/1.x
  const std::string_view request = lines[0];
  const size_t sp1 = request.find(' '), sp2 = request.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return bad(400, "malformed HTTP request line");
  h.method = request.substr(0, sp1);
  h.target = request.substr(sp1 + 1, sp2 - sp1 - 1);
  h.version = request.substr(sp2 + 1);
  if (!is_token(h.method) || h.target.empty() || h.target[0] != '/' || h.target.find_first_of(" \t") != std::string::npos)
    return bad(400, "malformed HTTP request line");
  if (h.version != "HTTP/1.1" && h.version != "HTTP/1.0")
    return bad(505, fmt::format("HTTP version '{}' is not served (HTTP/1.1 is)", h.version.substr(0, 20)));

  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const size_t colon = line.find(':');
    // A line that begins with white space continues the previous one (obsolete folding): refused, as RFC 9112 allows.
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return bad(400, fmt::format("malformed header line '{}'", line.substr(0, 40)));
    h.headers.emplace_back(line.substr(0, colon), trim(line.substr(colon + 1)));
  }

  bool has_length = false;
  for (const auto& [name, value] : h.headers) {
    if (same_word(name, "Content-Length")) {
      // Two lengths (even equal ones) are how requests get smuggled past a proxy.
      if (has_length) return bad(400, "the request has more than one Content-Length", "bad_content_length");
      has_length = true;
      auto n = content_length(value, max_body);
      if (auto* e = std::get_if<HttpError>(&n)) return *e;
      h.content_length = std::get<uint64_t>(n);
    } else if (same_word(name, "Transfer-Encoding")) {
      if (h.chunked || !same_word(value, "chunked"))
        return bad(h.chunked ? 400 : 501, fmt::format("Transfer-Encoding '{}' is not served (chunked is)", value.substr(0, 40)));
      h.chunked = true;
    } else if (same_word(name, "Expect")) {
      if (!same_word(value, "100-continue")) return bad(417, fmt::format("Expect '{}' is not served", value.substr(0, 40)));
      h.expect_continue = true;
    } else if (same_word(name, "Connection")) {
      if (same_word(value, "close")) h.keep_alive = false;
    }
  }
  if (h.chunked && has_length)
    return bad(400, "the request has both Content-Length and Transfer-Encoding", "bad_content_length");
  if (h.version == "HTTP/1.0" && !same_word(h.header("Connection"), "keep-alive")) h.keep_alive = false;
  if (!has_length && !h.chunked && (h.method == "POST" || h.method == "PUT" || h.method == "PATCH"))
    return bad(411, fmt::format("a {} needs a Content-Length (or a chunked body)", h.method), "length_required");
  return h;
}

std::variant<size_t, HttpError> ChunkedDecoder::feed(std::string_view data, std::string& body) {
  size_t used = 0;
  auto read_line = [&](std::string_view what) -> std::variant<bool, HttpError> {
    const size_t nl = data.find('\n', used);
    const size_t take = (nl == std::string_view::npos ? data.size() : nl) - used;
    if (line_.size() + take > kMaxHeaderLine)
      return bad(400, fmt::format("a chunked body's {} line is longer than {} bytes", what, kMaxHeaderLine));
    line_.append(data.substr(used, take));
    used += take;
    if (nl == std::string_view::npos) return false;
    ++used;  // the LF
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    return true;
  };
  while (used < data.size() && state_ != State::Done) {
    if (state_ == State::Data) {
      const size_t take = size_t(std::min<uint64_t>(left_, data.size() - used));
      body.append(data.substr(used, take));
      used += take;
      left_ -= take;
      if (left_ == 0) state_ = State::DataEnd;
      continue;
    }
    auto line = read_line(state_ == State::Size ? "size" : state_ == State::DataEnd ? "chunk end" : "trailer");
    if (auto* e = std::get_if<HttpError>(&line)) return *e;
    if (!std::get<bool>(line)) break;
    if (state_ == State::DataEnd) {
      if (!line_.empty()) return bad(400, "a chunk of the body is longer than its size line says");
      state_ = State::Size;
    } else if (state_ == State::Trailer) {
      if (line_.empty()) state_ = State::Done;  // trailer fields are read and dropped
    } else {
      // The size: hexadecimal, perhaps followed by ";extensions" (ignored).
      const std::string_view hex = trim(std::string_view(line_).substr(0, line_.find(';')));
      if (hex.empty() || hex.size() > 15 || !std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(uint8_t(c)); }))
        return bad(400, fmt::format("a chunked body's size line '{}' is not a hexadecimal size", line_.substr(0, 40)));
      left_ = std::stoull(std::string(hex), nullptr, 16);
      if (left_ > max_body_ - body.size()) return too_large(max_body_);
      state_ = left_ == 0 ? State::Trailer : State::Data;
    }
    line_.clear();
  }
  return used;
}

std::string forwarded_head(const Head& head, uint64_t body_size) {
  std::string out = fmt::format("{} {} {}\r\n", head.method, head.target, head.version);
  for (const auto& [name, value] : head.headers)
    if (!same_word(name, "Content-Length") && !same_word(name, "Transfer-Encoding") && !same_word(name, "Expect"))
      out += fmt::format("{}: {}\r\n", name, value);
  if (head.has_body() || body_size) out += fmt::format("Content-Length: {}\r\n", body_size);
  out += "\r\n";
  return out;
}

bool authorized(const Head& head, std::string_view key) {
  std::string_view given = head.header("Authorization");
  const size_t space = given.find(' ');
  if (space == std::string_view::npos || !same_word(given.substr(0, space), "Bearer")) return false;
  given = trim(given.substr(space + 1));
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= uint8_t(given[i] ^ key[i % std::max<size_t>(key.size(), 1)]);
  return diff == 0 && !key.empty();
}

std::string error_response(const HttpError& e, std::string_view extra_headers) {
  static constexpr std::pair<int, std::string_view> kReasons[] = {
      {400, "Bad Request"},        {401, "Unauthorized"},           {408, "Request Timeout"},
      {411, "Length Required"},    {413, "Payload Too Large"},      {417, "Expectation Failed"},
      {431, "Request Header Fields Too Large"}, {501, "Not Implemented"}, {503, "Service Unavailable"},
      {505, "HTTP Version Not Supported"}};
  std::string_view reason = "Error";
  for (const auto& [status, text] : kReasons)
    if (status == e.status) reason = text;
  const std::string body = json_text(error_json(e));
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{}",
                     e.status, reason, body.size(), extra_headers, body);
}

}  // namespace eaglevk::cli::serve
