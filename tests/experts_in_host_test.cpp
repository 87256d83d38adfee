// The routed experts of a Llama-4 target in host memory (api::LoadOptions::experts_in_host,
// vk::MemoryKind::HostWeights): the same kernels read the same bytes from another memory, so
// the tiny Llama-4 pair's logits, tokens and EAGLE-3 acceptance are bit-identical to the
// all-device load; the memory plan puts them there itself when only the rest fits the device
// (EAGLEVK_DEVICE_MEMORY), refuses below that with both numbers, and refuses a dense model and
// a host too small (EAGLEVK_HOST_MEMORY) by name.
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include <eaglevk/eaglevk.hpp>

#include "models/target.h"
#include "support/target_runner.h"
#include "runtime/ops/gpu.h"
#include "support/real_dims.h"

namespace eaglevk::testing {
namespace {

const std::string kAssets = EAGLEVK_ASSETS;
const std::string kTarget = kAssets + "/tiny-llama4", kDraft = kAssets + "/tiny-llama4-eagle3";
constexpr uint32_t kContext = 256;

api::LoadOptions options(std::optional<bool> in_host, bool draft = true) {
  api::LoadOptions o;
  if (draft) o.draft = kDraft;
  o.context = kContext;
  o.experts_in_host = in_host;
  return o;
}

// Sets an environment variable for the scope (the context reads its budgets when it opens).
struct EnvScope {
  std::string name;
  EnvScope(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~EnvScope() { ::unsetenv(name.c_str()); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Every routed expert buffer is in `kind`, in memory whose type has `flags`; the rest is on the device.
void expect_experts_in(const api::Model& m, vk::MemoryKind kind, VkMemoryPropertyFlags flags) {
  const auto& llama4 = std::get<models::Llama4Model>(m.target->family);
  uint32_t moe_layers = 0;
  for (const models::Llama4Layer& layer : llama4.layers) {
    EXPECT_EQ(layer.qkv.buffer.kind, vk::MemoryKind::Device);
    EXPECT_TRUE(layer.qkv.buffer.memory_flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (layer.experts_gate_up.buffers.empty()) continue;
    ++moe_layers;
    EXPECT_EQ(layer.router.buffer.kind, vk::MemoryKind::Device);
    for (const models::ExpertTensor* x : {&layer.experts_gate_up, &layer.experts_down})
      for (const vk::Buffer& b : x->buffers) {
        EXPECT_EQ(b.kind, kind) << b.name;
        EXPECT_EQ(b.memory_flags & flags, flags) << b.name << " has memory flags " << b.memory_flags;
      }
  }
  EXPECT_EQ(moe_layers, 4u);
}

struct Outputs {
  std::vector<float> logits;
  std::vector<int32_t> plain, spec;
  engine::SpecStats stats;
};

Outputs run_pair(const api::Runtime& rt, const std::shared_ptr<const api::Model>& m) {
  Outputs r;
  const std::vector<int32_t> ids = random_prompt(40, 7, m->tokenizer.bos_id(), 4000);
  {
    testing::TargetRunner runner(*rt.device->gpu, *m->target, kContext, 64);
    r.logits = last_logits(runner, ids, 16);
  }
  api::SessionParams p;
  p.max_new_tokens = 24;
  p.ignore_eos = true;
  p.k = 0;
  r.plain = api::Session(m, p).generate(ids).tokens;
  p.k = 3;
  api::GenerateOutput out = api::Session(m, p).generate(ids);
  r.spec = out.tokens;
  r.stats = out.stats;
  return r;
}

TEST(ExpertsInHost, LogitsTokensAndAcceptanceAreThoseOfTheDeviceLoad) {
  const api::Runtime rt = api::open_runtime();
  api::LoadPlan on_device = api::plan_load(rt, kTarget, options(false));
  api::LoadPlan in_host = api::plan_load(rt, kTarget, options(true));
  ASSERT_GT(on_device.memory.routed_experts, 0u);
  EXPECT_EQ(on_device.memory.host_weights, 0u);
  EXPECT_EQ(in_host.memory.host_weights, in_host.memory.routed_experts);
  EXPECT_EQ(in_host.memory.total(kContext), on_device.memory.total(kContext) - on_device.memory.routed_experts);
  const auto device_model = api::load_model(rt, std::move(on_device));
  const auto host_model = api::load_model(rt, std::move(in_host));
  expect_experts_in(*device_model, vk::MemoryKind::Device, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  expect_experts_in(*host_model, vk::MemoryKind::HostWeights, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  const models::ExpertTraffic t = models::expert_traffic(*host_model->target);
  EXPECT_EQ(t.host_bytes, t.bytes);
  EXPECT_EQ(models::expert_traffic(*device_model->target).host_bytes, 0u);
  // The plan's routed experts (as the files store them) are what the model holds in host memory.
  EXPECT_EQ(t.bytes, device_model->memory.routed_experts);
  // Top-1 of 4 experts in 4 layers: a token reads one expert a layer; a 4-row verify pass at most 4.
  EXPECT_EQ(t.bytes_per_token(), 4 * t.bytes_per_expert * t.experts_per_token);
  EXPECT_EQ(t.bytes_per_pass_bound(4), 4 * t.bytes_per_expert * std::min(t.experts, 4 * t.experts_per_token));

  const Outputs a = run_pair(rt, device_model), b = run_pair(rt, host_model);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
  EXPECT_EQ(a.plain, b.plain);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.spec, a.plain);  // lossless at temperature 0
  EXPECT_EQ(a.stats.num_drafts, b.stats.num_drafts);
  EXPECT_EQ(a.stats.num_accepted_tokens, b.stats.num_accepted_tokens);
  EXPECT_EQ(a.stats.accepted_at, b.stats.accepted_at);
  EXPECT_GT(a.stats.num_drafts, 0u);
}

// llama.cpp's Q4_K_M file: block-quantized experts, GGUF's gate and up apart (the other upload
// path), with its Q8_0 head.
TEST(ExpertsInHost, GgufQ4KMTokensAndAcceptanceAreThoseOfTheDeviceLoad) {
  const api::Runtime rt = api::open_runtime();
  const std::string gguf = kAssets + "/gguf/tiny-llama4/";
  std::vector<api::GenerateOutput> outs;
  for (bool in_host : {false, true}) {
    api::LoadOptions o = options(in_host, false);
    o.draft = gguf + "tiny-llama4-eagle3-q8_0.gguf";
    const auto m = api::load_model(rt, api::plan_load(rt, gguf + "tiny-llama4-q4_k_m.gguf", o));
    expect_experts_in(*m, in_host ? vk::MemoryKind::HostWeights : vk::MemoryKind::Device,
                      in_host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    api::SessionParams p;
    p.max_new_tokens = 16;
    p.ignore_eos = true;
    outs.push_back(api::Session(m, p).generate(random_prompt(24, 3, m->tokenizer.bos_id(), 4000)));
  }
  EXPECT_EQ(outs[0].tokens, outs[1].tokens);
  EXPECT_EQ(outs[0].stats.num_accepted_tokens, outs[1].stats.num_accepted_tokens);
  EXPECT_EQ(outs[0].stats.accepted_at, outs[1].stats.accepted_at);
  EXPECT_GT(outs[0].stats.num_drafts, 0u);
}

TEST(ExpertsInHost, ChosenWhenOnlyTheRestFitsTheDeviceAndRefusedBelowTheRest) {
  uint64_t whole = 0, rest = 0, routed = 0;
  {
    const api::Runtime rt = api::open_runtime();
    const api::LoadPlan p = api::plan_load(rt, kTarget, options(false));
    whole = p.memory.total(kContext);
    routed = p.memory.routed_experts;
    rest = whole - routed;
  }
  {
    // Between the two: the plan moves the experts itself and says so.
    EnvScope cap("EAGLEVK_DEVICE_MEMORY", std::to_string(rest + routed / 2));
    const api::Runtime rt = api::open_runtime();
    api::LoadPlan p = api::plan_load(rt, kTarget, options(std::nullopt));
    EXPECT_EQ(p.memory.host_weights, routed);
    EXPECT_TRUE(p.memory.experts_in_host_automatic);
    EXPECT_EQ(p.context, kContext);
    bool noted = false;
    for (const std::string& note : p.notes) noted |= note.find("routed experts") != std::string::npos;
    EXPECT_TRUE(noted);
    // Forbidden: the whole model does not fit.
    EXPECT_NE(error_of([&] { api::plan_load(rt, kTarget, options(false)); }).find("does not fit the device"),
              std::string::npos);
    const auto m = api::load_model(rt, std::move(p));
    expect_experts_in(*m, vk::MemoryKind::HostWeights, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  }
  {
    // Above the whole model nothing moves.
    EnvScope cap("EAGLEVK_DEVICE_MEMORY", std::to_string(whole + (1 << 20)));
    const api::Runtime rt = api::open_runtime();
    const api::LoadPlan p = api::plan_load(rt, kTarget, options(std::nullopt));
    EXPECT_EQ(p.memory.host_weights, 0u);
    EXPECT_FALSE(p.memory.experts_in_host_automatic);
  }
  {
    // Below the rest: refused with what the whole model and the device part need.
    EnvScope cap("EAGLEVK_DEVICE_MEMORY", std::to_string(rest - (4 << 20)));
    const api::Runtime rt = api::open_runtime();
    const std::string e = error_of([&] { api::plan_load(rt, kTarget, options(std::nullopt)); });
    EXPECT_NE(e.find("does not fit the device"), std::string::npos) << e;
    EXPECT_NE(e.find("the whole model needs"), std::string::npos) << e;
    EXPECT_NE(e.find("in host memory the device part needs"), std::string::npos) << e;
    EXPECT_NE(e.find(engine::format_bytes(routed)), std::string::npos) << e;
  }
}

TEST(ExpertsInHost, RefusesADenseModelAndAHostTooSmall) {
  const api::Runtime rt = api::open_runtime();
  const std::string dense = error_of([&] {
    api::LoadOptions o = options(true, false);
    api::plan_load(rt, kAssets + "/tiny-llama3", o);
  });
  EXPECT_NE(dense.find("has no routed experts"), std::string::npos) << dense;
  // Unset or false on a dense model is no error.
  EXPECT_EQ(api::plan_load(rt, kAssets + "/tiny-llama3", options(false, false)).memory.host_weights, 0u);
  EnvScope cap("EAGLEVK_HOST_MEMORY", "1M");
  const api::Runtime small = api::open_runtime();
  EXPECT_EQ(small.device->gpu->ctx.host_memory_budget, 1u << 20);
  const std::string host = error_of([&] { api::plan_load(small, kTarget, options(true)); });
  EXPECT_NE(host.find("the host has 1.0 MiB available (EAGLEVK_HOST_MEMORY=1M)"), std::string::npos) << host;
  // Kept on the device, the host's budget does not matter.
  EXPECT_EQ(api::plan_load(small, kTarget, options(false)).memory.host_weights, 0u);
}

// A discrete GPU's types: device-local, its host-visible BAR window, and system memory. Host
// weights take system memory where the buffer may live there, and the window only where not.
TEST(ExpertsInHost, HostWeightsAvoidDeviceLocalMemoryTypes) {
  const api::Runtime rt = api::open_runtime();
  vk::Context& ctx = rt.device->gpu->ctx;
  const VkPhysicalDeviceMemoryProperties saved = ctx.memory;
  ctx.memory.memoryTypeCount = 3;
  ctx.memory.memoryTypes[0].propertyFlags = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  ctx.memory.memoryTypes[1].propertyFlags = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                            VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  ctx.memory.memoryTypes[2].propertyFlags = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  EXPECT_EQ(ctx.find_memory_type(0b111, visible, 0, local), 2u);
  EXPECT_EQ(ctx.find_memory_type(0b011, visible, 0, local), 1u);
  EXPECT_EQ(ctx.find_memory_type(0b111, local, 0), 0u);
  ctx.memory = saved;
}

}  // namespace
}  // namespace eaglevk::testing
