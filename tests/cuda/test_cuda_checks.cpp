// The cuda backend's error path and choice, on any machine (no GPU needed): every CUDA, cuBLAS and
// NCCL status that is not success becomes a furnace::Error naming the library, the status text,
// the device (-1 when none is current) and the statement, with file:line; without a device,
// `--backend cuda` is one clear error and `auto` picks the simulator.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#ifdef FURNACE_WITH_NCCL
#include "backend/cuda/nccl_check.h"
#endif
#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/topology.h"

namespace furnace {
namespace {

Error caught(void (*fn)()) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  return Error("no error");
}

TEST(CudaChecks, ACudaErrorNamesTheStatusTheDeviceAndTheStatement) {
  const Error e = caught([] { FURNACE_CUDA_CHECK(cudaErrorInvalidValue); });
  const int device = cuda::current_device_or_minus_one();
  EXPECT_EQ(e.message(), "CUDA error: invalid argument (device " + std::to_string(device) +
                             ", cudaErrorInvalidValue)");
  EXPECT_EQ(e.statement(), "cudaErrorInvalidValue");
  EXPECT_EQ(e.device(), device);
  EXPECT_NE(e.file().find("test_cuda_checks.cpp"), std::string::npos);
  EXPECT_GT(e.line(), 0);
}

TEST(CudaChecks, ACublasErrorNamesTheStatus) {
  const Error e = caught([] { FURNACE_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); });
  EXPECT_EQ(e.message().rfind("cuBLAS error: ", 0), 0u) << e.message();
  EXPECT_NE(e.message().find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << e.message();
  EXPECT_EQ(e.statement(), "CUBLAS_STATUS_INVALID_VALUE");
}

#ifdef FURNACE_WITH_NCCL
TEST(CudaChecks, AnNcclErrorNamesTheStatus) {
  const Error e = caught([] { FURNACE_NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_EQ(e.message().rfind("NCCL error: invalid argument", 0), 0u) << e.message();
  EXPECT_EQ(e.statement(), "ncclInvalidArgument");
}
#endif

TEST(CudaChecks, SuccessIsSilent) {
  EXPECT_NO_THROW(FURNACE_CUDA_CHECK(cudaSuccess));
  EXPECT_NO_THROW(FURNACE_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}

TEST(CudaBackendChoice, WithoutADeviceCudaIsOneClearErrorAndAutoIsTheSimulator) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: this is the no-device case";
  const char* saved = std::getenv("FURNACE_BACKEND");
  const std::string keep = saved ? saved : "";
  ::unsetenv("FURNACE_BACKEND");
  EXPECT_EQ(resolve_backend_name("auto"), "sim");
  try {
    make_backend("cuda", load_topology("laptop-4060"), nullptr);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    // Why, with the driver's and the runtime's versions (no driver on the build machines).
    const cuda::DriverStatus st = cuda::runtime_status();
    EXPECT_NE(st.kind, cuda::DriverStatus::Kind::ok);
    EXPECT_EQ(e.message(), "--backend cuda: " + cuda::explain(st) + "; or use --backend sim");
    EXPECT_NE(e.message().find("driver"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("CUDA runtime: " + cuda::cuda_version_string(CUDART_VERSION)), std::string::npos)
        << e.message();
  }
  if (saved) ::setenv("FURNACE_BACKEND", keep.c_str(), 1);
}

TEST(CudaBackendChoice, WithADeviceAutoIsCuda) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const char* saved = std::getenv("FURNACE_BACKEND");
  const std::string keep = saved ? saved : "";
  ::unsetenv("FURNACE_BACKEND");
  EXPECT_EQ(resolve_backend_name("auto"), "cuda");
  if (saved) ::setenv("FURNACE_BACKEND", keep.c_str(), 1);
}

// The sorting of cudaGetDeviceCount's answer (the wording is checked through the CLI with the
// stand-in runtime, tests/standin).
TEST(CudaDriverStatus, NoDriverOldDriverNoDeviceAndOthersAreToldApart) {
  using Kind = cuda::DriverStatus::Kind;
  EXPECT_EQ(cuda::classify(true, 2, false, false, 13000, 13000), Kind::ok);
  EXPECT_EQ(cuda::classify(true, 0, false, false, 13000, 13000), Kind::no_device);
  EXPECT_EQ(cuda::classify(false, 0, false, true, 13000, 13000), Kind::no_device);
  EXPECT_EQ(cuda::classify(false, 0, true, false, 0, 13000), Kind::no_driver);
  EXPECT_EQ(cuda::classify(false, 0, true, false, 12020, 13000), Kind::old_driver);
  EXPECT_EQ(cuda::classify(false, 0, false, false, 13000, 13000), Kind::other);
  EXPECT_EQ(cuda::cuda_version_string(12020), "12.2");
  EXPECT_EQ(cuda::cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda::cuda_version_string(0), "none");
  cuda::DriverStatus s;
  s.kind = Kind::other;
  s.error_name = "cudaErrorSystemDriverMismatch";
  s.error_text = "system has unsupported display driver / cuda driver combination";
  s.driver_version = 13000;
  s.runtime_version = 13000;
  EXPECT_EQ(cuda::explain(s),
            "the CUDA runtime cannot start (cudaGetDeviceCount: system has unsupported display driver / cuda "
            "driver combination (cudaErrorSystemDriverMismatch); driver supports CUDA 13.0, this build's CUDA "
            "runtime: 13.0)");
}

}  // namespace
}  // namespace furnace
