// tests/reference/reference_file.h: reads data/reference/mlp_ref_v1.bin, PyTorch's numbers for the
// reference MLP written by tests/reference/make_reference.py (layout in data/reference/README.md).
// Only a reader for the parity test: it knows nothing of the runtime and compares nothing.
#pragma once

#include <cstdint>
#include <cstring>    // defines: std::memcpy
#include <fstream>    // defines: std::ifstream
#include <iterator>   // defines: std::istreambuf_iterator
#include <stdexcept>  // defines: std::runtime_error
#include <string>
#include <utility>    // defines: std::pair
#include <vector>

namespace furnace::reference {

inline constexpr int32_t kMlpRefMagic = 20261202;
inline constexpr int32_t kMlpRefVersion = 1;
inline constexpr int kMlpRefHeaderInts = 256;

struct MlpReference {
  int B = 0;                // batch size
  std::vector<int> sizes;   // {784, 512, 512, 10}
  int seed = 0, steps = 0;  // torch.manual_seed, number of SGD steps
  float lr = 0, momentum = 0;
  // (state_dict name, values) in state_dict order: "0.weight" (512, 784), "0.bias" (512), ...
  std::vector<std::pair<std::string, std::vector<float>>> params;        // initial weights
  std::vector<std::pair<std::string, std::vector<float>>> grads;         // after one backward
  std::vector<std::pair<std::string, std::vector<float>>> params_after;  // last K, after `steps`
  std::vector<float> x;         // (B, sizes[0])
  std::vector<float> logits;    // (B, sizes.back()) of the initial model
  std::vector<float> losses;    // (steps), each before its step; losses[0] == loss
  std::vector<int32_t> labels;  // (B)
  float loss = 0;               // mean cross-entropy of the initial model
};

namespace detail {

[[noreturn]] inline void mlp_ref_fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("reference file " + path + ": " + what +
                           " (HINT: re-run tests/reference/make_reference.py)");
}

// A cursor over the file's bytes that fails, naming the section, when the file is short.
struct MlpRefCursor {
  const std::string& path;
  const std::vector<char>& bytes;
  size_t pos = 0;

  template <class T>
  std::vector<T> take(size_t count, const std::string& section) {
    const size_t n = count * sizeof(T);
    if (bytes.size() - pos < n) {
      mlp_ref_fail(path, "file is short: " + std::to_string(bytes.size()) + " bytes, section '" +
                             section + "' needs " + std::to_string(n) + " at offset " +
                             std::to_string(pos));
    }
    std::vector<T> out(count);
    std::memcpy(out.data(), bytes.data() + pos, n);  // little-endian file, little-endian host
    pos += n;
    return out;
  }
};

inline float f32_from_bits(int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace detail

// Loads and checks the file. Throws std::runtime_error with "HINT: re-run
// tests/reference/make_reference.py" when it is missing, has another magic or version, describes
// an impossible model, is short, or has bytes left over.
inline MlpReference load_mlp_reference(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::mlp_ref_fail(path, "cannot open");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  detail::MlpRefCursor cur{path, bytes};

  const std::vector<int32_t> h = cur.take<int32_t>(kMlpRefHeaderInts, "header");
  if (h[0] != kMlpRefMagic) {
    detail::mlp_ref_fail(path, "bad magic " + std::to_string(h[0]) + ", expected " +
                                   std::to_string(kMlpRefMagic));
  }
  if (h[1] != kMlpRefVersion) {
    detail::mlp_ref_fail(path, "version " + std::to_string(h[1]) + ", this reader expects " +
                                   std::to_string(kMlpRefVersion));
  }
  MlpReference r;
  r.B = h[2];
  const int L = h[3];
  if (r.B <= 0 || L < 2 || L > 4) {
    // Sizes occupy [4, 4+L) and the seed sits at [8], so at most 4 sizes fit this layout.
    detail::mlp_ref_fail(path, "bad header: B=" + std::to_string(r.B) + " L=" + std::to_string(L));
  }
  r.sizes.assign(h.begin() + 4, h.begin() + 4 + L);
  for (int s : r.sizes) {
    if (s <= 0) detail::mlp_ref_fail(path, "bad header: a layer size is " + std::to_string(s));
  }
  r.seed = h[8];
  r.steps = h[9];
  r.lr = detail::f32_from_bits(h[10]);
  r.momentum = detail::f32_from_bits(h[11]);
  const int after = h[12];  // the last `after` parameters are stored after the steps
  const int n_params = 2 * (L - 1);
  if (r.steps < 0 || after < 0 || after > n_params) {
    detail::mlp_ref_fail(path, "bad header: steps=" + std::to_string(r.steps) +
                                   " params_after=" + std::to_string(after));
  }

  // Names and sizes in state_dict order of Sequential(Linear, ReLU, Linear, ReLU, Linear).
  std::vector<std::pair<std::string, size_t>> layout;
  for (int i = 0; i + 1 < L; ++i) {
    const std::string prefix = std::to_string(2 * i) + ".";
    const size_t in_f = static_cast<size_t>(r.sizes[i]), out_f = static_cast<size_t>(r.sizes[i + 1]);
    layout.emplace_back(prefix + "weight", out_f * in_f);
    layout.emplace_back(prefix + "bias", out_f);
  }
  const size_t B = static_cast<size_t>(r.B);
  for (const auto& [name, n] : layout) r.params.emplace_back(name, cur.take<float>(n, name));
  r.x = cur.take<float>(B * static_cast<size_t>(r.sizes.front()), "x");
  r.labels = cur.take<int32_t>(B, "labels");
  r.logits = cur.take<float>(B * static_cast<size_t>(r.sizes.back()), "logits");
  r.loss = cur.take<float>(1, "loss")[0];
  for (const auto& [name, n] : layout) {
    r.grads.emplace_back(name, cur.take<float>(n, "grad of " + name));
  }
  r.losses = cur.take<float>(static_cast<size_t>(r.steps), "losses");
  for (size_t i = layout.size() - static_cast<size_t>(after); i < layout.size(); ++i) {
    const auto& [name, n] = layout[i];
    r.params_after.emplace_back(name, cur.take<float>(n, name + " after the steps"));
  }
  if (cur.pos != bytes.size()) {
    detail::mlp_ref_fail(path, std::to_string(bytes.size() - cur.pos) +
                                   " bytes left over after the last section");
  }
  return r;
}

}  // namespace furnace::reference
