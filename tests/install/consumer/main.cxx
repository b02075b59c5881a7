// The install-test consumer: y = x·Wᵀ + b through the installed minidl, checked by hand.
// Exits 0 when the value matches, 1 otherwise (minidl errors propagate as a non-zero exit).
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"

int main() {
  using namespace minidl;
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});  // [N=2, K=3]
  Tensor w = from_vector<float>({1, 0, -1, 2, 1, 0}, Shape{2, 3});  // [M=2, K=3]
  Tensor b = from_vector<float>({0.5f, -1.0f}, Shape{2});           // [M=2]
  Tensor y = ops::linear(x, w, b);                                  // [N=2, M=2]
  // y[1, 0] = 4·1 + 5·0 + 6·(-1) + 0.5 = -1.5; y[1, 1] = 4·2 + 5·1 + 6·0 - 1 = 12
  const double y10 = y.at({1, 0}), y11 = y.at({1, 1});
  std::printf("minidl consumer: y[1,0] = %g, y[1,1] = %g\n", y10, y11);
  // Small integers and halves are exact in float32, so the comparison can be exact-ish.
  return (std::fabs(y10 + 1.5) < 1e-6 && std::fabs(y11 - 12.0) < 1e-6) ? 0 : 1;
}
