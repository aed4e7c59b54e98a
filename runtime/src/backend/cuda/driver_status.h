// backend/cuda/driver_status: why the CUDA runtime has no device, in one line a user can act on.
// The CUDA side (cuda_backend.cu, runtime_status()) fills a DriverStatus from cudaGetDeviceCount,
// cudaDriverGetVersion and cudaRuntimeGetVersion; the wording here is plain C++ so it is tested
// for any pair of versions. Not here: the devices themselves (cuda_backend.h).
#pragma once

#include <string>

namespace furnace::cuda {

struct DriverStatus {
  enum class Kind {
    ok,          // cudaGetDeviceCount succeeded with at least one device
    no_driver,   // no NVIDIA driver installed: cudaDriverGetVersion reports 0
    old_driver,  // the driver's CUDA version is older than this build's runtime
    no_device,   // a driver, no visible device (cudaErrorNoDevice, or a count of 0)
    other,       // any other failure of the runtime's start
  };
  Kind kind = Kind::other;
  int device_count = 0;
  std::string error_name;  // "cudaErrorInsufficientDriver"; empty when cudaGetDeviceCount succeeded
  std::string error_text;  // cudaGetErrorString's text
  int driver_version = 0;  // cudaDriverGetVersion: 12020 is CUDA 12.2; 0: no driver
  int runtime_version = 0; // cudaRuntimeGetVersion: this build's CUDA runtime
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES
  bool visible_devices_set = false;
};

// Sorts a failed or empty cudaGetDeviceCount into a Kind. `insufficient_driver` and `no_device`
// say whether the status was cudaErrorInsufficientDriver / cudaErrorNoDevice.
DriverStatus::Kind classify(bool success, int count, bool insufficient_driver, bool no_device,
                            int driver_version, int runtime_version);

// "13.0" for 13000; "none" for 0.
std::string cuda_version_string(int version);

// Why there is no device and what to do, one line without a prefix, e.g. "no NVIDIA driver is
// installed (cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version;
// driver: none, this build's CUDA runtime: 13.0): install an NVIDIA driver that supports CUDA
// 13.0 or newer (nvidia-smi then names the CUDA version its driver supports)". Empty for ok.
std::string explain(const DriverStatus& s);

}  // namespace furnace::cuda
