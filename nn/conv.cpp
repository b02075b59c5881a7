// nn::Conv2d: parameter set-up (PyTorch's reset_parameters order: weight, then bias) and a
// forward that calls ops::conv2d.
#include "nn/conv.h"

#include <cmath>
#include <typeinfo>

#include "core/ops/conv.h"
#include "nn/init.h"

namespace minidl::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options, Generator* gen)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  MINIDL_CHECK(in_channels > 0 && out_channels > 0 && kernel_size[0] > 0 && kernel_size[1] > 0 && options.groups > 0,
               "Conv2d: in_channels, out_channels, kernel_size and groups must be positive, got ", in_channels, ", ",
               out_channels, ", (", kernel_size[0], ", ", kernel_size[1], ") and ", options.groups);
  MINIDL_CHECK(in_channels % options.groups == 0 && out_channels % options.groups == 0, "Conv2d: in_channels ",
               in_channels, " and out_channels ", out_channels, " must be divisible by groups ", options.groups);
  Tensor w = empty(Shape{out_channels, in_channels / options.groups, kernel_size[0], kernel_size[1]});
  init::kaiming_uniform_(w, std::sqrt(5.0), gen);
  weight = register_parameter("weight", w);
  if (options.bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(w)));
    Tensor b = empty(Shape{out_channels});
    init::uniform_(b, -bound, bound, gen);
    bias = register_parameter("bias", b);
  }
}

std::string Conv2d::name() const {
  const Conv2dOptions& o = options_;
  return detail::make_message("Conv2d(", in_channels_, ", ", out_channels_, ", kernel_size=(", kernel_size_[0], ", ",
                              kernel_size_[1], "), stride=(", o.stride[0], ", ", o.stride[1], "), padding=(",
                              o.padding[0], ", ", o.padding[1], "), dilation=(", o.dilation[0], ", ", o.dilation[1],
                              "), groups=", o.groups, ", bias=", o.bias ? "true" : "false", ")");
}

std::shared_ptr<Module> Conv2d::clone() const {
  check_clone_is_exact(typeid(Conv2d), "Conv2d");
  Generator scratch;  // the initial values are overwritten: keep the default generator untouched
  auto copy = std::make_shared<Conv2d>(in_channels_, out_channels_, kernel_size_, options_, &scratch);
  copy->copy_state_from(*this);
  return copy;
}

Tensor Conv2d::forward(const Tensor& x) {
  check_defined(x, "Conv2d", "x");
  MINIDL_CHECK(x.dim() == 4 && x.shape()[1] == in_channels_, name(), ": expected input [N, ", in_channels_,
               ", H, W], got shape ", x.shape());
  return ops::conv2d(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups);
}

}  // namespace minidl::nn
