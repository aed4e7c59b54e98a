// --backend auto: $FURNACE_BACKEND decides when set (and a bad value is one clear error), else
// cuda where a device is present, else sim; names other than auto pass through unchanged.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "furnace/backend.h"
#include "furnace/error.h"

namespace furnace {
namespace {

// Sets FURNACE_BACKEND (or unsets it for nullptr) for one scope.
class BackendEnv {
 public:
  explicit BackendEnv(const char* value) {
    const char* old = std::getenv("FURNACE_BACKEND");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) ::setenv("FURNACE_BACKEND", value, 1);
    else ::unsetenv("FURNACE_BACKEND");
  }
  ~BackendEnv() {
    if (had_) ::setenv("FURNACE_BACKEND", old_.c_str(), 1);
    else ::unsetenv("FURNACE_BACKEND");
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(BackendChoice, AutoFollowsTheDevicesWithoutTheVariable) {
  BackendEnv env(nullptr);
  EXPECT_EQ(resolve_backend_name("auto"), cuda_device_count() > 0 ? "cuda" : "sim");
}

TEST(BackendChoice, TheVariableDecides) {
  {
    BackendEnv env("sim");
    EXPECT_EQ(resolve_backend_name("auto"), "sim");
  }
  {
    BackendEnv env("cuda");
    EXPECT_EQ(resolve_backend_name("auto"), "cuda");
  }
  BackendEnv env("opencl");
  try {
    resolve_backend_name("auto");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "FURNACE_BACKEND='opencl' is not a backend (choose sim or cuda)");
  }
}

TEST(BackendChoice, ExplicitNamesPassThrough) {
  BackendEnv env("cuda");
  EXPECT_EQ(resolve_backend_name("sim"), "sim");
  EXPECT_EQ(resolve_backend_name("cuda"), "cuda");
  EXPECT_EQ(resolve_backend_name("tpu"), "tpu");  // make_backend refuses it, with its message
}

}  // namespace
}  // namespace furnace
