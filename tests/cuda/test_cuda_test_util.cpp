// The comparison rule of the CUDA tests' helpers (cuda_test_util.h): a non-finite value on
// either side passes only against the same value, so a kernel that gives NaN where the CPU
// gives +inf (or -inf where it gives +inf) fails the test that compares them.
#include "cuda_test_util.h"

#include <limits>

using namespace minidl::cuda_test;

TEST_CASE("check_close matches NaN only with NaN and an infinity only with the same infinity", "[cuda][util]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(same_nonfinite(nan, nan));
  CHECK(same_nonfinite(inf, inf));
  CHECK(same_nonfinite(-inf, -inf));
  CHECK_FALSE(same_nonfinite(nan, inf));
  CHECK_FALSE(same_nonfinite(inf, nan));
  CHECK_FALSE(same_nonfinite(nan, -inf));
  CHECK_FALSE(same_nonfinite(inf, -inf));
  CHECK_FALSE(same_nonfinite(-inf, inf));
  CHECK_FALSE(same_nonfinite(nan, 1.0f));
  CHECK_FALSE(same_nonfinite(1.0f, nan));
  CHECK_FALSE(same_nonfinite(inf, 3.4e38f));
  CHECK_FALSE(same_nonfinite(3.4e38f, inf));
}
