// gelu and its gradient (the formulas and how they are evaluated: kernels/cpu/gelu.cpp).
//   None: y = x·Φ(x),                 dy/dx = Φ(x) + x·φ(x)         (Φ, φ: the normal CDF and density)
//   Tanh: y = x·σ(2u), u = √(2/π)·(x + 0.044715·x³),
//         dy/dx = σ(2u) + 2x·σ(2u)·(1 − σ(2u))·u'               (0.5·(1 + tanh u) = σ(2u))
// Backward recomputes from the input x, which forward saves (as PyTorch does).
#include "core/ops/gelu.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl {

const char* gelu_approximate_name(GeluApproximate approximate) {
  switch (approximate) {
    case GeluApproximate::None: return "none";
    case GeluApproximate::Tanh: return "tanh";
  }
  return "?";
}

GeluApproximate gelu_approximate_from_name(const std::string& name) {
  if (name == "none") return GeluApproximate::None;
  if (name == "tanh") return GeluApproximate::Tanh;
  throw Error(detail::make_message("gelu: approximate must be 'none' or 'tanh', got '", name, "'"));
}

}  // namespace minidl

namespace minidl::ops {

namespace {

struct GeluBackward final : Node {
  Tensor x;  // the forward's input, contiguous
  GeluApproximate approximate = GeluApproximate::None;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dx = empty(x.shape(), x.options());
    if (dx.numel() > 0) backend_for(x.device()).gelu_backward(g.contiguous(), x, dx, approximate);
    return {dx};
  }
  void release_saved() override { x = Tensor(); }
  std::string name() const override { return "GeluBackward"; }
};

}  // namespace

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  profiler::RecordScope profile_scope("gelu", profiler::Kind::Op, {&x});
  check_defined(x, "gelu", "x");
  MINIDL_CHECK(is_floating(x.dtype()), "gelu: x must be a floating dtype (float32, float64, bfloat16, float16), got ", x.dtype(), " with shape ",
               x.shape());
  MINIDL_CHECK(approximate == GeluApproximate::None || approximate == GeluApproximate::Tanh,
               "gelu: approximate must be GeluApproximate::None or GeluApproximate::Tanh, got ",
               static_cast<int>(approximate));
  check_backend_computes(x, "gelu", "x");
  const Tensor xc = x.detach().contiguous();
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0) backend_for(x.device()).gelu_forward(xc, y, approximate);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<GeluBackward>();
    node->x = xc;
    node->approximate = approximate;
    autograd::attach(node, {&x}, y);
  }
  return y;
}

}  // namespace minidl::ops
