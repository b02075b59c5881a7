// The process-wide GEMM choice of gemm_impl.h: an atomic, read from MINIDL_GEMM on first use.
#include "kernels/cuda/gemm/gemm_impl.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace minidl {

namespace {

GemmImpl gemm_impl_from_environment() {
  const char* v = std::getenv("MINIDL_GEMM");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "native") == 0) return GemmImpl::Native;
  if (std::strcmp(v, "simt") == 0) return GemmImpl::Simt;
  if (std::strcmp(v, "cublas") == 0) return GemmImpl::Cublas;
  throw Error(std::string("MINIDL_GEMM='") + v + "': expected \"native\", \"simt\" or \"cublas\"");
}

std::atomic<GemmImpl>& gemm_setting() {
  static std::atomic<GemmImpl> setting{gemm_impl_from_environment()};
  return setting;
}

}  // namespace

GemmImpl gemm_impl() { return gemm_setting().load(std::memory_order_relaxed); }
void set_gemm_impl(GemmImpl impl) { gemm_setting().store(impl, std::memory_order_relaxed); }
const char* gemm_impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::Native: return "native";
    case GemmImpl::Simt: return "simt";
    case GemmImpl::Cublas: return "cublas";
  }
  return "?";
}

}  // namespace minidl
