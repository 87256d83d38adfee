#include "support/reference_llama.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "support/reference.h"

namespace eaglevk::testing {
namespace {

struct Shape {
  uint32_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
  double eps, theta;
  nlohmann::json scaling;
  bool qk_norm;  // Qwen3: an RMSNorm with its own weight on every q and k head before the rotation
};

Shape read_shape(const std::filesystem::path& dir) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  Shape s{};
  s.hidden = j.at("hidden_size");
  s.inter = j.at("intermediate_size");
  s.layers = j.at("num_hidden_layers");
  s.heads = j.at("num_attention_heads");
  s.kv_heads = j.value("num_key_value_heads", s.heads);
  s.head_dim = j.value("head_dim", s.hidden / s.heads);
  s.vocab = j.at("vocab_size");
  s.eps = j.at("rms_norm_eps");
  s.theta = j.value("rope_theta", 10000.0);
  s.scaling = j.value("rope_scaling", nlohmann::json());
  s.qk_norm = j.at("architectures").at(0) == "Qwen3ForCausalLM";
  return s;
}

// Meta's llama3 frequency scaling: long wavelengths divided by `factor`, short ones kept, a
// smooth blend between (computed in double, rounded once).
std::vector<float> inv_freq(const Shape& s) {
  std::vector<float> out(s.head_dim / 2);
  for (uint32_t i = 0; i < out.size(); ++i) {
    double f = 1.0 / std::pow(s.theta, double(2 * i) / s.head_dim);
    if (s.scaling.is_object() && s.scaling.value("rope_type", "") == "llama3") {
      double factor = s.scaling.at("factor"), low = s.scaling.at("low_freq_factor"),
             high = s.scaling.at("high_freq_factor"), old = s.scaling.at("original_max_position_embeddings");
      double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > old / low) {
        f /= factor;
      } else if (wavelen >= old / high) {
        double smooth = (old / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    out[i] = float(f);
  }
  return out;
}

std::vector<float> to_floats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// y[r, n] = sum_k x[r, k] w[n, k] over a [N, K] checkpoint tensor, threaded over n.
std::vector<float> linear(const std::vector<float>& x, uint32_t rows, const loader::TensorView& w) {
  const uint32_t N = uint32_t(w.shape[0]), K = uint32_t(w.shape[1]);
  std::vector<float> y(size_t(rows) * N);
  auto work = [&](uint32_t n0, uint32_t n1) {
    std::vector<float> row(K);
    loader::TensorView one = w;
    one.shape = {K};
    const size_t row_bytes = w.bytes / N;
    for (uint32_t n = n0; n < n1; ++n) {
      one.data = w.data + size_t(n) * row_bytes;
      one.bytes = row_bytes;
      loader::to_f32(one, row);
      for (uint32_t r = 0; r < rows; ++r) {
        const float* xr = &x[size_t(r) * K];
        double s = 0;
        for (uint32_t k = 0; k < K; ++k) s += double(xr[k]) * double(row[k]);
        y[size_t(r) * N + n] = float(s);
      }
    }
  };
  const uint32_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) pool.emplace_back(work, N * t / threads, N * (t + 1) / threads);
  for (auto& t : pool) t.join();
  return y;
}

std::vector<float> vector_of(const loader::Checkpoint& c, const std::string& name) { return loader::to_f32(c.get(name)); }

std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, uint32_t rows, const Shape& s) {
  return to_floats(ref_rms_norm(x, &w, rows, s.hidden, float(s.eps)));
}

}  // namespace

std::vector<double> ref_llama3_last_logits(const std::filesystem::path& dir, const std::vector<int32_t>& ids) {
  const Shape s = read_shape(dir);
  const loader::Checkpoint c = loader::Checkpoint::open(dir);
  const uint32_t T = uint32_t(ids.size()), H = s.hidden, hd = s.head_dim;
  const std::vector<float> freqs = inv_freq(s);
  std::vector<int32_t> pos(T);
  for (uint32_t i = 0; i < T; ++i) pos[i] = int32_t(i);

  // Embedding rows of the prompt only.
  std::vector<float> x(size_t(T) * H);
  {
    const loader::TensorView& e = c.get("model.embed_tokens.weight");
    loader::TensorView row = e;
    row.shape = {H};
    row.bytes = e.bytes / uint64_t(e.shape[0]);
    for (uint32_t t = 0; t < T; ++t) {
      row.data = e.data + size_t(ids[t]) * row.bytes;
      loader::to_f32(row, std::span<float>(&x[size_t(t) * H], H));
    }
  }
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    std::vector<float> n = rms_norm(x, vector_of(c, p + "input_layernorm.weight"), T, s);
    std::vector<float> q = linear(n, T, c.get(p + "self_attn.q_proj.weight"));
    std::vector<float> k = linear(n, T, c.get(p + "self_attn.k_proj.weight"));
    if (s.qk_norm) {  // rows of q are heads of hd after one another: one norm row per head
      const std::vector<float> qw = vector_of(c, p + "self_attn.q_norm.weight"),
                               kw = vector_of(c, p + "self_attn.k_norm.weight");
      q = to_floats(ref_rms_norm(q, &qw, T * s.heads, hd, float(s.eps)));
      k = to_floats(ref_rms_norm(k, &kw, T * s.kv_heads, hd, float(s.eps)));
    }
    q = to_floats(ref_rope(q, pos, freqs, T, s.heads, hd, false));
    k = to_floats(ref_rope(k, pos, freqs, T, s.kv_heads, hd, false));
    std::vector<float> v = linear(n, T, c.get(p + "self_attn.v_proj.weight"));
    // The device keeps K and V in f16.
    for (auto* kv : {&k, &v})
      for (float& f : *kv) f = f16_to_float(to_f16({f})[0]);
    RefAttention a{s.heads, s.kv_heads, hd, T, 0, float(1.0 / std::sqrt(double(hd)))};
    std::vector<float> attn = to_floats(ref_attention(q, k, v, pos, T, a));
    std::vector<float> o = linear(attn, T, c.get(p + "self_attn.o_proj.weight"));
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    std::vector<float> n2 = rms_norm(x, vector_of(c, p + "post_attention_layernorm.weight"), T, s);
    std::vector<float> act = to_floats(ref_swiglu(linear(n2, T, c.get(p + "mlp.gate_proj.weight")),
                                                  linear(n2, T, c.get(p + "mlp.up_proj.weight"))));
    std::vector<float> d = linear(act, T, c.get(p + "mlp.down_proj.weight"));
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  std::vector<float> last(x.end() - H, x.end());
  std::vector<float> h = rms_norm(last, vector_of(c, "model.norm.weight"), 1, s);
  const loader::TensorView* head = c.find("lm_head.weight");
  std::vector<float> logits = linear(h, 1, head ? *head : c.get("model.embed_tokens.weight"));
  return std::vector<double>(logits.begin(), logits.end());
}

}  // namespace eaglevk::testing
