// operator<< for Tensor, printing like PyTorch: tensor([[ 1.0000, -2.5000]], requires_grad=True)
// Floats use 4 decimals (scientific when the magnitude is extreme); long dims are summarised.
#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/autograd.h"
#include "core/ops/view.h"

namespace minidl {

namespace {

struct Format {
  bool integral = false;
  bool scientific = false;
  int width = 1;
};

std::string format_value(double v, const Format& f) {
  std::ostringstream os;
  if (f.integral) {
    os << static_cast<int64_t>(v);
  } else if (f.scientific) {
    os << std::scientific << std::setprecision(4) << v;
  } else {
    os << std::fixed << std::setprecision(4) << v;
  }
  std::string s = os.str();
  if (static_cast<int>(s.size()) < f.width) s.insert(0, static_cast<size_t>(f.width) - s.size(), ' ');
  return s;
}

void print_dim(std::ostream& os, const Tensor& t, int d, int64_t offset, const Format& f, int indent) {
  const int64_t n = t.shape()[d];
  const bool summarise = t.numel() > 1000 && n > 6;
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && i == 3) {
      os << (d + 1 == t.dim() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - 4;
      continue;
    }
    const int64_t off = offset + i * t.strides()[d];
    if (d + 1 == t.dim()) {
      os << format_value(t.data<double>()[off], f);
    } else {
      print_dim(os, t, d + 1, off, f, indent + 1);
    }
    if (i + 1 < n) os << (d + 1 == t.dim() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  NoGradGuard no_grad;
  // Print from a contiguous float64 copy on the host (exact for every floating dtype and for labels).
  const Tensor host = t.detach().to(Device::cpu(), DType::Float64).contiguous();
  const double* values = host.data<double>();
  Format f;
  f.integral = t.dtype() == DType::Int64;
  // One format for all elements (PyTorch does the same), from the largest magnitude.
  double max_abs = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    if (std::isfinite(values[i])) max_abs = std::max(max_abs, std::fabs(values[i]));
  f.scientific = !f.integral && (max_abs >= 1e8 || (max_abs > 0 && max_abs < 1e-4));
  for (int64_t i = 0; i < host.numel(); ++i)
    f.width = std::max(f.width, static_cast<int>(format_value(values[i], Format{f.integral, f.scientific, 1}).size()));
  os << "tensor(";
  if (host.dim() == 0) {
    os << format_value(host.item(), Format{f.integral, f.scientific, 1});
  } else {
    print_dim(os, host, 0, 0, f, 7);
  }
  if (t.device().is_cuda()) os << ", device='" << t.device() << "'";
  if (t.dtype() != DType::Float32 && t.dtype() != DType::Int64) os << ", dtype=" << t.dtype();
  if (t.grad_fn()) os << ", grad_fn=<" << t.grad_fn()->name() << ">";
  else if (t.requires_grad()) os << ", requires_grad=True";
  return os << ')';
}

}  // namespace minidl
