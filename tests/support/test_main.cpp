// main() of every Vulkan test program: GoogleTest, plus a check after the last test that the
// validation layer reported no error anywhere in the process (device creation, uploads and
// model loading in suite set-up, tests that do not use the GpuTest fixture, contexts that the
// C API creates). GpuTest still names the test during which an error appeared.
#include <gtest/gtest.h>

#include "runtime/vk/context.h"

namespace {

struct NoValidationErrorsInProcess : ::testing::Environment {
  void TearDown() override {
    EXPECT_EQ(eaglevk::vk::validation_errors_in_process(), 0u)
        << "the validation layer reported errors in this process (messages on stderr)";
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new NoValidationErrorsInProcess);
  return RUN_ALL_TESTS();
}
