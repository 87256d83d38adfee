// The Llama-4 vision tower from llama.cpp's mmproj files on the device: image features from
// each committed file (assets/gguf/tiny-llama4-vision, written by llama.cpp's converter from
// assets/tiny-llama4-vision) against the checkpoint's own tower and golden_vision.json, on the
// six test images. bf16: the same weights, the same features bit for bit. f16 with a GGUF text
// model (what llama.cpp's users run), preprocessing from the mmproj's metadata: the golden's
// features. Q8_0: the checkpoint's features within its rounding.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "loader/llama4_image.h"
#include "loader/llama4_image_prompt.h"
#include "loader/mmproj.h"
#include "models/target.h"
#include "runtime/engine/prompt_images.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"
#include "support/image_features_check.h"
#include "support/vision_gguf.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const models::Llama4Vision& tower_of(const models::TargetModel& m) {
  const auto& l4 = std::get<models::Llama4Model>(m.family);
  if (!l4.vision) throw std::runtime_error("no vision tower: " + l4.no_vision_reason);
  return *l4.vision;
}

fs::path mmproj(const char* type) {
  return fs::path(asset("gguf/tiny-llama4-vision")) / fmt::format("mmproj-tiny-llama4-vision-{}.gguf", type);
}

// A model's image features for every golden image, preprocessed with `preprocess`.
std::map<std::string, std::vector<float>> features(const models::TargetModel& m,
                                                   const loader::Llama4ImageConfig& preprocess, const json& golden) {
  const models::Llama4Vision& tower = tower_of(m);
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, g] : golden["images"].items()) {
    const loader::PreprocessedImage img = loader::preprocess_llama4_image(
        loader::load_image(asset("tiny-llama4-vision/") + g["file"].get<std::string>()), preprocess);
    const size_t floats = size_t(img.tiles) * tower.config.tokens_per_tile() * tower.config.text_hidden;
    out[name] = read_back<float>(engine::encode_image_tiles(gpu(), tower, img.pixels, img.tiles), floats);
  }
  return out;
}

struct Reference {
  json golden;
  models::TargetModel folder;
  std::map<std::string, std::vector<float>> features;
};

Reference& reference() {
  static std::unique_ptr<Reference> r;
  if (!r) {
    r = std::make_unique<Reference>();
    const fs::path dir = asset("tiny-llama4-vision");
    r->golden = json::parse(std::ifstream(dir / "golden_vision.json"));
    r->folder = models::load_target(gpu().ctx, dir);
    r->features = features(r->folder, loader::load_llama4_image_config(dir), r->golden);
  }
  return *r;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

struct VisionMmproj : GpuTest {};

TEST_F(VisionMmproj, Bf16FileGivesTheCheckpointsFeaturesBitForBit) {
  Reference& ref = reference();
  loader::ModelFiles files = loader::open_model_files(asset("tiny-llama4-vision"));
  loader::attach_llama4_mmproj(files, mmproj("bf16"));
  const models::TargetModel m = models::load_target(gpu().ctx, files);
  const auto got = features(m, loader::load_llama4_image_config(files), ref.golden);
  ASSERT_EQ(got.size(), 6u);
  for (const auto& [name, f] : got) EXPECT_TRUE(bitwise_equal(f, ref.features.at(name))) << name;
}

TEST_F(VisionMmproj, Q8_0FileGivesTheCheckpointsFeaturesWithinItsRounding) {
  Reference& ref = reference();
  loader::ModelFiles files = loader::open_model_files(asset("tiny-llama4-vision"));
  loader::attach_llama4_mmproj(files, mmproj("q8_0"));
  const models::TargetModel m = models::load_target(gpu().ctx, files);
  double worst = 0;
  for (const auto& [name, f] : features(m, loader::load_llama4_image_config(files), ref.golden)) {
    const double e = relative_l2(f, ref.features.at(name));
    worst = std::max(worst, e);
    EXPECT_GT(e, 0) << name << ": Q8_0 weights cannot give the bf16 features exactly";
    EXPECT_LT(e, 3e-2) << name;
  }
  fmt::print("Q8_0 mmproj: worst relative L2 difference of an image's features {:.2e}\n", worst);
}

// The f16 file with the GGUF text model; the preprocessing comes from the mmproj's metadata
// (no preprocessor_config.json beside the GGUF). Checked as vision_golden_test checks the
// checkpoint: the first values of the first and last rows, every row's L2 norm, the sum.
TEST_F(VisionMmproj, GgufModelWithF16FileGivesTheGoldenFeatures) {
  Reference& ref = reference();
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-vision-mmproj-{}", ::getpid());
  loader::ModelFiles files = loader::open_model_files(write_tiny_llama4_vision_gguf(dir));
  loader::attach_llama4_mmproj(files, mmproj("f16"));
  ASSERT_TRUE(files.preprocessor_config.has_value());
  const models::TargetModel m = models::load_target(gpu().ctx, files);
  fs::remove_all(dir);
  const uint32_t H = m.config().hidden_size;
  double worst = 0;
  for (const auto& [name, got] : features(m, loader::load_llama4_image_config(files), ref.golden)) {
    expect_golden_image_features(got, H, ref.golden["images"][name]["image_features"], name);
    worst = std::max(worst, relative_l2(got, ref.features.at(name)));
  }
  fmt::print("f16 mmproj + GGUF: worst relative L2 difference from the checkpoint's features {:.2e}\n", worst);
}

}  // namespace
}  // namespace eaglevk::testing
