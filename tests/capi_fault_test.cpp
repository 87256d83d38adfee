// Device loss, a hung queue and exhausted memory through the C API, by fault injection
// (runtime/vk/fault.h): a submission, fence wait or allocation made to fail at a chosen call.
// A loss mid-generation returns EAGLEVK_ERROR_DEVICE_LOST; the runtime then refuses every call
// that needs the device with the same status, everything can still be freed, and the process
// goes on (a new runtime works). Out of memory is EAGLEVK_ERROR_OUT_OF_MEMORY and not fatal.
#include <eaglevk/eaglevk.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/vk/fault.h"
#include "support/golden.h"

namespace eaglevk::testing {
namespace {

struct Loaded {
  eaglevk_runtime* runtime = nullptr;
  eaglevk_model* model = nullptr;
  eaglevk_session* session = nullptr;
  ~Loaded() {
    eaglevk_session_free(session);
    eaglevk_model_free(model);
    eaglevk_runtime_destroy(runtime);
  }
};

// The tiny pair and a speculative session on a runtime of its own (a lost one is not shared).
void load(Loaded& l) {
  ::setenv("EAGLEVK_VALIDATE", "1", 1);
  ASSERT_EQ(eaglevk_runtime_create(nullptr, &l.runtime), EAGLEVK_OK) << eaglevk_last_error();
  ASSERT_EQ(eaglevk_model_load(l.runtime, asset("tiny-llama3").c_str(), asset("tiny-llama3-eagle3").c_str(), &l.model),
            EAGLEVK_OK)
      << eaglevk_last_error();
  eaglevk_session_params p = eaglevk_session_params_default();
  p.max_new_tokens = 24;
  p.ignore_eos = 1;
  ASSERT_EQ(eaglevk_session_create(l.model, &p, &l.session), EAGLEVK_OK) << eaglevk_last_error();
}

const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> ids = load_golden(asset("tiny-llama3")).prompts[0].prompt_ids;
  return ids;
}

eaglevk_status generate(eaglevk_session* s, std::vector<int32_t>* out = nullptr) {
  std::vector<int32_t> tokens(64);
  size_t n = 0;
  const eaglevk_status st =
      eaglevk_generate(s, prompt().data(), prompt().size(), nullptr, nullptr, tokens.data(), tokens.size(), &n);
  tokens.resize(n);
  if (out) *out = tokens;
  return st;
}

struct Faults : ::testing::Test {
  void TearDown() override { vk::clear_faults(); }
};

void expect_lost_from_now_on(Loaded& l) {
  // Every call that needs the device says the same; host-only calls still work.
  EXPECT_EQ(generate(l.session), EAGLEVK_ERROR_DEVICE_LOST);
  EXPECT_NE(std::string(eaglevk_last_error()).find("lost"), std::string::npos) << eaglevk_last_error();
  eaglevk_session* another = nullptr;
  eaglevk_session_params p = eaglevk_session_params_default();
  EXPECT_EQ(eaglevk_session_create(l.model, &p, &another), EAGLEVK_ERROR_DEVICE_LOST) << eaglevk_last_error();
  EXPECT_EQ(another, nullptr);
  eaglevk_model* m = nullptr;
  EXPECT_EQ(eaglevk_model_load(l.runtime, asset("tiny-llama3").c_str(), nullptr, &m), EAGLEVK_ERROR_DEVICE_LOST)
      << eaglevk_last_error();
  EXPECT_EQ(m, nullptr);
  int32_t ids[64];
  size_t n = 0;
  EXPECT_EQ(eaglevk_tokenize(l.model, "hello", 1, ids, 64, &n), EAGLEVK_OK) << eaglevk_last_error();
}

TEST_F(Faults, DeviceLostMidGenerationIsReportedAndFinal) {
  Loaded l;
  load(l);
  std::vector<int32_t> before;
  ASSERT_EQ(generate(l.session, &before), EAGLEVK_OK) << eaglevk_last_error();
  // Prefill is one or two submissions; the sixth is inside the speculative rounds.
  vk::inject_fault(vk::FaultPoint::Submit, VK_ERROR_DEVICE_LOST, 5);
  EXPECT_EQ(generate(l.session), EAGLEVK_ERROR_DEVICE_LOST);
  EXPECT_NE(std::string(eaglevk_last_error()).find("VK_ERROR_DEVICE_LOST"), std::string::npos) << eaglevk_last_error();
  expect_lost_from_now_on(l);
}

TEST_F(Faults, AHungQueueTimesOutAsALostDevice) {
  Loaded l;
  load(l);
  vk::inject_fault(vk::FaultPoint::Wait, VK_TIMEOUT, 3);
  EXPECT_EQ(generate(l.session), EAGLEVK_ERROR_DEVICE_LOST);
  EXPECT_NE(std::string(eaglevk_last_error()).find("did not finish a submission"), std::string::npos)
      << eaglevk_last_error();
  expect_lost_from_now_on(l);
}

TEST_F(Faults, OutOfMemoryIsReportedAndNotFatal) {
  Loaded l;
  load(l);
  std::vector<int32_t> want;
  ASSERT_EQ(generate(l.session, &want), EAGLEVK_OK);
  eaglevk_session_params p = eaglevk_session_params_default();
  p.max_new_tokens = 24;
  p.ignore_eos = 1;
  eaglevk_session* s = nullptr;
  vk::inject_fault(vk::FaultPoint::Allocation, VK_ERROR_OUT_OF_DEVICE_MEMORY, 2);
  EXPECT_EQ(eaglevk_session_create(l.model, &p, &s), EAGLEVK_ERROR_OUT_OF_MEMORY) << eaglevk_last_error();
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(eaglevk_last_error()).find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos);
  // The runtime goes on: the same session and a new one generate as before.
  std::vector<int32_t> again;
  EXPECT_EQ(generate(l.session, &again), EAGLEVK_OK) << eaglevk_last_error();
  EXPECT_EQ(again, want);
  ASSERT_EQ(eaglevk_session_create(l.model, &p, &s), EAGLEVK_OK) << eaglevk_last_error();
  EXPECT_EQ(generate(s, &again), EAGLEVK_OK);
  EXPECT_EQ(again, want);
  eaglevk_session_free(s);
}

TEST_F(Faults, ANewRuntimeWorksAfterALoss) {
  {
    Loaded l;
    load(l);
    vk::inject_fault(vk::FaultPoint::Submit, VK_ERROR_DEVICE_LOST, 0);
    EXPECT_EQ(generate(l.session), EAGLEVK_ERROR_DEVICE_LOST);
  }  // freed after the loss
  Loaded fresh;
  load(fresh);
  EXPECT_EQ(generate(fresh.session), EAGLEVK_OK) << eaglevk_last_error();
}

TEST(FaultNames, StatusStrings) {
  EXPECT_STREQ(eaglevk_status_string(EAGLEVK_ERROR_DEVICE_LOST), "EAGLEVK_ERROR_DEVICE_LOST");
  EXPECT_STREQ(eaglevk_status_string(EAGLEVK_ERROR_OUT_OF_MEMORY), "EAGLEVK_ERROR_OUT_OF_MEMORY");
}

}  // namespace
}  // namespace eaglevk::testing
