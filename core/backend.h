// Backend: the interface between the ops (core/ops) and the kernels (kernels/<device>/).
// Core declares it; each kernels/ folder implements it for one device type, and core reaches
// the kernels only through backend_for(device).
//
// The contract. The op layer validates everything a user can get wrong and throws the
// user-facing minidl::Error: defined arguments, shapes, dtypes that agree, one device, index
// ranges; it makes inputs contiguous (unless a method's comment says strides are honoured)
// and allocates the outputs, so kernels only write. What a backend cannot do is asked of it
// once, by the op layer, before any work: computes_in(op, dtype) (check_backend_computes below
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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/conv_geometry.h"
#include "core/ops/gelu.h"     // GeluApproximate
#include "core/ops/softmax.h"  // CrossEntropyOptions
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

// The activation a GEMM's epilogue applies (Backend::linear_forward). ReLU is applied in place;
// the GELU forms (core/ops/gelu.h) write two outputs, since GELU's backward needs its input: the
// pre-activation z, rounded to the output's dtype, and gelu(z) computed from that rounded z, so the
// bits are those of the product followed by a separate gelu. The CUDA GEMMs apply it in their
// epilogue, saving a pass over z; the CPU runs that separate pass (Note [GELU after the CPU GEMM,
// not in it] in kernels/cpu/linear.cpp).
enum class Activation : uint8_t { None, ReLU, GELU, GELUTanh };
inline bool is_gelu(Activation act) { return act == Activation::GELU || act == Activation::GELUTanh; }
inline GeluApproximate gelu_form(Activation act) {
  return act == Activation::GELUTanh ? GeluApproximate::Tanh : GeluApproximate::None;
}

// A point on a device stream's timeline (Backend::record_timestamp), for the profiler.
class DeviceTimestamp {
 public:
  virtual ~DeviceTimestamp() = default;
  // Milliseconds of device time from `earlier` (a timestamp of the same device) to this one;
  // waits until the device has reached both.
  virtual double ms_since(const DeviceTimestamp& earlier) const = 0;
  // The stream it was queued on (an opaque handle, as Backend::stream_handle).
  virtual void* stream() const = 0;
};

// The op's message for a bad class target at `row` holding `value` (check_targets).
using TargetErrorMessage = std::function<std::string(int64_t row, int64_t value)>;

using ops::CrossEntropyOptions;  // the loss methods' options (core/ops/softmax.h)

// Why a row of weights cannot be sampled (Backend::find_invalid_distribution).
enum class MultinomialDefect : uint8_t { Negative, NotFinite, ZeroSum, TooFewPositive };

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

// A graph of one device's captured work (Backend::end_capture), replayed as a whole: the public
// face is minidl::CUDAGraph (core/cuda_graph.h).
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  // Queues every captured kernel, copy and fill on the device's stream, in capture order, as one
  // launch; returns without waiting, like the ops.
  virtual void replay() = 0;
  // The graph's nodes (kernels, copies and fills).
  virtual int64_t nodes() const = 0;
};

// What a device's caching allocator holds (CUDA's, and the CPU allocator's block caches); see
// core/memory.h for the public calls.
struct MemoryStats {
  int64_t allocated_bytes = 0;       // in live tensors (rounded to the allocator's size classes)
  int64_t reserved_bytes = 0;        // obtained from the device (or the system): allocated + cached
  int64_t peak_allocated_bytes = 0;  // since start or reset_peak_memory_stats
  int64_t device_allocations = 0;    // cudaMalloc calls, or on the CPU system allocations (cache misses)
  int64_t cache_hits = 0;            // allocations served from the cache
  int64_t cache_flushes = 0;         // times the cache was emptied to retry after an out-of-memory
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator() = 0;

  // ---- capabilities (asked by the op layer, see the contract above) ----
  // Whether op `op` (the op layer's name for it: "matmul", "softmax", ...) computes in `dtype`
  // here: one question per op, because a device's kernels need not cover every dtype for every
  // op (a 16-bit GEMM may exist where a 16-bit batch norm does not). A 16-bit dtype computes in
  // float32 inside the kernel (read, compute and accumulate in float32, round once on store). The
  // memory, random and equal methods work for every dtype a tensor on this device can have
  // (core's empty() refuses the others).
  virtual bool computes_in(const char* op, DType dtype) const = 0;

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
  // y[N, M] = act(x[N, K] · W[M, K]ᵀ + b[M]); bias may be undefined. With a GELU act,
  // pre_activation (a tensor like y) receives z = x·Wᵀ + b and y receives gelu(z); otherwise
  // pre_activation is nullptr.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, Activation act,
                              Tensor* pre_activation) = 0;
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
  // The first (row, value) with targets[row] outside [0, num_classes), if any (waits for it). A
  // target equal to ignore_index (when given) is valid wherever it lies: it marks a row to skip.
  virtual std::optional<std::pair<int64_t, int64_t>> find_invalid_target(const Tensor& targets, int64_t num_classes,
                                                                         std::optional<int64_t> ignore_index) = 0;
  // The op layer's target check: throws Error(message(row, value)) for the first row whose target
  // lies outside [0, num_classes) and is not ignore_index. Here (the CPU) at once; a backend whose
  // work is queued (CUDA) checks on the device without waiting and throws at the next point where
  // the host waits for the device anyway: synchronize() or a copy to the CPU (item(), to_vector, .to(cpu)).
  virtual void check_targets(const Tensor& targets, int64_t num_classes, TargetErrorMessage message,
                             std::optional<int64_t> ignore_index = std::nullopt) {
    if (auto bad = find_invalid_target(targets, num_classes, ignore_index))
      throw Error(message(bad->first, bad->second));
  }
  // Cross-entropy of logits [rows, C] against targets [rows] under options o (ε = o.label_smoothing):
  //   loss[row] = (1 - ε)·nll + ε·smooth,  nll = log s - (x_t - m),  smooth = log s - Σ_j (x_j - m) / C,
  // m the row's max and s = Σ_j exp(x_j - m) (the mean over classes of -log p_j, formed from x - m:
  // Note [softmax at the logits' scale] in core/ops/softmax.cpp); loss[row] = 0 where
  // targets[row] == o.ignore_index. stats [rows, 2] keeps (m, 1/s) per row for backward.
  virtual void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss,
                                             Tensor& stats, const CrossEntropyOptions& o) = 0;
  // dlogits[row] = (softmax(logits[row]) - (1 - ε)·onehot(target) - ε/C) * scale[row], softmax =
  // exp(x - m) * (1/s) from forward's stats; scale has one element per row, or one element broadcast
  // to all rows; an ignored row gets 0 whatever its scale.
  virtual void softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                              const Tensor& scale, Tensor& dlogits, const CrossEntropyOptions& o) = 0;

  // The training path (Note [fused cross-entropy] in core/ops/softmax.cpp), one pass per row:
  // loss[row] as in forward and dlogits[row] as in backward with the one-element scale read on the
  // device (1 when undefined), so the mean's 1/count never visits the host.
  virtual void softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& scale,
                                           Tensor& loss, Tensor& dlogits, const CrossEntropyOptions& o) = 0;

  // ---- optimizer updates (in place, outside autograd) ----
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) = 0;
  virtual void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const AdamConfig& cfg) = 0;
  // The same updates over lists at once (PyTorch's foreach/fused optimizers): entry i of the
  // lists is sgd_step / adam_step of params[i] with `cfg`, in the same arithmetic, so the results
  // are the same bits. The lists hold tensors of this device and one dtype (momentum_buffers:
  // all defined, or all undefined when cfg.momentum is 0). A device backend covers a whole list
  // with one launch; the default runs the single updates in order.
  virtual void sgd_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                             std::vector<Tensor>& momentum_buffers, const SGDConfig& cfg) {
    for (size_t i = 0; i < params.size(); ++i) sgd_step(params[i], grads[i], momentum_buffers[i], cfg);
  }
  virtual void adam_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              std::vector<Tensor>& exp_avgs, std::vector<Tensor>& exp_avg_sqs, const AdamConfig& cfg) {
    for (size_t i = 0; i < params.size(); ++i) adam_step(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], cfg);
  }

  // ---- device ----
  virtual void synchronize() {}
  // The queue this backend runs its work on, in order, as an opaque handle (a cudaStream_t for
  // CUDA); nullptr where work runs synchronously on the calling thread (the CPU). Code that
  // queues its own work beside the backend's (parallel/nccl) orders itself against it.
  virtual void* stream_handle() const { return nullptr; }
  // A timestamp queued on this backend's stream for the profiler (core/profiler.h): the device
  // notes its clock once the work queued before it has run. nullptr where work runs
  // synchronously on the calling thread (the CPU: the host clock is the time).
  virtual std::shared_ptr<DeviceTimestamp> record_timestamp() { return nullptr; }
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
  // Graph capture (core/cuda_graph.h): between begin_capture and end_capture this device's work
  // is recorded, not run, and its allocations come from a pool of their own that the graph
  // keeps (Note [graph pools] in kernels/cuda/caching_allocator.h); what cannot be replayed (a
  // host wait, a copy from pageable host memory, random numbers from host counters) throws.
  // abort_capture ends a capture that failed and drops what it recorded. capturing() says
  // whether one is under way. Where work runs synchronously (the CPU) there are no graphs:
  // begin_capture throws.
  virtual void begin_capture();
  virtual std::unique_ptr<CapturedGraph> end_capture();
  virtual void abort_capture() noexcept {}
  virtual bool capturing() const { return false; }
  // Caching-allocator statistics and control (the CPU's: its block caches, core/storage.cpp).
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

  // ==== attention ====
  // Scaled dot-product attention per (b, h) of q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]
  // (core/ops/attention.cpp has the math). The op layer guarantees rank 4, L, S, E, Ev >= 1,
  // B·H·L > 0, E and Ev <= attention_max_head_size(), and stride 1 along the last dim of q, k
  // and v; their other strides are honoured as they are (views of a fused qkv projection reach
  // the kernels without a copy). Every output is contiguous. The dropout mask of element
  // (b, h, i, j) is Philox counter offset + ((b·H + h)·L + i)·S + j, kept when its 24-bit float
  // uniform is below 1 − dropout_p (as dropout_mask); dropout_p = 0 draws nothing.
  // The largest E and Ev the kernels take (the op layer turns a larger one into its error).
  virtual int64_t attention_max_head_size() const = 0;
  // out [B, H, L, Ev] = dropout(softmax(q·kᵀ·scale, causal: j <= i)) · v, and lse [B, H, L]
  // (q's dtype) = log Σ_j exp(s_ij), the log-sum-exp of each query row's (unmasked) scores.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                 double dropout_p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse) = 0;
  // dq, dk, dv (q's, k's, v's shapes, contiguous) from dout [B, H, L, Ev] (contiguous) and
  // forward's out and lse, recomputing the probabilities from lse and the mask from its
  // counters. Deterministic: a fixed order of additions, the same bits every run.
  virtual void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, bool causal, double scale, double dropout_p,
                                  uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) = 0;

  // ==== training-loop utilities: cross-entropy's mean, gradient clipping, sampling ====
  // scale (one element, a floating dtype) = 1 / the number of targets [N] not equal to ignore_index,
  // computed on this device (+inf when every target is ignored: the mean of no losses is NaN).
  virtual void cross_entropy_mean_scale(const Tensor& targets, int64_t ignore_index, Tensor& scale) = 0;
  // out (one element, the tensors' dtype) = (Σ over every element x of every tensor of |x|^p)^(1/p),
  // or max |x| for p = +inf, in one pass over all the tensors (one launch on CUDA) and a fixed order
  // of additions: the same bits every run. The tensors are contiguous, non-empty as a list, of
  // one dtype and this device; p > 0.
  virtual void multi_tensor_norm(const std::vector<Tensor>& tensors, double p, Tensor& out) = 0;
  // t *= c in place for every tensor (contiguous, one dtype, this device), with the coefficient
  // c = min(max_norm / (total_norm[0] + 1e-6), 1) formed in that dtype on this device from the
  // one-element total_norm (no host wait; a NaN norm gives NaN, as torch's clamp does).
  virtual void multi_tensor_clip(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) = 0;
  // Loss scaling's unscale (optim/grad_scaler.h), one pass over every tensor (one launch on CUDA):
  // t *= inv_scale in place, in t's dtype's arithmetic (float32 for 16-bit), and found_inf (one
  // float32 element on this device, left as it is otherwise) is set to 1 when any element of any
  // tensor was infinite or NaN before the multiplication. Tensors contiguous, one dtype, this device.
  virtual void unscale_and_check_finite(const std::vector<Tensor>& tensors, float inv_scale, Tensor& found_inf) = 0;
  // The k best entries of each row of x [rows, cols] (0 < k <= cols): values [rows, k] and their
  // column indices [rows, k] (int64), best first; best is largest (or smallest), NaN counting as
  // larger than every number, and of equal values the lower index comes first.
  virtual void topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) = 0;
  // The first row of weights [rows, V] that is not a distribution multinomial can sample from, and
  // why (waits for the answer): a negative, infinite or NaN entry, no positive weight, or, when
  // min_positive > 1, fewer than min_positive positive weights.
  virtual std::optional<std::pair<int64_t, MultinomialDefect>> find_invalid_distribution(const Tensor& weights,
                                                                                          int64_t min_positive) = 0;
  // out [rows, n] (int64) = n draws per row of the column index j with probability weights[row, j]
  // / Σ weights[row] (validated by find_invalid_distribution), with or without replacement. Draw d
  // of row r uses the uniform double of Philox counter offset + r·n + d (core/philox.h); the sums
  // run in the order of Note [multinomial's sums], so both backends draw the same samples.
  virtual void multinomial(const Tensor& weights, int64_t n, bool replacement, uint64_t seed, uint64_t offset,
                           Tensor& out) = 0;
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
