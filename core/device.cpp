// Device parsing/printing, device discovery, and the backend registry (one switch).
#include "core/device.h"

#include <sstream>

#include <charconv>

#include "core/backend.h"
#include "core/error.h"

namespace minidl {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = Device::cpu();
    return;
  }
  if (spec == "cuda") {
    *this = Device::cuda(0);
    return;
  }
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    int index = -1;
    const char* first = spec.data() + 5;
    const char* last = spec.data() + spec.size();
    auto [ptr, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && ptr == last && index >= 0) {
      *this = Device::cuda(index);
      return;
    }
  }
  throw Error("Device: cannot parse '" + spec + "'; expected \"cpu\", \"cuda\" or \"cuda:N\" with N >= 0");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

int cuda_device_count() { return cuda_backend_device_count(); }
bool cuda_is_available() { return cuda_device_count() > 0; }
std::string cuda_device_name(int index) {
  return index >= 0 && index < cuda_device_count() ? cuda_backend_device_name(index) : std::string();
}
std::string cuda_devices_summary() {
  const int n = cuda_device_count();
  std::ostringstream os;  // not string operator+: GCC 12 gives a false -Wrestrict on it at -O3
  os << "(" << n << " CUDA device(s)";
  if (n > 0) os << ": " << cuda_device_name(0);
  os << ")";
  return os.str();
}
Device default_device() { return cuda_is_available() ? Device::cuda(0) : Device::cpu(); }

Backend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU:
      return cpu_backend();
    case DeviceType::CUDA: {
      const int count = cuda_backend_device_count();
      MINIDL_CHECK(device.index < count, "backend: ", device, " is not available (", count,
                   " CUDA device(s) visible", count == 0 ? "; this build or machine has no usable GPU" : "", ")");
      Backend* b = cuda_backend(device.index);
      MINIDL_CHECK(b != nullptr, "backend: no CUDA backend for ", device);
      return *b;
    }
  }
  throw Error("backend: unknown device type");
}

}  // namespace minidl
