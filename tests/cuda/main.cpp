// The Catch2 main of the CUDA tests (binary minidl_cuda_tests). Without a usable GPU it
// prints why and exits 77, which ctest is told (SKIP_RETURN_CODE) means "skipped": a CUDA
// test is never reported as passed without having run. Listing the tests (what
// catch_discover_tests does at build time) works everywhere.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>

#include "core/device.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  if (!listing && !minidl::cuda_is_available()) {
    std::fprintf(stderr, "minidl_cuda_tests: skipped: no usable CUDA device (%s)\n",
#if defined(MINIDL_WITH_CUDA)
                 "the build has CUDA, this machine has no GPU or driver"
#else
                 "this build has no CUDA backend"
#endif
    );
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
