#include "runtime/ops/lattice_grids.h"

#include <optional>

#include "runtime/ops/gpu.h"
#include "shaders/iq_grids.h"

namespace eaglevk::ops {
namespace {

struct PlacedGrid {
  std::span<const uint32_t> words;
  uint64_t offset;  // in the buffer
};
constexpr uint64_t kAlign = 256;
constexpr uint64_t aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
constexpr uint64_t kOffset2xs = aligned(sizeof(kIq2xxsGrid));
constexpr uint64_t kOffset2s = kOffset2xs + aligned(sizeof(kIq2xsGrid));
constexpr uint64_t kOffset1s = kOffset2s + aligned(sizeof(kIq2sGrid));
constexpr uint64_t kOffset3xxs = kOffset1s + aligned(sizeof(kIq1sGrid));
constexpr uint64_t kOffset3s = kOffset3xxs + aligned(sizeof(kIq3xxsGrid));
constexpr uint64_t kBytes = kOffset3s + aligned(sizeof(kIq3sGrid));
const PlacedGrid kGrids[] = {{kIq2xxsGrid, 0},        {kIq2xsGrid, kOffset2xs},   {kIq2sGrid, kOffset2s},
                             {kIq1sGrid, kOffset1s},  {kIq3xxsGrid, kOffset3xxs}, {kIq3sGrid, kOffset3s}};

std::optional<PlacedGrid> grid_of(WeightType type) {
  switch (type) {
    case WeightType::IQ2_XXS: return kGrids[0];
    case WeightType::IQ2_XS: return kGrids[1];
    case WeightType::IQ2_S: return kGrids[2];
    case WeightType::IQ1_S:
    case WeightType::IQ1_M: return kGrids[3];
    case WeightType::IQ3_XXS: return kGrids[4];
    case WeightType::IQ3_S: return kGrids[5];
    default: return std::nullopt;
  }
}

}  // namespace

vk::Buffer upload_lattice_grids(const vk::Context& ctx) {
  vk::Buffer buffer(ctx, kBytes, vk::MemoryKind::Device, "lattice grids");
  for (const PlacedGrid& g : kGrids)
    vk::upload(ctx, vk::BufferRange(buffer, g.offset, g.words.size_bytes()), g.words.data(), g.words.size_bytes());
  return buffer;
}

std::vector<vk::Arg> with_lattice_grid(const Gpu& gpu, WeightType type, std::span<const vk::Arg> args) {
  std::vector<vk::Arg> out(args.begin(), args.end());
  if (const std::optional<PlacedGrid> g = grid_of(type))
    out.push_back(vk::reads(vk::BufferRange(gpu.lattice_grids, g->offset, g->words.size_bytes())));
  return out;
}

}  // namespace eaglevk::ops
