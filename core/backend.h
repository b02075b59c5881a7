// Backend: the interface between the ops (core/ops) and the kernels (kernels/<device>/).
// Core declares it; each kernels/ folder implements it for one device type, and core reaches
// the kernels only through backend_for(device).
//
// The contract. The op layer validates everything a user can get wrong and throws the
// user-facing minidl::Error: defined arguments, shapes, dtypes that agree, one device, index
// ranges; it makes inputs contiguous (unless a method's comment says strides are honoured)
// and allocates the outputs, so kernels only write. What a backend cannot do is asked of it
// once, by the op layer, before any work: computes_in(dtype) (check_backend_computes below
// turns a "no" into the error naming the op, device and dtype). A backend may then assume all
// of the above; where it restates an assumption it uses MINIDL_INTERNAL_ASSERT (core/error.h,
// debug builds only), never a second user-facing check. What only the backend can find out
// stays its own error to throw: a failed launch or API call, an allocation the device refuses,
// a size past what its kernels index (a grid dimension, cuBLAS's int).
// No layer above kernels/ casts a Backend& to a concrete backend: what it needs (the stream
// work is queued on, record_stream) is part of this interface.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/conv_geometry.h"
#include "core/ops/gelu.h"  // GeluApproximate
#include "core/tensor.h"

namespace minidl {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };
// "add", "sub", "mul", "div": the op's name in messages (ops::add is BinaryOp::Add).
constexpr const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "binary";
}

enum class Activation : uint8_t { None, ReLU };

// The op's message for a bad class target at `row` holding `value` (check_targets).
using TargetErrorMessage = std::function<std::string(int64_t row, int64_t value)>;

struct SGDConfig {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = true;  // the momentum buffer is initialised to the gradient on the first step
};

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW
  int64_t step = 1;                     // 1-based step count, for bias correction
};

// What a device's caching allocator holds (CUDA); see core/memory.h for the public calls.
struct MemoryStats {
  int64_t allocated_bytes = 0;       // in live tensors (rounded to the allocator's size classes)
  int64_t reserved_bytes = 0;        // obtained from the device: allocated + cached
  int64_t peak_allocated_bytes = 0;  // since start or reset_peak_memory_stats
  int64_t device_allocations = 0;    // cudaMalloc calls (cache misses)
  int64_t cache_hits = 0;            // allocations served from the cache
  int64_t cache_flushes = 0;         // times the cache was emptied to retry after an out-of-memory
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator() = 0;

  // ---- capabilities (asked by the op layer, see the contract above) ----
  // Whether the compute methods (elementwise math, reductions, products, the softmax family,
  // optimizer updates) run in `dtype` here. The memory, random and equal methods work for
  // every dtype a tensor on this device can have (core's empty() refuses the others).
  virtual bool computes_in(DType dtype) const = 0;

  // ---- memory ----
  // Copies src into dst; both contiguous, same dtype and numel. The devices may differ when
  // one of them is this backend's and the other is the CPU (host <-> device copies).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // dst[i...] = src[i...] for same-shape tensors with arbitrary strides (same device, dtype).
  virtual void strided_copy(const Tensor& src, Tensor& dst) = 0;
  // dst = src converted to dst's dtype (contiguous, same device and numel).
  virtual void cast(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& dst, double value) = 0;
  virtual void arange(Tensor& dst, double start, double step) = 0;
  // out[i, ...] = src[indices[i], ...]; src and out contiguous, indices int64 on this device
  // and already checked to be in range.
  virtual void gather_rows(const Tensor& src, const Tensor& indices, Tensor& out) = 0;

  // ---- random (Philox counters [offset, offset + numel), see core/philox.h) ----
  virtual void uniform(Tensor& dst, double low, double high, uint64_t seed, uint64_t offset) = 0;
  virtual void normal(Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset) = 0;
  virtual void randint(Tensor& dst, int64_t low, int64_t high, uint64_t seed, uint64_t offset) = 0;

  // ---- elementwise ----
  // out = a op b. out is contiguous; a and b have out's shape with any strides (stride 0
  // along broadcast dims) — the one kernel family that honours strides on its inputs.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  // dx = dy where y > 0 else 0 (y is the forward output).
  virtual void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  // out[i] = (a[i] == b[i]) as float32 0/1 (a, b same dtype).
  virtual void equal(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // ---- reductions; x viewed as [outer, n, inner], reduced over n ----
  virtual void sum_dim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) = 0;
  // out[row] = index of the (first) maximum of x's row [rows, cols], int64.
  virtual void argmax_rows(const Tensor& x, Tensor& out) = 0;

  // ---- linear algebra ----
  // C[M, N] = op(A) · op(B) with op = transpose when the flag is set.
  // A is [M, K] (or [K, M] when trans_a), B is [K, N] (or [N, K] when trans_b), all row-major.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) = 0;
  // y[N, M] = act(x[N, K] · W[M, K]ᵀ + b[M]); bias may be undefined.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, Activation act) = 0;
  // dx = dy·W, dW = dyᵀ·x, db = column sums of dy; each output may be undefined (not needed).
  virtual void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                               Tensor& db) = 0;

  // ---- softmax family, rows of [rows, cols] ----
  virtual void log_softmax_forward(const Tensor& x, Tensor& y) = 0;
  // dx = dy - softmax(x) * sum(dy) per row, from the forward output y = log_softmax(x).
  virtual void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  virtual void softmax_forward(const Tensor& x, Tensor& y) = 0;
  // dx = y * (dy - sum(dy * y)) per row, from the forward output y = softmax(x).
  virtual void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  // The first (row, value) with targets[row] outside [0, num_classes), if any (waits for it).
  virtual std::optional<std::pair<int64_t, int64_t>> find_invalid_target(const Tensor& targets,
                                                                         int64_t num_classes) = 0;
  // The op layer's target check: throws Error(message(row, value)) for the first row whose target
  // lies outside [0, num_classes). Here (the CPU) at once; a backend whose work is queued (CUDA)
  // checks on the device without waiting and throws at the next point where the host waits for
  // the device anyway: synchronize() or a copy to the CPU (item(), to_vector, .to(cpu)).
  virtual void check_targets(const Tensor& targets, int64_t num_classes, TargetErrorMessage message) {
    if (auto bad = find_invalid_target(targets, num_classes)) throw Error(message(bad->first, bad->second));
  }
  // loss[row] = logsumexp(logits[row]) - logits[row, target], as log s - (x_t - m) with m the
  // row's max and s = sum(exp(x - m)); stats [rows, 2] keeps (m, 1/s) per row for backward
  // (Note [softmax at the logits' scale] in core/ops/softmax.cpp).
  virtual void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss,
                                             Tensor& stats) = 0;
  // dlogits[row] = (softmax(logits[row]) - onehot(target)) * scale[row], softmax = exp(x - m) * (1/s)
  // from forward's stats; scale has one element per row, or one element broadcast to all rows.
  virtual void softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                              const Tensor& scale, Tensor& dlogits) = 0;

  // The training path (Note [fused cross-entropy] in core/ops/softmax.cpp), one pass per row:
  // loss[row] as in forward and dlogits[row] = (softmax(logits[row]) - onehot(target)) * scale.
  virtual void softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, double scale, Tensor& loss,
                                           Tensor& dlogits) = 0;

  // ---- optimizer updates (in place, outside autograd) ----
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) = 0;
  virtual void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const AdamConfig& cfg) = 0;

  // ---- device ----
  virtual void synchronize() {}
  // The queue this backend runs its work on, in order, as an opaque handle (a cudaStream_t for
  // CUDA); nullptr where work runs synchronously on the calling thread (the CPU). Code that
  // queues its own work beside the backend's (parallel/nccl) orders itself against it.
  virtual void* stream_handle() const { return nullptr; }
  // Marks t's memory as also used by work queued on `stream` (a handle of this device's kind):
  // when t's storage is freed, it is not handed out again before that work has finished
  // (Note [stream-aware frees] in kernels/cuda/caching_allocator.h). Nothing to do where work is
  // synchronous.
  virtual void record_stream(const Tensor& t, void* stream) {
    (void)t;
    (void)stream;
  }
  // The calling host thread's current device, for code that calls a device runtime itself
  // beside the backend (parallel/nccl: its events, streams and NCCL calls go to the current
  // CUDA device); use it through CurrentDeviceGuard below. make_current() makes this backend's
  // device the current one and returns a token for the device that was current before (CUDA:
  // cudaGetDevice, then cudaSetDevice; -1 when it already was current), throwing when the
  // device cannot be made current; make_current_quietly() does the same without ever throwing
  // (for destructors: -1 when it could not, and the runtime calls that follow fail and say
  // so); restore_current(token) puts the earlier device back and never throws. The CPU has no
  // current device: both return -1, and there is nothing to restore.
  virtual int make_current() { return -1; }
  virtual int make_current_quietly() noexcept { return -1; }
  virtual void restore_current(int previous) noexcept { (void)previous; }
  // Caching-allocator statistics and control; the CPU backend keeps no statistics and says so.
  virtual MemoryStats memory_stats() = 0;
  virtual void empty_cache() = 0;
  virtual void reset_peak_memory_stats() = 0;

  // ==== convolutional networks: NCHW convolution, pooling, batch norm, dropout ====
  // Geometry (core/conv_geometry.h) is checked by the op layer: output sizes >= 1, channels
  // divisible by groups, padding within what the window allows.
  // y = conv2d(x, w) + b[c_out]; x [N, C_in, H, W], w [C_out, C_in/groups, KH, KW], b may be
  // undefined. Lowered to the backend's GEMM through im2col (docs/conv-as-gemm.md).
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                              const Conv2dGeometry& g) = 0;
  // dx, dw, db from dy [N, C_out, H_out, W_out]; each output may be undefined (not needed).
  virtual void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                               Tensor& db, const Conv2dGeometry& g) = 0;
  // y = the maximum of each window (padding never wins); indices (int64, y's shape) holds the
  // flat position ih·W + iw of that maximum in its input plane, the first one on ties.
  virtual void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dGeometry& g) = 0;
  // dx = 0, then dx[plane][indices] += dy (overlapping windows add up).
  virtual void max_pool2d_backward(const Tensor& dy, const Tensor& indices, Tensor& dx, const Pool2dGeometry& g) = 0;
  virtual void avg_pool2d_forward(const Tensor& x, Tensor& y, const Pool2dGeometry& g) = 0;
  virtual void avg_pool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dGeometry& g) = 0;
  // Batch norm over x [N, C, S] (S = H·W) per channel c. training: mean and biased variance
  // over (N, S) normalise x; running_mean/var (when defined) become (1 − momentum)·running +
  // momentum·batch, with the unbiased variance. Evaluation: the running statistics normalise.
  // y = (x − mean)·invstd·weight[c] + bias[c] (weight, bias may be undefined: 1 and 0);
  // save_mean and save_invstd [C] receive the mean and 1/sqrt(var + eps) that were used.
  virtual void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                                  Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                                  Tensor& save_mean, Tensor& save_invstd) = 0;
  // Gradients from the saved mean/invstd; training says whether they were batch statistics
  // (which then depend on x) or constants. dx, dweight, dbias may be undefined.
  virtual void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                   const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight,
                                   Tensor& dbias) = 0;
  // mask[i] = 1/(1 − p) where Philox counter offset + i gives a uniform u < 1 − p, else 0
  // (inverted dropout; p = 1 gives all zeros). mask is float32 or float64.
  virtual void dropout_mask(Tensor& mask, double p, uint64_t seed, uint64_t offset) = 0;

  // ==== transformer layers: layer norm, GELU, embedding ====
  // Layer norm over each row of x [rows, D] (D >= 1): mean_r and the biased variance var_r of
  // the row, rstd_r = 1/sqrt(var_r + eps), y = (x − mean_r)·rstd_r·weight + bias (weight and
  // bias [D] may be undefined: 1 and 0); mean and rstd [rows] receive the statistics backward reads.
  virtual void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                                  Tensor& mean, Tensor& rstd) = 0;
  // From dy [rows, D] and forward's mean and rstd, with x̂ = (x − mean)·rstd and g = dy·weight:
  //   dx = rstd·(g − Σ_j g / D − x̂·Σ_j g·x̂ / D),  dweight = Σ_rows dy·x̂,  dbias = Σ_rows dy.
  // Each output may be undefined (not needed); dweight and dbias are zeros when rows = 0.
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) = 0;
  // y = gelu(x) elementwise in the given form (core/ops/gelu.h); x and y contiguous, same shape.
  virtual void gelu_forward(const Tensor& x, Tensor& y, GeluApproximate approximate) = 0;
  // dx = dy·gelu'(x), from the forward's input x.
  virtual void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate) = 0;
  // out[i, :] = weight[indices[i], :] for indices [N] int64, weight [V, D], out [N, D]. The op layer
  // checked the indices with check_targets; where that check is deferred (CUDA), an index outside
  // [0, V) can reach the kernel before its error reaches the host: its row of out is NaN, and
  // nothing is read out of bounds.
  virtual void embedding_forward(const Tensor& indices, const Tensor& weight, Tensor& out) = 0;
  // dweight [V, D] = for each v, the sum of the rows dy[i, :] with indices[i] = v, added in
  // increasing i, starting from 0 (a row no index names is 0). No floating-point atomics: the same
  // bits every run, and for one dtype the same bits on every backend (the same additions in the
  // same order).
  // An index outside [0, V) (see embedding_forward) adds nothing.
  virtual void embedding_backward(const Tensor& dy, const Tensor& indices, Tensor& dweight) = 0;

  // ==== batched matrix products and masks (the GPT's attention and its causal mask) ====
  // A strided-batched product C[i] = op(A[i]) · op(B[i]) for i < batch. Matrix i of A starts
  // stride_a elements after a's first element times i (stride 0: one matrix serves the whole
  // batch, a broadcast); it is [M, K] row-major with row stride lda (>= K), or [K, M] with row
  // stride lda (>= M) when trans_a, so op(A) = Aᵀ reads a transposed view in place. B likewise:
  // [K, N] or, when trans_b, [N, K], with ldb. C is contiguous [batch, M, N]. The op layer
  // passes M, N, K >= 1 and batch >= 1, operands on this device in c's dtype.
  struct BatchedMatmul {
    int64_t batch = 1, m = 0, n = 0, k = 0;
    int64_t stride_a = 0, lda = 0;
    bool trans_a = false;
    int64_t stride_b = 0, ldb = 0;
    bool trans_b = false;
  };
  virtual void matmul_batched(const Tensor& a, const Tensor& b, Tensor& c, const BatchedMatmul& p) = 0;
  // y[i, r, c] = x[i, r, c] where the element lies on the kept side of diagonal `diagonal`, else
  // 0: kept is c − r <= diagonal (lower, tril) or c − r >= diagonal (upper, triu). x and y
  // contiguous [batch, R, C], distinct tensors.
  virtual void triangle(const Tensor& x, Tensor& y, int64_t diagonal, bool upper) = 0;
  // y[i] = mask[i] != 0 ? value : x[i]; x and y contiguous, mask of their shape and dtype with
  // any strides (0 along the dims it is broadcast along: a causal [T, T] mask over [B, H, T, T]).
  virtual void masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& y) = 0;
};

// The backend that owns `device`'s memory and kernels; throws when there is none (for
// example cuda:0 in a build without CUDA, or a CUDA index beyond the device count).
Backend& backend_for(Device device);

// Makes `device` the calling host thread's current device for a scope and restores the
// previous one when the scope ends (Backend::make_current; nothing happens for the CPU). The
// Quiet form is for destructors and noexcept paths: it never throws.
class CurrentDeviceGuard {
 public:
  struct Quiet {};
  explicit CurrentDeviceGuard(Device device);
  CurrentDeviceGuard(Device device, Quiet) noexcept;
  ~CurrentDeviceGuard();
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  Backend* backend_ = nullptr;
  int previous_ = -1;
};

// The op layer's capability check: throws the user-facing error naming `op`, the argument,
// its device, dtype and shape, and the dtypes that device computes in, unless t's backend
// computes in t's dtype. Called once per op, on the argument whose dtype the op computes in.
void check_backend_computes(const Tensor& t, const char* op, const char* arg);

// Defined by kernels/cpu.
Backend& cpu_backend();
// Defined by kernels/cuda, or by kernels/no_cuda.cpp in a build without CUDA (then it
// returns nullptr and the device count is 0).
Backend* cuda_backend(int device_index);
int cuda_backend_device_count();
std::string cuda_backend_device_name(int device_index);  // index < cuda_backend_device_count()
// Page-locked host memory for CPU tensors headed to a GPU (async copies); nullptr without CUDA.
Allocator* cuda_pinned_host_allocator();

}  // namespace minidl
