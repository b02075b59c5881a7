// The op layer's one question to a backend (core/backend.h): does it compute in this dtype?
// A "no" becomes the user-facing error here, so no backend has to re-check dtypes itself.
// Also the scope guard over Backend::make_current / restore_current, and the default answer to
// a graph capture (no graphs where ops run synchronously).
#include "core/backend.h"

#include <string>

namespace minidl {

void check_backend_computes(const Tensor& t, const char* op, const char* arg) {
  const Backend& be = backend_for(t.device());
  if (be.computes_in(op, t.dtype())) return;
  std::string supported;
  for (DType d : all_dtypes) {
    if (!be.computes_in(op, d)) continue;
    supported += supported.empty() ? "" : " and ";
    supported += dtype_name(d);
  }
  throw Error(detail::make_message(op, ": argument '", arg, "' is ", t.dtype(), " with shape ", t.shape(), " on ",
                                   t.device(), ", but ", t.device(), " computes ", op, " in ", supported,
                                   " only; convert it with .to(dtype) or move it to a device that computes in ",
                                   t.dtype()));
}

// The default: a backend that runs each op as it is called (the CPU) has nothing to capture.
void Backend::begin_capture() {
  throw Error("CUDAGraph::capture_begin: the CPU runs every op synchronously as it is called, so there is no queue "
              "of work to record; CUDA graphs need a CUDA device");
}

std::unique_ptr<CapturedGraph> Backend::end_capture() {
  throw Error("graph capture: end_capture without a capture under way on this device");
}

CurrentDeviceGuard::CurrentDeviceGuard(Device device) : backend_(&backend_for(device)) {
  previous_ = backend_->make_current();
}

CurrentDeviceGuard::CurrentDeviceGuard(Device device, Quiet) noexcept {
  try {
    backend_ = &backend_for(device);
  } catch (...) {
    return;  // no backend, nothing made current: the calls that follow fail on their own
  }
  previous_ = backend_->make_current_quietly();
}

CurrentDeviceGuard::~CurrentDeviceGuard() {
  if (backend_ != nullptr && previous_ >= 0) backend_->restore_current(previous_);
}

}  // namespace minidl
