// A runtime over several devices through the C API (eaglevk_runtime_create_split): lavapipe
// opened two and three times, the tiny pair's layers split across them, gives the tokens and
// the acceptance of the one-device runtime, with given shares and by memory; and every misuse
// is refused by name.
#include <eaglevk/eaglevk.h>

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/api/capi_support.h"
#include "support/capi.h"

namespace eaglevk::testing {
namespace {

struct SplitModel {
  eaglevk_runtime* runtime = nullptr;
  eaglevk_model* model = nullptr;
  ~SplitModel() {
    eaglevk_model_free(model);
    eaglevk_runtime_destroy(runtime);
  }
};

// The tokens and accepted count of one greedy generation of each golden prompt.
std::vector<Generated> generations(eaglevk_model* m) {
  std::vector<Generated> out;
  eaglevk_session* s = session(m, 3, 24);
  for (const GoldenPrompt& g : shared().golden.prompts) out.push_back(generate(s, g.prompt_ids, 24));
  eaglevk_session_free(s);
  return out;
}

TEST_F(CApi, SplitRuntimeGivesOneDevicesTokens) {
  const std::vector<Generated> one = generations(shared().pair);
  struct Case {
    std::vector<const char*> devices;
    std::vector<double> shares;  // empty: NULL, by memory
  };
  for (const Case& c : {Case{{"0", "0"}, {1, 3}}, Case{{"0", "0"}, {}}, Case{{"0", "0", "0"}, {2, 1, 1}}}) {
    SCOPED_TRACE(fmt::format("{} devices, shares {}", c.devices.size(), fmt::join(c.shares, ",")));
    SplitModel split;
    ASSERT_EQ(eaglevk_runtime_create_split(c.devices.data(), c.shares.empty() ? nullptr : c.shares.data(),
                                           c.devices.size(), &split.runtime),
              EAGLEVK_OK)
        << eaglevk_last_error();
    ASSERT_EQ(eaglevk_model_load(split.runtime, asset("tiny-llama3").c_str(), asset("tiny-llama3-eagle3").c_str(),
                                 &split.model),
              EAGLEVK_OK)
        << eaglevk_last_error();
    EXPECT_EQ(api::device_of(split.model).gpu->ctx.validation_errors.load(), 0u);
    // The model really is split, by the shares when given (8 layers: 1,3 puts 2 on the first).
    const api::Model& m = *split.model->model;
    ASSERT_TRUE(m.split.has_value());
    ASSERT_EQ(m.split->devices.size(), c.devices.size());
    EXPECT_EQ(m.devices.size(), c.devices.size());
    if (c.shares.size() == 2) EXPECT_EQ(m.split->devices[0].layers.end, 2u);
    if (c.shares.size() == 3) EXPECT_EQ(m.split->devices[0].layers.end, 4u);
    const std::vector<Generated> got = generations(split.model);
    ASSERT_EQ(got.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(got[i].status, EAGLEVK_OK) << got[i].error;
      EXPECT_EQ(got[i].tokens, one[i].tokens) << "prompt " << i;
      EXPECT_EQ(got[i].stats.num_accepted_tokens, one[i].stats.num_accepted_tokens) << "prompt " << i;
      EXPECT_EQ(got[i].stats.num_drafts, one[i].stats.num_drafts) << "prompt " << i;
    }
  }
}

TEST_F(CApi, SplitRuntimeMisuseIsRefusedByName) {
  const char* two[] = {"0", "0"};
  const char* with_null[] = {"0", nullptr};
  eaglevk_runtime* rt = nullptr;
  EXPECT_FAILS_WITH(eaglevk_runtime_create_split(two, nullptr, 2, nullptr), EAGLEVK_ERROR_INVALID_ARGUMENT, "out");
  EXPECT_FAILS_WITH(eaglevk_runtime_create_split(nullptr, nullptr, 2, &rt), EAGLEVK_ERROR_INVALID_ARGUMENT, "devices");
  EXPECT_FAILS_WITH(eaglevk_runtime_create_split(two, nullptr, 0, &rt), EAGLEVK_ERROR_INVALID_ARGUMENT, "count is 0");
  EXPECT_FAILS_WITH(eaglevk_runtime_create_split(with_null, nullptr, 2, &rt), EAGLEVK_ERROR_INVALID_ARGUMENT,
                    "devices[1] is NULL");
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    const double shares[] = {1, bad};
    EXPECT_FAILS_WITH(eaglevk_runtime_create_split(two, shares, 2, &rt), EAGLEVK_ERROR_INVALID_ARGUMENT, "shares[1]");
    EXPECT_EQ(rt, nullptr);
  }
  const char* missing[] = {"0", "no-such-gpu-anywhere"};
  EXPECT_FAILS_WITH(eaglevk_runtime_create_split(missing, nullptr, 2, &rt), EAGLEVK_ERROR_DEVICE, "no-such-gpu-anywhere");
  // More devices than the target has layers: the load names both counts.
  std::vector<const char*> nine(9, "0");
  SplitModel split;
  ASSERT_EQ(eaglevk_runtime_create_split(nine.data(), nullptr, nine.size(), &split.runtime), EAGLEVK_OK)
      << eaglevk_last_error();
  eaglevk_status status = eaglevk_model_load(split.runtime, asset("tiny-llama3").c_str(), nullptr, &split.model);
  EXPECT_NE(status, EAGLEVK_OK);
  EXPECT_NE(std::string(eaglevk_last_error()).find("9 devices for a model of 8 layers"), std::string::npos)
      << eaglevk_last_error();
  EXPECT_EQ(split.model, nullptr);
}

}  // namespace
}  // namespace eaglevk::testing
