// Device: where a tensor's memory lives — the CPU or one CUDA device by index.
// Parsed from and printed as "cpu", "cuda", "cuda:1" like PyTorch.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace minidl {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  // Parses "cpu", "cuda", "cuda:N"; throws minidl::Error on anything else.
  explicit Device(const std::string& spec);
  Device(const char* spec) : Device(std::string(spec)) {}

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int i = 0) { return Device(DeviceType::CUDA, i); }

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;

  friend bool operator==(const Device&, const Device&) = default;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// False/0 on a build without CUDA and on a machine without a usable GPU.
bool cuda_is_available();
int cuda_device_count();
// The device's name as its driver reports it ("NVIDIA H200", or the simulated device's name on a
// build against cudasim/, which says that it runs on the CPU); "" if there is no such device.
std::string cuda_device_name(int index);
// "(N CUDA device(s): <name of cuda:0>)", or "(0 CUDA device(s))": the line the samples print first.
std::string cuda_devices_summary();

// CUDA device 0 when one is available, the CPU otherwise (what the seed tutorial picks).
Device default_device();

}  // namespace minidl
