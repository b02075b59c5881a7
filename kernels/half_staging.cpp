// Float32 stand-ins for 16-bit tensors (half_staging.h has the why).
#include "kernels/half_staging.h"

#include "core/backend.h"
#include "core/autograd.h"

namespace minidl {

namespace {
bool is_staged(const Tensor& t) { return t.defined() && is_half(t.dtype()); }

// A float32 copy of a 16-bit tensor (contiguous, whatever t's strides), made by t's own device.
Tensor widened(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor src = t.contiguous();
  Tensor f = empty(t.shape(), TensorOptions(DType::Float32, t.device()));
  if (f.numel() > 0) backend_for(t.device()).cast(src, f);
  return f;
}
}  // namespace

bool HalfStaging::needed(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (is_staged(*t)) return true;
  return false;
}

bool HalfStaging::needed(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (is_staged(t)) return true;
  return false;
}

const Tensor& HalfStaging::in(const Tensor& t) {
  if (!is_staged(t)) return t;
  return inputs_.emplace_back(widened(t));
}

Tensor& HalfStaging::out(Tensor& t) {
  if (!is_staged(t)) return t;
  return outputs_.emplace_back(&t, empty(t.shape(), TensorOptions(DType::Float32, t.device()))).second;
}

Tensor& HalfStaging::inout(Tensor& t) {
  if (!is_staged(t)) return t;
  return outputs_.emplace_back(&t, widened(t)).second;
}

std::vector<Tensor> HalfStaging::in(const std::vector<Tensor>& ts) {
  std::vector<Tensor> staged;
  staged.reserve(ts.size());
  for (const Tensor& t : ts) staged.push_back(is_staged(t) ? widened(t) : t);
  return staged;
}

std::vector<Tensor>& HalfStaging::inout(std::vector<Tensor>& ts) {
  list_outputs_.emplace_back(&ts, lists_.size());
  return lists_.emplace_back(in(ts));
}

// Each output is rounded by its own device; a 16-bit output is contiguous (the backends' methods
// write contiguous outputs), so the cast writes it whole.
void HalfStaging::commit() {
  for (auto& [target, buffer] : outputs_)
    if (buffer.numel() > 0) backend_for(target->device()).cast(buffer, *target);
  for (auto& [targets, index] : list_outputs_) {
    std::vector<Tensor>& buffers = lists_[index];
    for (size_t i = 0; i < targets->size(); ++i)
      if (is_staged((*targets)[i]) && buffers[i].numel() > 0)
        backend_for((*targets)[i].device()).cast(buffers[i], (*targets)[i]);
  }
}

}  // namespace minidl
