// optim::GradScaler: dynamic loss scaling for float16 training, torch.amp.GradScaler's semantics.
//
// Why: float16 has 5 exponent bits. Its smallest subnormal is 2^-24 ≈ 6e-8 and its largest value
// 65504, and a model's gradients (1e-5 .. 1e-9 deep in a network) fall below that range and
// flush to zero in the 16-bit backward. Multiplying the loss by a large S (2^16 to start) lifts
// every gradient by S into range; the float32 gradients that reach the parameters are divided by
// S again before the optimizer sees them. Too large an S overflows to Inf somewhere: then the
// step is skipped and S halved; after growth_interval good steps in a row S doubles. bfloat16
// needs none of this: it has float32's 8 exponent bits and range (docs/mixed-precision.md).
//
//   GradScaler scaler;                       // enabled for float16; pass {.enabled = false} for bf16/fp32
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                    // optional: before clip_grad_norm_, so it sees true gradients
//   scaler.step(opt);                        // opt.step() unless an inf/NaN gradient was found
//   scaler.update();                         // backoff or growth of the scale
//
// The decision to skip is taken on the host: step() reads the device's found-inf flag, one wait
// per step. A CUDA graph cannot contain that wait, so fashion_mnist refuses --cuda-graph with fp16.
// unscale_ is one pass over all gradients of the optimizer (Backend::unscale_and_check_finite,
// one launch per device and dtype on CUDA). The state (scale, growth tracker) goes into
// checkpoints through state() / load_state().
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace minidl::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

// What a checkpoint keeps of a scaler (PyTorch's state_dict keys: scale, growth tracker and the
// options, which a resumed run must agree with).
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  bool is_enabled() const { return options_.enabled; }
  // The current scale (a float32 value, as PyTorch keeps it); 1 when disabled.
  double get_scale() const;
  // loss · scale (in the loss's dtype); the loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of `opt` by the scale in place, in one pass per device and dtype, and
  // notes whether any was inf or NaN. At most once between update()s; refused on float16
  // gradients (the master weights are float32: PyTorch refuses them too).
  void unscale_(Optimizer& opt);
  // unscale_ if it has not run, then opt.step() unless a gradient was inf or NaN. Returns whether
  // the optimizer stepped.
  bool step(Optimizer& opt);
  // After step: on an inf/NaN, scale ·= backoff_factor and the tracker restarts; else the tracker
  // counts the good step, and at growth_interval good steps in a row scale ·= growth_factor
  // (unless that would be Inf) and the tracker restarts.
  void update();

  int64_t growth_tracker() const { return growth_tracker_; }
  GradScalerState state() const;
  // Throws, changing nothing, when the state's options differ from this scaler's, or its scale is
  // not finite and positive, or its tracker negative.
  void load_state(const GradScalerState& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  GradScalerOptions options_;
  float scale_;  // float32, like torch's _scale tensor
  int64_t growth_tracker_ = 0;
  Stage stage_ = Stage::Ready;
  bool found_inf_ = false;  // in the current step
};

}  // namespace minidl::optim
