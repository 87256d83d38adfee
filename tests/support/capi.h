#pragma once
// Helpers of the C API tests (capi_test, capi_generate_test): status checks that also check
// the last-error message, one runtime with the tiny pair per process, a fixture that fails a
// test when the validation layer reported errors, temporary model folders, and generation
// with the callback's pieces collected.
#include <eaglevk/eaglevk.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <eaglevk/eaglevk.hpp>

#include "runtime/ops/gpu.h"
#include "support/golden.h"

namespace eaglevk::testing {


// The status of a call, and the message it left; success leaves none.
#define EXPECT_STATUS(call, status)                                                   \
  do {                                                                                \
    eaglevk_status got_ = (call);                                                     \
    EXPECT_EQ(got_, status) << #call << ": " << eaglevk_status_string(got_) << ": "   \
                            << eaglevk_last_error();                                  \
    if ((status) == EAGLEVK_OK)                                                       \
      EXPECT_STREQ(eaglevk_last_error(), "") << #call;                                \
    else                                                                              \
      EXPECT_STRNE(eaglevk_last_error(), "") << #call;                                \
  } while (0)

// A failure whose message names `words`.
#define EXPECT_FAILS_WITH(call, status, words)                                        \
  do {                                                                                \
    EXPECT_STATUS(call, status);                                                      \
    EXPECT_NE(std::string(eaglevk_last_error()).find(words), std::string::npos)       \
        << "expected '" << (words) << "' in: " << eaglevk_last_error();               \
  } while (0)

// One runtime and the tiny pair, loaded once for the process.
struct Shared {
  eaglevk_runtime* runtime = nullptr;
  eaglevk_model* plain = nullptr;  // tiny-llama3 alone
  eaglevk_model* pair = nullptr;   // tiny-llama3 + tiny-llama3-eagle3
  Golden golden;
};

inline Shared& shared() {
  static Shared* s = [] {
    // Always with the validation layer, as every GPU test here (support/gpu_fixture.cpp).
    ::setenv("EAGLEVK_VALIDATE", "1", 1);
    auto* s = new Shared;
    EXPECT_STATUS(eaglevk_runtime_create(nullptr, &s->runtime), EAGLEVK_OK);
    EXPECT_STATUS(eaglevk_model_load(s->runtime, asset("tiny-llama3").c_str(), nullptr, &s->plain), EAGLEVK_OK);
    EXPECT_STATUS(eaglevk_model_load(s->runtime, asset("tiny-llama3").c_str(), asset("tiny-llama3-eagle3").c_str(),
                                     &s->pair),
                  EAGLEVK_OK);
    s->golden = load_golden(asset("tiny-llama3"));
    return s;
  }();
  return *s;
}

inline uint32_t validation_errors(const api::Device& d) { return d.gpu->ctx.validation_errors.load(); }

// Fails a test during which the validation layer reported an error on the shared device.
class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    // Without a device (no Vulkan driver) every test fails here instead of crashing the binary.
    ASSERT_NE(shared().runtime, nullptr) << "no runtime: " << eaglevk_last_error();
    ASSERT_TRUE(api::device_of(shared().runtime).gpu->ctx.validation);
    errors_before_ = validation_errors(api::device_of(shared().runtime));
  }
  void TearDown() override {
    EXPECT_EQ(validation_errors(api::device_of(shared().runtime)), errors_before_)
        << "the validation layer reported errors";
  }
  uint32_t errors_before_ = 0;
};

// A temporary folder removed at the end of the test; big files are linked, not copied.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() / fmt::format("eaglevk-capi-{}-{}", tag, ::getpid());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  // The files of `model` as links, except those named in `skip`.
  void link_model(const std::filesystem::path& model, const std::vector<std::string>& skip = {}) {
    for (auto& entry : std::filesystem::directory_iterator(model))
      if (std::find(skip.begin(), skip.end(), entry.path().filename().string()) == skip.end())
        std::filesystem::create_symlink(std::filesystem::absolute(entry.path()), path / entry.path().filename());
  }
  void write(const std::string& name, const std::string& contents) {
    std::filesystem::remove(path / name);
    std::ofstream(path / name) << contents;
  }
};

// Ids of `text`, sized by a first call that asks for the count.
inline std::vector<int32_t> tokenize(eaglevk_model* m, const std::string& text, bool bos = true) {
  size_t n = 0;
  eaglevk_tokenize(m, text.c_str(), bos, nullptr, 0, &n);
  std::vector<int32_t> ids(n);
  EXPECT_STATUS(eaglevk_tokenize(m, text.c_str(), bos, ids.data(), ids.size(), &n), EAGLEVK_OK);
  return ids;
}

// One eaglevk_generate with everything it reports, the statistics read right after.
struct Generated {
  eaglevk_status status = EAGLEVK_OK;
  std::string error;             // eaglevk_last_error() right after
  std::vector<int32_t> tokens;
  std::string text;              // the callback's pieces
  std::vector<int32_t> streamed;  // the callback's tokens
  eaglevk_spec_stats stats{};
  std::vector<double> acceptance;
};

// `capacity`: of the out buffer; `stop_after`: the callback asks to stop after that many tokens;
// `append`: eaglevk_continue instead of eaglevk_generate.
inline Generated generate(eaglevk_session* s, const std::vector<int32_t>& prompt, size_t capacity,
                          int stop_after = -1, bool append = false) {
  struct Sink {
    Generated* g;
    int stop_after;
  };
  Generated g;
  Sink sink{&g, stop_after};
  auto on_token = [](int32_t token, const char* piece, void* user) -> int {
    auto* sink = static_cast<Sink*>(user);
    sink->g->text += piece;
    sink->g->streamed.push_back(token);
    return sink->stop_after >= 0 && int(sink->g->streamed.size()) >= sink->stop_after;
  };
  g.tokens.assign(capacity, -7);
  size_t n = 0;
  g.status = append ? eaglevk_continue(s, prompt.data(), prompt.size(), on_token, &sink, g.tokens.data(), capacity, &n)
                    : eaglevk_generate(s, prompt.data(), prompt.size(), on_token, &sink, g.tokens.data(), capacity, &n);
  g.error = eaglevk_last_error();
  g.tokens.resize(g.status == EAGLEVK_OK ? n : 0);
  g.acceptance.assign(8, -1);
  EXPECT_STATUS(eaglevk_session_get_stats(s, &g.stats, g.acceptance.data(), g.acceptance.size()), EAGLEVK_OK);
  g.acceptance.resize(std::min<size_t>(g.stats.num_positions, 8));
  return g;
}

// A greedy session that ignores EOS (as the golden outputs do).
inline eaglevk_session* session(eaglevk_model* m, uint32_t k, uint32_t n, uint32_t context = 512) {
  eaglevk_session_params p = eaglevk_session_params_default();
  p.k = k;
  p.max_new_tokens = n;
  p.context = context;
  p.ignore_eos = 1;
  eaglevk_session* s = nullptr;
  EXPECT_STATUS(eaglevk_session_create(m, &p, &s), EAGLEVK_OK);
  return s;
}

}  // namespace eaglevk::testing
