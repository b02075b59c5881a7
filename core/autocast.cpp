// Autocast's state, its op table and the cast cache (autocast.h has the semantics).
#include "core/autocast.h"

#include <cstring>
#include <memory>
#include <unordered_map>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/view.h"

namespace minidl {

namespace {

using P = AutocastPolicy;

// The one table: which policy each op follows on each device type. PyTorch's lists
// (aten/src/ATen/autocast_mode.h and .cpp), restricted to the ops minidl has; where minidl
// departs from them the comment says why. An op not named here runs in its inputs' dtype.
const std::vector<autocast::OpPolicy> kAutocastOps = {
    //  op                              CPU                CUDA
    {"matmul", P::LowerPrecision, P::LowerPrecision},
    {"linear", P::LowerPrecision, P::LowerPrecision},
    {"conv2d", P::LowerPrecision, P::LowerPrecision},
    {"scaled_dot_product_attention", P::LowerPrecision, P::LowerPrecision},
    // PyTorch's CUDA list runs these in float32; its CPU kernels keep a float32 accumulator
    // for 16-bit inputs and write 16-bit results, so the CPU list leaves them alone.
    {"softmax", P::None, P::Float32},
    {"log_softmax", P::None, P::Float32},
    {"sum", P::None, P::Float32},
    {"mean", P::None, P::Float32},
    {"softmax_cross_entropy", P::Float32, P::Float32},  // cross_entropy, CrossEntropyLoss
    {"mse_loss", P::Float32, P::Float32},
    // PyTorch runs these two on 16-bit inputs with float32 weights (a mixed-dtype kernel) on
    // both devices (layer_norm is on the CUDA float32 list); minidl's kernels take one dtype,
    // so a 16-bit input is cast to float32, the dtype of the weights and statistics.
    {"layer_norm", P::Float32, P::Float32},
    {"batch_norm", P::Float32, P::Float32},
};

constexpr int kSlots = 2;  // one autocast state per device type: CPU, CUDA
int slot_of(Device d) { return d.is_cpu() ? 0 : 1; }

thread_local autocast::State t_state;
thread_local int t_nesting = 0;  // live AutocastGuards on this thread

// The cast cache: source TensorImpl -> (a weak handle proving the source is still that tensor,
// the cast). Keyed by the source's address, which stays valid while the weak handle is alive.
struct CachedCast {
  std::weak_ptr<TensorImpl> source;
  Tensor cast;
};
thread_local std::unordered_map<const TensorImpl*, CachedCast> t_cache;

bool eligible(const Tensor& t, Device device) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::Float64 &&
         t.device().type == device.type;
}

// The cast of t to `to`, from the cache where autocast caches it (PyTorch's rule: a 16-bit cast
// of a float32 leaf that requires grad).
Tensor cached_to(const Tensor& t, DType to) {
  // Not under no_grad: that cast has no autograd node, and served later in the same scope with
  // gradients on it would cut the weight off from its gradient (a pitfall of PyTorch's cache).
  const bool cacheable = t_state.cache_enabled && grad_mode_enabled() && is_half(to) && t.dtype() == DType::Float32 &&
                         t.requires_grad() && t.is_leaf();
  if (!cacheable) return ops::to(t, t.device(), to);
  auto it = t_cache.find(t.impl());
  if (it != t_cache.end()) {
    if (!it->second.source.expired() && it->second.source.lock().get() == t.impl() &&
        it->second.cast.dtype() == to)
      return it->second.cast;
    t_cache.erase(it);
  }
  Tensor cast = ops::to(t, t.device(), to);
  t_cache.emplace(t.impl(), CachedCast{t.impl_ptr(), cast});
  return cast;
}

}  // namespace

const char* autocast_policy_name(AutocastPolicy p) {
  switch (p) {
    case P::None: return "inputs' dtype";
    case P::LowerPrecision: return "lower precision";
    case P::Float32: return "float32";
    case P::Promote: return "promote";
  }
  return "?";
}

AutocastGuard::AutocastGuard(Device device, DType dtype, bool enabled, bool cache_enabled)
    : slot_(slot_of(device)) {
  MINIDL_CHECK(is_half(dtype), "AutocastGuard: dtype ", dtype, " on ", device,
               "; autocast runs ops in bfloat16 or float16 (float32 is the default outside it)");
  previous_enabled_ = t_state.enabled[slot_];
  previous_dtype_ = t_state.dtype[slot_];
  previous_cache_ = t_state.cache_enabled;
  t_state.enabled[slot_] = enabled;
  t_state.dtype[slot_] = dtype;
  t_state.cache_enabled = cache_enabled;
  ++t_nesting;
}

AutocastGuard::AutocastGuard(Device device)
    : AutocastGuard(device, device.is_cpu() ? DType::BFloat16 : DType::Float16) {}

AutocastGuard::~AutocastGuard() {
  t_state.enabled[slot_] = previous_enabled_;
  t_state.dtype[slot_] = previous_dtype_;
  t_state.cache_enabled = previous_cache_;
  if (--t_nesting == 0) t_cache.clear();  // the weights change before the next forward
}

namespace autocast {

bool is_enabled(Device device) { return t_state.enabled[slot_of(device)]; }
DType dtype(Device device) { return t_state.dtype[slot_of(device)]; }

const std::vector<OpPolicy>& table() { return kAutocastOps; }

AutocastPolicy policy_for(const char* op, Device device) {
  for (const OpPolicy& row : kAutocastOps)
    if (std::strcmp(row.op, op) == 0) return device.is_cpu() ? row.cpu : row.cuda;
  return P::None;
}

std::optional<std::vector<Tensor>> cast_inputs(const char* op, std::initializer_list<const Tensor*> inputs) {
  // The device: the first defined floating input's (the op itself checks that they agree).
  const Tensor* first = nullptr;
  for (const Tensor* t : inputs)
    if (t->defined() && is_floating(t->dtype())) {
      first = t;
      break;
    }
  if (!first || !is_enabled(first->device())) return std::nullopt;
  const Device device = first->device();
  const AutocastPolicy policy = policy_for(op, device);
  if (policy == P::None) return std::nullopt;
  DType target = DType::Float32;
  if (policy == P::LowerPrecision) target = dtype(device);
  if (policy == P::Promote) {
    // The widest eligible dtype: float32 over the 16-bit ones; bfloat16 with float16 is float32.
    bool any = false;
    for (const Tensor* t : inputs) {
      if (!eligible(*t, device)) continue;
      if (!any) target = t->dtype();
      else if (t->dtype() != target) target = DType::Float32;
      any = true;
    }
  }
  bool changes = false;
  for (const Tensor* t : inputs) changes = changes || (eligible(*t, device) && t->dtype() != target);
  if (!changes) return std::nullopt;
  std::vector<Tensor> cast;
  cast.reserve(inputs.size());
  for (const Tensor* t : inputs)
    cast.push_back(eligible(*t, device) && t->dtype() != target ? cached_to(*t, target) : *t);
  return cast;
}

size_t cache_size() { return t_cache.size(); }
void clear_cache() { t_cache.clear(); }

State capture() { return t_state; }

Scope::Scope(const State& state) : previous_(t_state) {
  t_state = state;
  ++t_nesting;
}
Scope::~Scope() {
  t_state = previous_;
  if (--t_nesting == 0) t_cache.clear();
}

}  // namespace autocast
}  // namespace minidl
