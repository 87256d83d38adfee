// `eaglevk serve`'s front reads request heads and bodies off the socket before cpp-httplib does
// (apps/cli/serve_head.h): every limit on a head (its size, its lines, its headers), every bad
// framing (no length, a negative, huge or doubled one, an unknown transfer coding) and a chunked
// body past --max-body-mib is refused with its status while the bytes arrive, and an accepted
// request reaches httplib with its body's length and without the framing the front consumed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apps/cli/serve_head.h"

namespace {

using namespace eaglevk::cli::serve;

constexpr uint64_t kMax = 1000;

int status_of(const std::string& head) {
  auto r = parse_head(head, kMax);
  return std::holds_alternative<HttpError>(r) ? std::get<HttpError>(r).status : 0;
}

Head head_of(const std::string& head) {
  auto r = parse_head(head, kMax);
  if (auto* e = std::get_if<HttpError>(&r)) ADD_FAILURE() << head << ": " << e->status << " " << e->message;
  return std::holds_alternative<Head>(r) ? std::get<Head>(r) : Head{};
}

TEST(ServeHead, EndsAtTheFirstBlankLineWithCrlfOrBareLf) {
  EXPECT_EQ(std::get<size_t>(head_end("GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY")), 27u);
  EXPECT_EQ(std::get<size_t>(head_end("GET / HTTP/1.1\nHost: x\n\nBODY")), 24u);
  EXPECT_EQ(std::get<size_t>(head_end("GET / HTTP/1.1\r\nHost: x\r\n")), 0u);  // not yet
}

TEST(ServeHead, AHeadLongerThanTheLimitIs431BeforeItEnds) {
  std::string flood = "GET / HTTP/1.1\r\n";
  while (flood.size() <= kMaxHeadBytes) flood += "X-Flood: " + std::string(100, 'a') + "\r\n";
  auto r = head_end(flood);  // no blank line yet: refused all the same
  ASSERT_TRUE(std::holds_alternative<HttpError>(r));
  EXPECT_EQ(std::get<HttpError>(r).status, 431);
  EXPECT_EQ(status_of(flood + "\r\n"), 431);
}

TEST(ServeHead, TooManyHeadersOrALongLineIs431) {
  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHeaders; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(status_of(many + "\r\n"), 431);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX-Long: " + std::string(kMaxHeaderLine, 'a') + "\r\n\r\n"), 431);
  std::string enough = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i < kMaxHeaders; ++i) enough += "X-" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(status_of(enough + "\r\n"), 0);
}

TEST(ServeHead, APostWithoutALengthIs411) {
  EXPECT_EQ(status_of("POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"), 411);
  EXPECT_EQ(status_of("PUT /x HTTP/1.1\r\n\r\n"), 411);
  EXPECT_EQ(status_of("GET /v1/models HTTP/1.1\r\n\r\n"), 0);  // a GET needs none
}

TEST(ServeHead, BadLengthsAre400AndLargeOnes413AtOnce) {
  for (const char* bad : {"-1", "+5", "1e3", "abc", "", "12 3", "0x10", "100000000000000000000000", "18446744073709551616"})
    EXPECT_EQ(status_of(std::string("POST / HTTP/1.1\r\nContent-Length: ") + bad + "\r\n\r\n"), 400) << bad;
  for (const char* large : {"1001", "9999999999999999999"})
    EXPECT_EQ(status_of(std::string("POST / HTTP/1.1\r\nContent-Length: ") + large + "\r\n\r\n"), 413) << large;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(head_of("POST / HTTP/1.1\r\ncontent-length: 1000\r\n\r\n").content_length, 1000u);
}

TEST(ServeHead, MalformedRequestLinesAndHeadersAre400) {
  EXPECT_EQ(status_of("GET\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET http://x/ HTTP/1.1\r\n\r\n"), 400);  // origin form only
  EXPECT_EQ(status_of("G(T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nNo colon here\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n folded: x\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
}

TEST(ServeHead, ReadsFramingAndConnection) {
  const Head h = head_of("POST /v1/chat/completions?x=1 HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n"
                         "Expect: 100-continue\r\nConnection: close\r\nAuthorization:  Bearer k \r\n\r\n");
  EXPECT_TRUE(h.chunked);
  EXPECT_TRUE(h.expect_continue);
  EXPECT_FALSE(h.keep_alive);
  EXPECT_EQ(h.path(), "/v1/chat/completions");
  EXPECT_EQ(h.header("authorization"), "Bearer k");
  EXPECT_FALSE(head_of("GET / HTTP/1.0\r\n\r\n").keep_alive);
  EXPECT_TRUE(head_of("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
}

TEST(ServeHead, ForwardsTheBodysLengthWithoutTheFraming) {
  const Head h = head_of("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(forwarded_head(h, 12), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n");
  EXPECT_EQ(forwarded_head(head_of("GET /health HTTP/1.1\r\n\r\n"), 0), "GET /health HTTP/1.1\r\n\r\n");
}

TEST(ServeHead, TheBearerSchemeInAnyCaseWithTheKey) {
  auto with = [](const std::string& value) { return head_of("GET / HTTP/1.1\r\nAuthorization: " + value + "\r\n\r\n"); };
  EXPECT_TRUE(authorized(with("Bearer sk-1"), "sk-1"));
  EXPECT_TRUE(authorized(with("bearer sk-1"), "sk-1"));
  EXPECT_TRUE(authorized(with("BEARER  sk-1"), "sk-1"));
  EXPECT_FALSE(authorized(with("Bearer sk-2"), "sk-1"));
  EXPECT_FALSE(authorized(with("Bearer sk-11"), "sk-1"));
  EXPECT_FALSE(authorized(with("Basic sk-1"), "sk-1"));
  EXPECT_FALSE(authorized(with("sk-1"), "sk-1"));
  EXPECT_FALSE(authorized(head_of("GET / HTTP/1.1\r\n\r\n"), "sk-1"));
}

// A chunked body fed in pieces of every size decodes to the same payload, and what follows it
// is left for the next request.
TEST(ServeHead, DecodesAChunkedBodyFedInAnyPieces) {
  const std::string wire = "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  for (size_t piece = 1; piece <= wire.size(); ++piece) {
    ChunkedDecoder decoder(kMax);
    std::string body;
    size_t at = 0;
    while (!decoder.done() && at < wire.size()) {
      const std::string_view bytes = std::string_view(wire).substr(at, piece);
      auto used = decoder.feed(bytes, body);
      ASSERT_TRUE(std::holds_alternative<size_t>(used)) << std::get<HttpError>(used).message;
      at += std::get<size_t>(used);
    }
    EXPECT_TRUE(decoder.done()) << piece;
    EXPECT_EQ(body, "hello, world") << piece;
    EXPECT_EQ(wire.substr(at), "NEXT") << piece;
  }
}

TEST(ServeHead, AChunkedBodyPastTheLimitIs413BeforeItIsHeld) {
  ChunkedDecoder decoder(kMax);
  std::string body;
  const std::string chunk = "100\r\n" + std::string(256, 'a') + "\r\n";
  int status = 0;
  for (int i = 0; i < 100 && !status; ++i) {
    auto used = decoder.feed(chunk, body);
    if (auto* e = std::get_if<HttpError>(&used)) status = e->status;
  }
  EXPECT_EQ(status, 413);
  EXPECT_LE(body.size(), kMax);
  // One chunk that says it is larger than the limit is refused before any of it.
  ChunkedDecoder big(kMax);
  std::string none;
  auto used = big.feed("FFFFFFFF\r\n", none);
  ASSERT_TRUE(std::holds_alternative<HttpError>(used));
  EXPECT_EQ(std::get<HttpError>(used).status, 413);
}

TEST(ServeHead, MalformedChunkingIs400) {
  for (const std::string& wire : std::vector<std::string>{"zz\r\n", "5\r\nhelloXX\r\n", "-1\r\n", "10000000000000000\r\n",
                                                          std::string(kMaxHeaderLine + 1, '1')}) {
    ChunkedDecoder decoder(kMax);
    std::string body;
    auto used = decoder.feed(wire, body);
    ASSERT_TRUE(std::holds_alternative<HttpError>(used)) << wire.substr(0, 20);
    EXPECT_EQ(std::get<HttpError>(used).status, 400) << wire.substr(0, 20);
  }
}

TEST(ServeHead, TheFrontsOwnAnswersCloseTheConnection) {
  const std::string r = error_response({413, "too big", "invalid_request_error", "", "request_too_large"}, "Retry-After: 1\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 413 Payload Too Large\r\n")) << r;
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(r.find("Retry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(r.find("\"code\":\"request_too_large\""), std::string::npos);
  const size_t body = r.find("\r\n\r\n") + 4;
  EXPECT_NE(r.find("Content-Length: " + std::to_string(r.size() - body) + "\r\n"), std::string::npos);
}

}  // namespace
