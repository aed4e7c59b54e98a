// tests/reference/test_reference_mlp.cpp: the reference MLP on the sim backend against PyTorch's
// numbers in data/reference/mlp_ref_v1.bin (written by tests/reference/make_reference.py, never by
// CI): logits, loss and every gradient of one batch, then ten SGD-with-momentum steps. Also checks
// that the reader refuses a stale or damaged file. It does not test the ops one by one (test_ops
// does, against the `ref` ops) nor the CUDA backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>      // defines: std::remove
#include <cstring>     // defines: std::memcpy
#include <filesystem>  // defines: std::filesystem::temp_directory_path
#include <fstream>
#include <functional>  // defines: std::function
#include <iterator>    // defines: std::istreambuf_iterator
#include <stdexcept>   // defines: std::runtime_error
#include <string>
#include <vector>

#include "furnace/backend.h"   // defines: make_sim_backend
#include "furnace/nn.h"        // defines: MLP, CrossEntropyLoss, SGD, Parameter
#include "furnace/ops.h"       // defines: OpContext, ops::copy_to_device, ops::copy_to_host
#include "furnace/runtime.h"   // defines: Runtime
#include "furnace/tensor.h"    // defines: Tensor, Device
#include "furnace/topology.h"  // defines: load_topology
#include "furnace/trace.h"     // defines: TraceBus
#include "reference/all_close.h"       // defines: Tolerance, all_close, to_host
#include "reference/reference_file.h"  // defines: MlpReference, load_mlp_reference

#ifndef FURNACE_TEST_DATA_DIR
#error "FURNACE_TEST_DATA_DIR must name the data/ directory (set by tests/CMakeLists.txt)"
#endif

namespace furnace {
namespace {

using reference::load_mlp_reference;
using reference::MlpReference;

const std::string kReferencePath = std::string(FURNACE_TEST_DATA_DIR) + "/reference/mlp_ref_v1.bin";

// One forward and backward: the only differences are fp32 reassociation (the sim backend's BLAS
// sums the 784- and 512-long dot products in another order than PyTorch's), a few ulps of values
// of order 1.
constexpr Tolerance kOnePass{1e-5, 1e-4};
// Ten SGD steps with momentum 0.9: those rounding differences feed back through the weights and
// the momentum buffers step after step, so allow ten times more.
constexpr Tolerance kTenSteps{1e-4, 1e-3};

// A sim runtime with the batch of the reference file on cuda:0.
class ReferenceMlp : public ::testing::Test {
 protected:
  MlpReference ref = load_mlp_reference(kReferencePath);
  TraceBus bus;
  Topology topo = load_topology("laptop-4060");
  Runtime rt{make_sim_backend(topo, &bus), bus};
  OpContext ctx{rt, 0, 0};
  Tensor x, labels;

  void SetUp() override {
    const int64_t B = ref.B;
    x = Tensor::empty(rt, Device::cuda(0), {B, ref.sizes.front()});  // (B, 784)
    ops::copy_to_device(ctx, x, ref.x.data());
    labels = Tensor::empty(rt, Device::cuda(0), {B}, DType::i32);    // (B)
    ops::copy_to_device(ctx, labels, ref.labels.data());
  }

  void load_initial(MLP& model) {
    for (const auto& [name, values] : ref.params) model.load_parameter(ctx, name, values);
  }
};

// ---- the reader ----------------------------------------------------------------------------

TEST(ReferenceFile, DescribesTheReferenceMlp) {
  const MlpReference r = load_mlp_reference(kReferencePath);
  EXPECT_EQ(r.B, 64);
  EXPECT_EQ(r.sizes, (std::vector<int>{784, 512, 512, 10}));
  EXPECT_EQ(r.steps, 10);
  EXPECT_EQ(r.lr, 0.05f);
  EXPECT_EQ(r.momentum, 0.9f);
  ASSERT_EQ(r.params.size(), 6u);
  EXPECT_EQ(r.params[0].first, "0.weight");
  EXPECT_EQ(r.params[0].second.size(), 512u * 784u);
  EXPECT_EQ(r.params[5].first, "4.bias");
  EXPECT_EQ(r.grads.size(), r.params.size());
  ASSERT_EQ(r.params_after.size(), 2u);
  EXPECT_EQ(r.params_after[0].first, "4.weight");
  EXPECT_EQ(r.labels.size(), 64u);
  EXPECT_EQ(r.logits.size(), 64u * 10u);
  ASSERT_EQ(r.losses.size(), 10u);
  EXPECT_EQ(r.losses[0], r.loss) << "losses are recorded before each step";
  for (int32_t y : r.labels) EXPECT_TRUE(y >= 0 && y < 10) << y;
}

// Writes a damaged copy of the committed file and expects the reader to refuse it with the hint.
void expect_rejected(const std::string& name, const std::function<void(std::string&)>& damage) {
  std::ifstream in(kReferencePath, std::ios::binary);
  ASSERT_TRUE(in) << kReferencePath;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  damage(bytes);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("furnace_mlp_ref_" + name + ".bin")).string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  try {
    load_mlp_reference(path);
    ADD_FAILURE() << name << ": the damaged file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT: re-run tests/reference/make_reference.py"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

void set_header_int(std::string& bytes, int index, int32_t value) {
  std::memcpy(bytes.data() + 4 * index, &value, sizeof value);
}

TEST(ReferenceFile, RejectsAnotherMagic) {
  expect_rejected("magic", [](std::string& b) { set_header_int(b, 0, 12345); });
}

TEST(ReferenceFile, RejectsAnotherVersion) {
  expect_rejected("version", [](std::string& b) { set_header_int(b, 1, 2); });
}

TEST(ReferenceFile, RejectsAShortFile) {
  expect_rejected("short", [](std::string& b) { b.resize(b.size() - 4); });
  expect_rejected("header_only", [](std::string& b) { b.resize(100); });
}

TEST(ReferenceFile, RejectsTrailingBytes) {
  expect_rejected("long", [](std::string& b) { b.append(4, '\0'); });
}

TEST(ReferenceFile, RejectsAMissingFile) {
  try {
    load_mlp_reference(std::string(FURNACE_TEST_DATA_DIR) + "/reference/no_such_file.bin");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT: re-run"), std::string::npos) << e.what();
  }
}

// ---- the model against PyTorch ---------------------------------------------------------------

TEST_F(ReferenceMlp, ForwardMatchesLogitsAndLoss) {
  MLP model(rt, 0, ref.sizes);
  load_initial(model);
  Tensor logits = model.forward(ctx, x);
  ASSERT_EQ(logits.shape(), (Shape{ref.B, ref.sizes.back()}));
  EXPECT_TRUE(all_close("logits", to_host(ctx, logits), ref.logits, kOnePass));

  CrossEntropyLoss criterion;
  const float loss = criterion.forward(ctx, logits, labels);
  EXPECT_TRUE(all_close("loss", {loss}, {ref.loss}, kOnePass));
}

TEST_F(ReferenceMlp, BackwardMatchesEveryGradient) {
  MLP model(rt, 0, ref.sizes);
  load_initial(model);
  CrossEntropyLoss criterion;
  criterion.forward(ctx, model.forward(ctx, x), labels);
  Tensor dlogits = criterion.backward(ctx);  // (B, 10)
  model.backward(ctx, dlogits);

  std::vector<Parameter> params = model.parameters();
  ASSERT_EQ(params.size(), ref.grads.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, expected] = ref.grads[i];
    ASSERT_EQ(params[i].name, name) << "parameters() must follow state_dict order";
    ASSERT_NE(params[i].grad, nullptr) << name;
    ASSERT_TRUE(params[i].grad->defined()) << name << ".grad after backward";
    EXPECT_EQ(params[i].grad->shape(), params[i].value->shape()) << name;
    EXPECT_TRUE(all_close("grad of " + name, to_host(ctx, *params[i].grad), expected, kOnePass));
  }
}

TEST_F(ReferenceMlp, TenSgdStepsMatchLossesAndWeights) {
  MLP model(rt, 0, ref.sizes);
  load_initial(model);
  CrossEntropyLoss criterion;
  SGD opt(model.parameters(), ref.lr, ref.momentum);

  std::vector<float> losses;
  for (int step = 0; step < ref.steps; ++step) {
    opt.zero_grad(ctx);
    const float loss = criterion.forward(ctx, model.forward(ctx, x), labels);
    model.backward(ctx, criterion.backward(ctx));
    losses.push_back(loss);  // before the step, as the reference records it
    opt.step(ctx);
  }
  EXPECT_EQ(opt.step_count(), ref.steps);
  EXPECT_TRUE(all_close("losses of the steps", losses, ref.losses, kTenSteps));
  // The step-0 loss comes from the initial weights: it must match as tightly as the forward test.
  EXPECT_TRUE(all_close("loss of step 0", {losses.front()}, {ref.losses.front()}, kOnePass));
  for (const auto& [name, expected] : ref.params_after) {
    EXPECT_TRUE(all_close(name + " after " + std::to_string(ref.steps) + " steps",
                          model.parameter_values(ctx, name), expected, kTenSteps));
  }
}

}  // namespace
}  // namespace furnace
