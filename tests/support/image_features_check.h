#pragma once
// Image features against golden_vision.json's record of them (an image's "image_features": its
// shape, the first 8 values of the first and last rows, every row's L2 norm, the sum). Header-only.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace eaglevk::testing {

// `got` is [rows, H] f32. Values are printed to 6 decimals in the golden: 1e-3 relative on top;
// the sum of ~1000 values of both signs is compared absolutely, against the size of the terms.
inline void expect_golden_image_features(const std::vector<float>& got, uint32_t H, const nlohmann::json& want,
                                         const std::string& label) {
  const uint32_t rows = want["shape"][0];
  ASSERT_EQ(want["shape"][1].get<uint32_t>(), H) << label;
  ASSERT_EQ(got.size(), size_t(rows) * H) << label;
  auto close = [](double a, double b) { return std::fabs(a - b) <= 1e-3 * std::fabs(b) + 2e-6; };
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_PRED2(close, got[i], want["first_row_first8"][i].get<double>()) << label << " first row " << i;
    EXPECT_PRED2(close, got[size_t(rows - 1) * H + i], want["last_row_first8"][i].get<double>())
        << label << " last row " << i;
  }
  double sum = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    double norm = 0;
    for (uint32_t c = 0; c < H; ++c) {
      norm += double(got[size_t(r) * H + c]) * got[size_t(r) * H + c];
      sum += got[size_t(r) * H + c];
    }
    EXPECT_PRED2(close, std::sqrt(norm), want["row_l2_norms"][r].get<double>()) << label << " row " << r;
  }
  EXPECT_NEAR(sum, want["sum"].get<double>(), 2e-3) << label;
}

}  // namespace eaglevk::testing
