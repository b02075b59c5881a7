// nn::init: uniform_, normal_ and kaiming_uniform_ (see init.h for the math).
#include "nn/init.h"

#include <cmath>

#include "core/autograd.h"

namespace minidl::nn::init {

int64_t fan_in(const Tensor& w) {
  check_defined(w, "init::fan_in", "w");
  MINIDL_CHECK(w.dim() >= 2, "init::fan_in: expected a weight of rank >= 2 ([out, in, ...]), got shape ", w.shape());
  int64_t fan = w.size(1);
  for (int d = 2; d < w.dim(); ++d) fan *= w.size(d);
  return fan;
}

void uniform_(Tensor& t, double lo, double hi, Generator* gen) {
  check_defined(t, "init::uniform_", "t");
  Tensor values = uniform(t.shape(), lo, hi, t.options(), gen);
  NoGradGuard no_grad;
  t.copy_(values);
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_defined(t, "init::normal_", "t");
  MINIDL_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0,
               "init::normal_: expected a finite mean and std >= 0, got mean ", mean, " and std ", std, " for shape ",
               t.shape());
  Tensor values = randn(t.shape(), t.options(), gen);  // N(0, 1)
  NoGradGuard no_grad;
  t.copy_(values * std + mean);
}

void kaiming_uniform_(Tensor& w, double a, Generator* gen) {
  const int64_t fan = fan_in(w);
  MINIDL_CHECK(fan > 0, "init::kaiming_uniform_: fan_in is 0 for weight shape ", w.shape());
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan));
  uniform_(w, -bound, bound, gen);
}

}  // namespace minidl::nn::init
