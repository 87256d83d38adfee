#include "support/real_dims.h"
#include "support/target_runner.h"

#include <algorithm>
#include <span>

namespace eaglevk::testing {

std::vector<int32_t> random_prompt(uint32_t n, uint32_t seed, int32_t bos, int32_t below) {
  std::vector<int32_t> ids{bos};
  uint64_t s = seed;
  while (ids.size() < n) ids.push_back(int32_t((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33) % below);
  return ids;
}

std::vector<float> last_logits(TargetRunner& runner, const std::vector<int32_t>& ids, uint32_t chunk) {
  PassOutput out;
  for (uint32_t start = 0; start < ids.size(); start += chunk) {
    uint32_t n = std::min<uint32_t>(chunk, uint32_t(ids.size()) - start);
    PassRequest req;
    req.ids = std::span<const int32_t>(ids.data() + start, n);
    req.start = start;
    req.logits_from = n - 1;
    req.read_logits = start + n == ids.size();
    runner.run(req, out);
  }
  return out.logits;
}

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

}  // namespace eaglevk::testing
