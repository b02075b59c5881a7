// clip_grad_norm_: one multi-tensor reduction for the total norm, one multi-tensor scaling by the
// coefficient it implies (Backend::multi_tensor_norm, multi_tensor_clip), both on the gradients'
// device, so the coefficient never travels to the host.
#include "nn/clip_grad.h"

#include <cmath>

#include "core/backend.h"

namespace minidl::nn {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  constexpr const char* op = "clip_grad_norm_";
  MINIDL_CHECK(norm_type > 0.0 && !std::isnan(norm_type), op, ": norm_type must be > 0 (or +inf), got ", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return scalar_tensor(0.0);
  const Tensor& first = grads.front();
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    MINIDL_CHECK(g.device() == first.device() && g.dtype() == first.dtype(), op, ": gradient ", i, " is ", g.dtype(),
                 " on ", g.device(), " but gradient 0 is ", first.dtype(), " on ", first.device(),
                 "; all gradients must share one device and dtype");
    MINIDL_CHECK(g.is_contiguous(), op, ": gradient ", i, " with shape ", g.shape(), " is not contiguous");
  }
  MINIDL_CHECK(is_floating(first.dtype()), op, ": gradients must be floating, got ", first.dtype());
  check_backend_computes(first, op, "gradients");
  Backend& be = backend_for(first.device());
  Tensor total = empty(Shape{}, first.options());
  be.multi_tensor_norm(grads, norm_type, total);
  be.multi_tensor_clip(grads, total, max_norm);
  return total;
}

}  // namespace minidl::nn
