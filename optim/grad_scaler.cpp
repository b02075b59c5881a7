// GradScaler: the scale, the unscale pass and PyTorch's update rule (grad_scaler.h).
#include "optim/grad_scaler.h"

#include <cmath>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/ops/elementwise.h"

namespace minidl::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  MINIDL_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0, "GradScaler: init_scale ",
               options.init_scale, " must be finite and positive");
  MINIDL_CHECK(options.growth_factor > 1.0 && std::isfinite(options.growth_factor), "GradScaler: growth_factor ",
               options.growth_factor, " must be finite and above 1");
  MINIDL_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0, "GradScaler: backoff_factor ",
               options.backoff_factor, " must lie in (0, 1)");
  MINIDL_CHECK(options.growth_interval >= 1, "GradScaler: growth_interval ", options.growth_interval,
               " must be at least 1");
  scale_ = static_cast<float>(options.init_scale);
}

double GradScaler::get_scale() const { return options_.enabled ? scale_ : 1.0; }

Tensor GradScaler::scale(const Tensor& loss) const {
  check_defined(loss, "GradScaler::scale", "loss");
  if (!options_.enabled) return loss;
  // The scale as a float32 scalar, as torch keeps it: in float16 itself 65536 would be Inf. A
  // 16-bit loss is promoted to float32 by the product.
  return ops::mul(loss, full(Shape{}, scale_, loss.options().with_dtype(DType::Float32)));
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  MINIDL_CHECK(stage_ == Stage::Ready, "GradScaler::unscale_: already called for this step ",
               stage_ == Stage::Unscaled ? "(unscale_ twice before update())" : "(after step(), before update())");
  // PyTorch's inverse: the reciprocal in double, stored as float32.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  // The gradients by (device, dtype): one pass each.
  std::map<std::pair<std::string, DType>, std::vector<Tensor>> groups;
  std::map<std::string, Device> devices;
  for (const ParamGroup& group : opt.param_groups())
    for (const Tensor& p : group.params) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      MINIDL_CHECK(g.dtype() != DType::Float16, "GradScaler::unscale_: a float16 gradient of shape ", g.shape(),
                   "; loss scaling keeps float32 master weights (autocast casts them to float16 for the ops, and "
                   "their gradients return in float32)");
      MINIDL_CHECK(g.is_contiguous(), "GradScaler::unscale_: a non-contiguous gradient of shape ", g.shape());
      std::ostringstream name;
      name << g.device();
      groups[{name.str(), g.dtype()}].push_back(g);
      devices.emplace(name.str(), g.device());
    }
  bool found = false;
  NoGradGuard no_grad;
  for (auto& [key, grads] : groups) {
    const Device device = devices.at(key.first);
    Tensor flag = zeros(Shape{1}, TensorOptions(DType::Float32, device));
    backend_for(device).unscale_and_check_finite(grads, inv_scale, flag);
    found = found || flag.item() != 0.0;  // the host decides: one wait per device
  }
  found_inf_ = found;
  stage_ = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  MINIDL_CHECK(stage_ != Stage::Stepped, "GradScaler::step: step() called twice before update()");
  if (stage_ == Stage::Ready) unscale_(opt);
  stage_ = Stage::Stepped;
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  MINIDL_CHECK(stage_ != Stage::Ready, "GradScaler::update: no unscale_() or step() since the last update()");
  if (found_inf_) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    const auto grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  stage_ = Stage::Ready;
  found_inf_ = false;
}

GradScalerState GradScaler::state() const {
  return GradScalerState{scale_, growth_tracker_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval};
}

void GradScaler::load_state(const GradScalerState& s) {
  MINIDL_CHECK(s.growth_factor == options_.growth_factor && s.backoff_factor == options_.backoff_factor &&
                   s.growth_interval == options_.growth_interval,
               "GradScaler::load_state: the state was written with growth_factor ", s.growth_factor,
               ", backoff_factor ", s.backoff_factor, ", growth_interval ", s.growth_interval,
               "; this scaler has ", options_.growth_factor, ", ", options_.backoff_factor, ", ",
               options_.growth_interval);
  MINIDL_CHECK(std::isfinite(s.scale) && s.scale > 0, "GradScaler::load_state: scale ", s.scale,
               " must be finite and positive");
  MINIDL_CHECK(s.growth_tracker >= 0 && s.growth_tracker < options_.growth_interval,
               "GradScaler::load_state: growth tracker ", s.growth_tracker, " outside [0, ", options_.growth_interval,
               ")");
  scale_ = static_cast<float>(s.scale);
  growth_tracker_ = s.growth_tracker;
  stage_ = Stage::Ready;
  found_inf_ = false;
}

}  // namespace minidl::optim
