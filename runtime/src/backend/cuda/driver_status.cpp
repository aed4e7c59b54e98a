// backend/cuda/driver_status: the no-device wording (driver_status.h). No CUDA header here.
#include "backend/cuda/driver_status.h"

namespace furnace::cuda {

DriverStatus::Kind classify(bool success, int count, bool insufficient_driver, bool no_device,
                            int driver_version, int runtime_version) {
  using Kind = DriverStatus::Kind;
  if (success) return count > 0 ? Kind::ok : Kind::no_device;
  if (no_device) return Kind::no_device;
  // Without a driver the runtime says "insufficient" too; the driver version tells the two apart
  // (cudaDriverGetVersion gives 0 when no driver is installed).
  if (driver_version == 0) return Kind::no_driver;
  (void)runtime_version;  // a driver a minor version older may still run it (minor version compatibility)
  return insufficient_driver ? Kind::old_driver : Kind::other;
}

std::string cuda_version_string(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string explain(const DriverStatus& s) {
  using Kind = DriverStatus::Kind;
  const std::string runtime = cuda_version_string(s.runtime_version);
  const std::string driver = cuda_version_string(s.driver_version);
  const std::string why =
      s.error_name.empty() ? std::string("cudaGetDeviceCount: 0 devices")
                           : "cudaGetDeviceCount: " + s.error_text + " (" + s.error_name + ")";
  switch (s.kind) {
    case Kind::ok:
      return "";
    case Kind::no_driver:
      return "no NVIDIA driver is installed (" + why + "; driver: none, this build's CUDA runtime: " +
             runtime + "): install an NVIDIA driver that supports CUDA " + runtime +
             " or newer (nvidia-smi then names the CUDA version its driver supports)";
    case Kind::old_driver:
      return "the NVIDIA driver supports CUDA " + driver + ", older than this build's CUDA runtime " +
             runtime + " (" + why + "): update the driver to one that supports CUDA " + runtime +
             ", or rebuild with a CUDA toolkit no newer than " + driver;
    case Kind::no_device: {
      std::string line = "no CUDA-capable device is detected (" + why + "; driver supports CUDA " + driver +
                         ", this build's CUDA runtime: " + runtime + "): ";
      if (s.visible_devices_set)
        line += "CUDA_VISIBLE_DEVICES='" + s.visible_devices +
                "' leaves no GPU visible; unset it or name a GPU that `furnace devices` lists";
      else
        line += "the driver sees no GPU; check that nvidia-smi lists one";
      return line;
    }
    case Kind::other:
      break;
  }
  return "the CUDA runtime cannot start (" + why + "; driver supports CUDA " + driver +
         ", this build's CUDA runtime: " + runtime + ")";
}

}  // namespace furnace::cuda
