// The C API in process: every function's failure gives its status and a message (NULL
// pointers, bad values, missing files, broken checkpoints, a draft that does not fit), and the
// buffer protocol of tokenize, detokenize and the chat template.
#include <eaglevk/eaglevk.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/chat_template.h"
#include "support/capi.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

TEST_F(CApi, VersionAndNames) {
  EXPECT_STREQ(eaglevk_version(), EAGLEVK_PROJECT_VERSION);
  EXPECT_STREQ(eaglevk_status_string(EAGLEVK_OK), "EAGLEVK_OK");
  EXPECT_STREQ(eaglevk_status_string(EAGLEVK_ERROR_CONTEXT_FULL), "EAGLEVK_ERROR_CONTEXT_FULL");
  EXPECT_STREQ(eaglevk_status_string(eaglevk_status(99)), "unknown eaglevk_status");
  eaglevk_session_params d = eaglevk_session_params_default();
  EXPECT_EQ(d.context, 2048u);
  EXPECT_EQ(d.k, 3u);
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.top_p, 1.0f);
  EXPECT_EQ(d.max_new_tokens, 64u);
}

TEST_F(CApi, NullPointersAreInvalidArguments) {
  Shared& s = shared();
  const int32_t ids[2] = {1, 2};
  size_t n = 0;
  char text[64];
  eaglevk_runtime* rt = nullptr;
  eaglevk_model* m = nullptr;
  eaglevk_session* ses = nullptr;
  eaglevk_model_info info;
  eaglevk_spec_stats stats;
  const auto bad = EAGLEVK_ERROR_INVALID_ARGUMENT;
  EXPECT_STATUS(eaglevk_runtime_create(nullptr, nullptr), bad);
  EXPECT_STATUS(eaglevk_model_load(nullptr, asset("tiny-llama3").c_str(), nullptr, &m), bad);
  EXPECT_STATUS(eaglevk_model_load(s.runtime, nullptr, nullptr, &m), bad);
  EXPECT_STATUS(eaglevk_model_load(s.runtime, asset("tiny-llama3").c_str(), nullptr, nullptr), bad);
  EXPECT_STATUS(eaglevk_model_load(s.runtime, asset("tiny-llama3").c_str(), "", &m), bad);
  EXPECT_EQ(m, nullptr);
  EXPECT_STATUS(eaglevk_model_get_info(nullptr, &info), bad);
  EXPECT_STATUS(eaglevk_model_get_info(s.plain, nullptr), bad);
  EXPECT_STATUS(eaglevk_tokenize(nullptr, "hi", 1, nullptr, 0, &n), bad);
  EXPECT_STATUS(eaglevk_tokenize(s.plain, nullptr, 1, nullptr, 0, &n), bad);
  EXPECT_STATUS(eaglevk_tokenize(s.plain, "hi", 1, nullptr, 0, nullptr), bad);
  EXPECT_STATUS(eaglevk_tokenize(s.plain, "hi", 1, nullptr, 5, &n), bad);  // a capacity without a buffer
  EXPECT_STATUS(eaglevk_detokenize(nullptr, ids, 2, 0, text, sizeof text, &n), bad);
  EXPECT_STATUS(eaglevk_detokenize(s.plain, nullptr, 2, 0, text, sizeof text, &n), bad);
  EXPECT_STATUS(eaglevk_detokenize(s.plain, ids, 2, 0, text, sizeof text, nullptr), bad);
  eaglevk_chat_message msg{"user", "hi"}, no_role{nullptr, "hi"}, no_content{"user", nullptr};
  EXPECT_STATUS(eaglevk_apply_chat_template(nullptr, &msg, 1, 1, text, sizeof text, &n), bad);
  EXPECT_STATUS(eaglevk_apply_chat_template(s.plain, nullptr, 1, 1, text, sizeof text, &n), bad);
  EXPECT_STATUS(eaglevk_apply_chat_template(s.plain, &no_role, 1, 1, text, sizeof text, &n), bad);
  EXPECT_STATUS(eaglevk_apply_chat_template(s.plain, &no_content, 1, 1, text, sizeof text, &n), bad);
  EXPECT_STATUS(eaglevk_apply_chat_template(s.plain, &msg, 1, 1, text, sizeof text, nullptr), bad);
  EXPECT_STATUS(eaglevk_session_create(nullptr, nullptr, &ses), bad);
  EXPECT_STATUS(eaglevk_session_create(s.plain, nullptr, nullptr), bad);
  EXPECT_EQ(ses, nullptr);
  EXPECT_STATUS(eaglevk_generate(nullptr, ids, 2, nullptr, nullptr, nullptr, 0, &n), bad);
  EXPECT_STATUS(eaglevk_session_get_stats(nullptr, &stats, nullptr, 0), bad);

  ses = session(s.plain, 0, 4);
  EXPECT_STATUS(eaglevk_generate(ses, nullptr, 2, nullptr, nullptr, nullptr, 0, &n), bad);
  EXPECT_STATUS(eaglevk_generate(ses, ids, 0, nullptr, nullptr, nullptr, 0, &n), bad);  // empty prompt
  EXPECT_STATUS(eaglevk_session_get_stats(ses, nullptr, nullptr, 0), bad);
  double rates[2];
  EXPECT_STATUS(eaglevk_session_get_stats(ses, &stats, nullptr, 2), bad);
  EXPECT_STATUS(eaglevk_session_get_stats(ses, &stats, rates, 2), EAGLEVK_OK);
  eaglevk_session_free(ses);

  // Freeing NULL is allowed; so is asking a NULL runtime its device.
  eaglevk_session_free(nullptr);
  eaglevk_model_free(nullptr);
  eaglevk_runtime_destroy(nullptr);
  EXPECT_EQ(eaglevk_runtime_device_name(nullptr), nullptr);
  EXPECT_EQ(rt, nullptr);
}

TEST_F(CApi, UnknownDeviceIsADeviceError) {
  eaglevk_runtime* rt = nullptr;
  EXPECT_FAILS_WITH(eaglevk_runtime_create("no-such-gpu-anywhere", &rt), EAGLEVK_ERROR_DEVICE, "no-such-gpu-anywhere");
  EXPECT_EQ(rt, nullptr);
  EXPECT_FAILS_WITH(eaglevk_runtime_create("97", &rt), EAGLEVK_ERROR_DEVICE, "out of range");
  EXPECT_EQ(rt, nullptr);
}

TEST_F(CApi, MissingFilesAreIoErrors) {
  Shared& s = shared();
  eaglevk_model* m = nullptr;
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, "/no/such/model", nullptr, &m), EAGLEVK_ERROR_IO, "/no/such/model");
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, asset("tiny-llama3").c_str(), "/no/such/draft", &m), EAGLEVK_ERROR_IO,
                    "/no/such/draft");
  // The draft folder has no tokenizer.json: not a target.
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, asset("tiny-llama3-eagle3").c_str(), nullptr, &m), EAGLEVK_ERROR_IO,
                    "tokenizer.json");
  TempDir no_weights("noweights");
  no_weights.link_model(asset("tiny-llama3"), {"model.safetensors"});
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, no_weights.path.c_str(), nullptr, &m), EAGLEVK_ERROR_IO,
                    "model.safetensors");
  TempDir no_config("noconfig");
  no_config.link_model(asset("tiny-llama3-eagle3"), {"config.json"});
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, asset("tiny-llama3").c_str(), no_config.path.c_str(), &m),
                    EAGLEVK_ERROR_IO, "config.json");
  EXPECT_EQ(m, nullptr);
}

TEST_F(CApi, BrokenCheckpointsAreModelErrors) {
  Shared& s = shared();
  eaglevk_model* m = nullptr;
  TempDir bad_json("badjson");
  bad_json.link_model(asset("tiny-llama3"), {"config.json"});
  bad_json.write("config.json", "{ \"architectures\": [");
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, bad_json.path.c_str(), nullptr, &m), EAGLEVK_ERROR_MODEL,
                    "malformed JSON");
  TempDir truncated("truncated");
  truncated.link_model(asset("tiny-llama3"), {"model.safetensors"});
  fs::copy_file(asset("tiny-llama3/model.safetensors"), truncated.path / "model.safetensors");
  fs::resize_file(truncated.path / "model.safetensors", 1000);
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, truncated.path.c_str(), nullptr, &m), EAGLEVK_ERROR_MODEL,
                    "model.safetensors");
  TempDir bad_tokenizer("badtokenizer");
  bad_tokenizer.link_model(asset("tiny-llama3"), {"tokenizer.json"});
  bad_tokenizer.write("tokenizer.json", "[]");
  EXPECT_STATUS(eaglevk_model_load(s.runtime, bad_tokenizer.path.c_str(), nullptr, &m), EAGLEVK_ERROR_MODEL);
  EXPECT_EQ(m, nullptr);
}

// The bundled model with its final norm set to NaN, written into `dir`: the header read here,
// apart from the loader.
void write_nan_norm_model(TempDir& dir) {
  dir.link_model(asset("tiny-llama3"), {"model.safetensors"});
  const fs::path file = dir.path / "model.safetensors";
  fs::copy_file(asset("tiny-llama3/model.safetensors"), file);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_length = 0;
  f.read(reinterpret_cast<char*>(&header_length), 8);
  std::string header(header_length, '\0');
  f.read(header.data(), std::streamsize(header_length));
  const nlohmann::json norm = nlohmann::json::parse(header).at("model.norm.weight");
  ASSERT_EQ(norm.at("dtype"), "BF16");
  const uint64_t begin = norm.at("data_offsets")[0], end = norm.at("data_offsets")[1];
  const uint16_t nan_bf16 = 0x7fc0;
  f.seekp(std::streamoff(8 + header_length + begin));
  for (uint64_t at = begin; at < end; at += 2) f.write(reinterpret_cast<const char*>(&nan_bf16), 2);
}

// NaN weights: the C API's load scans them (the default up to 256 MiB) and refuses the model
// naming the tensor; loaded without the scan (the facade's LoadOptions), generation stops at
// the first position with a model error naming it, plain and speculative.
TEST_F(CApi, NonFiniteWeightsAreModelErrors) {
  Shared& s = shared();
  TempDir nan_norm("nannorm");
  write_nan_norm_model(nan_norm);
  eaglevk_model* m = nullptr;
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, nan_norm.path.c_str(), nullptr, &m), EAGLEVK_ERROR_MODEL,
                    "element 0 of 'model.norm.weight' (BF16 [256]) is nan");
  EXPECT_EQ(m, nullptr);

  const api::Runtime runtime = api::open_runtime();
  for (const bool speculative : {false, true}) {
    SCOPED_TRACE(speculative ? "speculative" : "plain");
    api::LoadOptions options;
    options.check_tensors = false;
    if (speculative) options.draft = asset("tiny-llama3-eagle3");
    const auto model = api::load_model(runtime, api::plan_load(runtime, nan_norm.path, options));
    api::Session session(model, {});
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
    try {
      session.generate(prompt);
      ADD_FAILURE() << "generation with NaN logits did not fail";
    } catch (const api::ApiError& e) {
      EXPECT_EQ(e.kind, api::ErrorKind::Model);
      EXPECT_NE(std::string(e.what()).find("the target's logits row deciding the token at position 5 is not finite"),
                std::string::npos)
          << e.what();
    }
  }
}

// A draft that does not fit the target. The bundled heads cannot show it: tiny-llama3-eagle3
// on tiny-llama4 fits (same hidden size and vocabulary, its default taps 2,4,5 exist in the 8
// layers) and loads, it just accepts nothing. So the draft config is edited: a tap layer past
// the target's last layer, then a different vocabulary.
TEST_F(CApi, DraftThatDoesNotFitIsAModelError) {
  Shared& s = shared();
  eaglevk_model* other = nullptr;
  EXPECT_STATUS(eaglevk_model_load(s.runtime, asset("tiny-llama4").c_str(), asset("tiny-llama3-eagle3").c_str(), &other),
                EAGLEVK_OK);
  eaglevk_model_free(other);
  TempDir dir("draftfit");
  dir.link_model(asset("tiny-llama3-eagle3"), {"config.json"});
  nlohmann::json config = nlohmann::json::parse(std::ifstream(asset("tiny-llama3-eagle3/config.json")));
  config["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {2, 4, 12}}};
  dir.write("config.json", config.dump());
  eaglevk_model* m = nullptr;
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, asset("tiny-llama3").c_str(), dir.path.c_str(), &m),
                    EAGLEVK_ERROR_MODEL, "aux layer 13 is out of range");
  // ModelOpt heads (ids under eagle_config) name layer outputs: 12 is the stream entering 13.
  EXPECT_NE(std::string(eaglevk_last_error()).find("name layer outputs (ModelOpt, SGLang): +1"), std::string::npos)
      << eaglevk_last_error();
  // A draft trained against another vocabulary size.
  config = nlohmann::json::parse(std::ifstream(asset("tiny-llama3-eagle3/config.json")));
  config["vocab_size"] = 8192;
  dir.write("config.json", config.dump());
  EXPECT_FAILS_WITH(eaglevk_model_load(s.runtime, asset("tiny-llama3").c_str(), dir.path.c_str(), &m),
                    EAGLEVK_ERROR_MODEL, "vocabulary");
  EXPECT_EQ(m, nullptr);
}

TEST_F(CApi, ModelInfo) {
  Shared& s = shared();
  eaglevk_model_info info{};
  EXPECT_STATUS(eaglevk_model_get_info(s.pair, &info), EAGLEVK_OK);
  EXPECT_EQ(info.vocab_size, 4096);
  EXPECT_EQ(info.max_context, 2048);
  EXPECT_EQ(info.bos_id, 4091);
  EXPECT_EQ(info.has_draft, 1);
  EXPECT_EQ(info.has_chat_template, 1);
  EXPECT_STATUS(eaglevk_model_get_info(s.plain, &info), EAGLEVK_OK);
  EXPECT_EQ(info.has_draft, 0);
  EXPECT_NE(std::string(eaglevk_runtime_device_name(s.runtime)), "");
}

// The golden prompts' texts tokenize to the reference's ids; the buffer protocol.
TEST_F(CApi, Tokenize) {
  Shared& s = shared();
  std::ifstream prompts(asset("tiny-llama3/prompts.jsonl"));
  std::string line;
  size_t checked = 0;
  while (std::getline(prompts, line)) {
    nlohmann::json p = nlohmann::json::parse(line);
    for (const auto& g : s.golden.prompts)
      if (g.id == p["id"] && p["type"] == "raw") {
        EXPECT_EQ(tokenize(s.plain, p["text"]), g.prompt_ids) << "prompt " << g.id;
        ++checked;
      }
  }
  EXPECT_GT(checked, 0u);

  const std::string text = "The modules described in this chapter";
  std::vector<int32_t> want = tokenize(s.plain, text);
  ASSERT_GT(want.size(), 2u);
  EXPECT_EQ(want[0], 4091);  // BOS
  EXPECT_EQ(tokenize(s.plain, text, false), std::vector<int32_t>(want.begin() + 1, want.end()));
  size_t n = 0;
  EXPECT_STATUS(eaglevk_tokenize(s.plain, text.c_str(), 1, nullptr, 0, &n), EAGLEVK_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, want.size());
  std::vector<int32_t> small(want.size() - 1, -5);
  n = 0;
  EXPECT_STATUS(eaglevk_tokenize(s.plain, text.c_str(), 1, small.data(), small.size(), &n),
                EAGLEVK_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, want.size());
  EXPECT_EQ(small, std::vector<int32_t>(want.size() - 1, -5)) << "nothing is written when it does not fit";
  // Invalid UTF-8 is the caller's error.
  EXPECT_FAILS_WITH(eaglevk_tokenize(s.plain, "ab\xff", 1, nullptr, 0, &n), EAGLEVK_ERROR_INVALID_ARGUMENT, "UTF-8");
}

TEST_F(CApi, Detokenize) {
  Shared& s = shared();
  const std::string text = "The modules described in this chapter";
  std::vector<int32_t> ids = tokenize(s.plain, text);
  size_t n = 0;
  EXPECT_STATUS(eaglevk_detokenize(s.plain, ids.data(), ids.size(), 1, nullptr, 0, &n), EAGLEVK_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, text.size());
  std::string exact(text.size(), '#');  // no room for the NUL
  EXPECT_STATUS(eaglevk_detokenize(s.plain, ids.data(), ids.size(), 1, exact.data(), exact.size(), &n),
                EAGLEVK_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(exact, std::string(text.size(), '#'));
  std::vector<char> buffer(text.size() + 1, '#');
  EXPECT_STATUS(eaglevk_detokenize(s.plain, ids.data(), ids.size(), 1, buffer.data(), buffer.size(), &n), EAGLEVK_OK);
  EXPECT_EQ(n, text.size());
  EXPECT_STREQ(buffer.data(), text.c_str());
  // With special tokens: BOS is spelled out.
  std::vector<char> with_bos(256);
  EXPECT_STATUS(eaglevk_detokenize(s.plain, ids.data(), ids.size(), 0, with_bos.data(), with_bos.size(), &n), EAGLEVK_OK);
  EXPECT_GT(n, text.size());
  EXPECT_NE(std::string(with_bos.data()).find(text), std::string::npos);
  // Nothing to decode is the empty text.
  EXPECT_STATUS(eaglevk_detokenize(s.plain, nullptr, 0, 1, buffer.data(), buffer.size(), &n), EAGLEVK_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_STREQ(buffer.data(), "");
  const int32_t bad[] = {5, 1 << 20};
  EXPECT_FAILS_WITH(eaglevk_detokenize(s.plain, bad, 2, 1, buffer.data(), buffer.size(), &n),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "1048576");
}

TEST_F(CApi, ChatTemplate) {
  Shared& s = shared();
  eaglevk_chat_message messages[] = {{"system", "Be brief."}, {"user", "What does os.path do?"}};
  std::vector<loader::ChatMessage> conversation = {{"system", "Be brief."}, {"user", "What does os.path do?"}};
  std::string want = loader::ChatTemplate::load(asset("tiny-llama3")).render(conversation, true);
  size_t n = 0;
  EXPECT_STATUS(eaglevk_apply_chat_template(s.plain, messages, 2, 1, nullptr, 0, &n), EAGLEVK_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, want.size());
  std::vector<char> buffer(n + 1);
  EXPECT_STATUS(eaglevk_apply_chat_template(s.plain, messages, 2, 1, buffer.data(), buffer.size(), &n), EAGLEVK_OK);
  EXPECT_EQ(std::string(buffer.data()), want);

  // A model folder without tokenizer_config.json has no template.
  TempDir dir("nochat");
  dir.link_model(asset("tiny-llama3"), {"tokenizer_config.json"});
  eaglevk_model* m = nullptr;
  ASSERT_EQ(eaglevk_model_load(shared().runtime, dir.path.c_str(), nullptr, &m), EAGLEVK_OK) << eaglevk_last_error();
  eaglevk_model_info info{};
  EXPECT_STATUS(eaglevk_model_get_info(m, &info), EAGLEVK_OK);
  EXPECT_EQ(info.has_chat_template, 0);
  EXPECT_FAILS_WITH(eaglevk_apply_chat_template(m, messages, 2, 1, buffer.data(), buffer.size(), &n),
                    EAGLEVK_ERROR_MODEL, "tokenizer_config.json");
  eaglevk_model_free(m);
}

TEST_F(CApi, BadSessionParams) {
  Shared& s = shared();
  eaglevk_session* ses = nullptr;
  auto with = [](auto edit) {
    eaglevk_session_params p = eaglevk_session_params_default();
    edit(p);
    return p;
  };
  const auto bad = EAGLEVK_ERROR_INVALID_ARGUMENT;
  auto p = with([](auto& p) { p.temperature = -1; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.plain, &p, &ses), bad, "temperature");
  p = with([](auto& p) { p.temperature = NAN; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.plain, &p, &ses), bad, "temperature");
  p = with([](auto& p) { p.top_p = 0; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.plain, &p, &ses), bad, "top_p");
  p = with([](auto& p) { p.top_p = 1.5f; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.plain, &p, &ses), bad, "top_p");
  p = with([](auto& p) { p.top_k = -1; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.plain, &p, &ses), bad, "top_k");
  p = with([](auto& p) { p.context = 1; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.plain, &p, &ses), bad, "context");
  p = with([](auto& p) { p.context = 4, p.k = 3; });
  EXPECT_FAILS_WITH(eaglevk_session_create(s.pair, &p, &ses), bad, "k = 3");
  EXPECT_EQ(ses, nullptr);
  // Sampling with and without the draft.
  for (uint32_t k : {0u, 3u}) {
    p = with([k](auto& p) { p.temperature = 0.8f, p.k = k; });
    EXPECT_STATUS(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_OK);
    eaglevk_session_free(ses);
  }
}

// The message belongs to the thread's last call: a success clears it.
TEST_F(CApi, LastErrorIsClearedBySuccess) {
  eaglevk_model* m = nullptr;
  EXPECT_NE(eaglevk_model_load(shared().runtime, "/no/such/model", nullptr, &m), EAGLEVK_OK);
  EXPECT_STRNE(eaglevk_last_error(), "");
  eaglevk_model_info info;
  EXPECT_EQ(eaglevk_model_get_info(shared().plain, &info), EAGLEVK_OK);
  EXPECT_STREQ(eaglevk_last_error(), "");
}

}  // namespace
}  // namespace eaglevk::testing
