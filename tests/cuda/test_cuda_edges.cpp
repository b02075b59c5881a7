// Boundary cases of the CUDA kernels (kernels/cuda/*.cu) that the other CUDA tests do not reach,
// each against the CPU backend on fresh random inputs:
//   - the row engine (row_engine.cuh: softmax, log_softmax, cross-entropy) and the row reductions
//     of reduce.cu (sum, mean, argmax) at every warp and block boundary: 1, 31, 32, 33, 63, ...,
//     1023, 1024, 1025..1029 columns, each register width of the warp kernel and its last lane,
//     the first block-per-row sizes with scalar and float4 loads; 9 rows, one more than the 8 rows
//     of a warp-per-row block;
//   - NaN and +inf logits through every row strategy (warp, block scalar, block cached, streaming);
//   - 70000 rows (more than a grid's 65535 y-blocks) through row ops, reductions, elementwise ops,
//     copies, batch norm, dropout and row gathers;
//   - empty tensors (0 rows, 0 columns) through every op family: the CPU's shape, or the CPU's error;
//   - outputs and inputs 1-3 floats past 16-byte alignment through the float4 map kernel
//     (elementwise.cu: scalar head, vector body, scalar tail) and non-contiguous views through the
//     strided kernels and copies (memory.cu), int64 words included;
//   - GEMMs (simt_gemm.cu, linear.cu, cublas_gemm.cu) with M, N or K of 1, split K reached through the op
//     layer, transposed and offset operands, bias/ReLU epilogues; and the native kernel, every tile,
//     with leading dimensions wider than its matrices (padding filled with NaN, never to be read);
//   - max-pool ties and NaN (pool.cu), batch norm with one channel, 257 channels and two values per
//     channel (batch_norm.cu), dropout tails (dropout.cu), the split boundaries of the sums.
// Sizes are the smallest that cross each boundary (the suite also runs on a slow simulated GPU).
#include "cuda_test_util.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_impl.h"
#include "kernels/cuda/gemm/gemm_plan.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TensorOptions gpu_f32() { return TensorOptions(DType::Float32, kGpu); }
TensorOptions cpu_f32() { return TensorOptions(DType::Float32, Device::cpu()); }

// ---- tolerances (each states why) ----

// Elementwise ops, ReLU, copies: both devices perform the same single correctly rounded float32
// operation (or move bits), so they agree exactly; 1e-5 absolute on values of magnitude <= ~8
// admits at most a rounding difference and rejects any wrong, lost or misplaced element.
constexpr double kElementwiseAtol = 1e-5;
// Sums of uniform [0, 1) values (no cancellation) against a float64 CPU sum: float32 in a fixed
// tree/chunk order keeps the relative error near log2(n)·eps ~ 1e-6; 1e-4 relative.
constexpr double kSumRtol = 1e-4;
// softmax against float64, inputs in [-4, 4): x - m is exact or off by half an ulp of |x - m|
// (<= 4.8e-7 relative in p); expf, 1/s, the product and the float32 sum s add a few ulp: 1e-5
// relative, with room.
constexpr double kSoftmaxRtol = 1e-5;
// log_softmax against float64: (x - m) - log s, the same half ulp of |x - m| and a few ulp of
// log s (<= log C ~ 11): ~1e-6 absolute on values up to ~20: 1e-5 absolute + relative.
constexpr double kLogSoftmaxTol = 1e-5;

// ---- inputs ----

// Small integers as float32: sums of fewer than 2^24 / 8 of them are exact in float32 in any
// order, so sums (and max-pool gradients) of these compare exactly.
Tensor small_integers(const Shape& shape, uint64_t seed, int64_t high = 8) {
  Generator g(seed);
  return randint(0, high, shape, DType::Int64, &g).to(DType::Float32);
}

double max_abs(const Tensor& t) {  // NaN entries are skipped (std::max keeps the left on NaN)
  double m = 0.0;
  for (double v : t.to(Device::cpu()).to(DType::Float64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// A contiguous device tensor with cpu_values' shape and values whose first element lies `offset`
// floats into its (64-byte aligned) storage: offsets 1..3 put it 4..12 bytes past 16-byte alignment.
Tensor offset_gpu(const Tensor& cpu_values, int64_t offset) {
  const int64_t n = cpu_values.numel();
  Tensor storage = zeros({n + offset}, gpu_f32());
  Tensor view = storage.narrow(0, offset, n);
  view.copy_(cpu_values.reshape({n}));
  return view.reshape(cpu_values.shape());
}

// Targets in [0, cols) with the last class at row 0 and class 0 at the last row: the tail lane /
// thread of a row and its first one both hold a target somewhere.
Tensor edge_targets(int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t = randint(0, cols, {rows}, DType::Int64, &g).to_vector<int64_t>();
  if (rows > 0) t.front() = cols - 1;
  if (rows > 1) t.back() = 0;
  return from_vector(t, Shape{rows}, DType::Int64);
}

// A [rows, cols] float32 CPU tensor from doubles.
Tensor from_doubles(const std::vector<double>& v, int64_t rows, int64_t cols) {
  return from_vector(v, Shape{rows, cols}, DType::Float32);
}

Tensor apply_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
  }
  return Tensor();
}

Tensor apply_binary(BinaryOp op, const Tensor& a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
  }
  return Tensor();
}

const BinaryOp kBinaryOps[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div};

// Every element of `storage` (a device tensor) outside [first, first + n) still equals `sentinel`.
void check_untouched(const Tensor& storage, int64_t first, int64_t n, float sentinel, const std::string& what) {
  const std::vector<float> v = storage.to(Device::cpu()).to_vector<float>();
  size_t written = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t at = static_cast<int64_t>(i);
    if ((at < first || at >= first + n) && v[i] != sentinel) ++written;
  }
  INFO(what << ": " << written << " element(s) outside the view were written");
  CHECK(written == 0);
}

}  // namespace

// ============================================================================================
// Row engine and row reductions at every warp and block boundary
// ============================================================================================

namespace {

// Warp per row (row_engine.cuh, reduce.cu) for cols <= 1024, in each register width of the row
// engine's warp kernel (kPerLane 1: 1..32, 2: 33..64, 4: 65..128, 8: 129..256, 16: 257..512, 32:
// 513..1024) its first size (the last lane holds one element, most lanes one fewer than the rest)
// and its last two (all lanes full, or all but the last). Block per row from 1025: scalar loads
// (1025, 1026, 1027, 1029: cols % 4 != 0) and float4 with the register cache (1028).
const int64_t kRowCols[] = {1,   31,  32,  33,  63,   64,   65,   127,  128,  129,  255, 256,
                            257, 511, 512, 513, 1023, 1024, 1025, 1026, 1027, 1028, 1029};
// 1 row; 9 rows: a warp-per-row block takes 8, so the second block has one row and 7 idle warps.
const int64_t kRowRows[] = {1, 9};

}  // namespace

TEST_CASE("softmax and log_softmax forward and backward at every warp and block boundary match float64",
          "[cuda][softmax][edges]") {
  uint64_t seed = 100;
  for (int64_t cols : kRowCols) {
    for (int64_t rows : kRowRows) {
      INFO("[" << rows << ", " << cols << "]");
      const Tensor x = random_cpu({rows, cols}, ++seed, -4.0, 4.0);
      const Tensor g = random_cpu({rows, cols}, ++seed);
      const Tensor x64 = x.to(DType::Float64);
      const Tensor p = ops::softmax(x.to(kGpu), 1);
      const Tensor p_ref = ops::softmax(x64, 1);
      check_close(p, p_ref, 0.0, kSoftmaxRtol, "softmax");
      const Tensor y = ops::log_softmax(x.to(kGpu), 1);
      const Tensor y_ref = ops::log_softmax(x64, 1);
      check_close(y, y_ref, kLogSoftmaxTol, kLogSoftmaxTol, "log_softmax");
      for (bool log : {true, false}) {
        Tensor xr = x.to(DType::Float64).requires_grad_();
        (log ? ops::log_softmax(xr, 1) : ops::softmax(xr, 1)).backward(g.to(DType::Float64));
        Tensor xg = x.to(kGpu).detach().requires_grad_();
        (log ? ops::log_softmax(xg, 1) : ops::softmax(xg, 1)).backward(g.to(kGpu));
        // log_softmax: dx = dy - p·Σdy, O(1) values with ~eps·|dy| error: 1e-5 absolute + relative.
        // softmax: dx = p·(dy - Σ dy·p) cancels where dy ≈ Σ dy·p, so its absolute part scales
        // with the largest |dx| of the tensor: 1e-5 of it, plus 1e-5 relative.
        const double atol = log ? 1e-5 : 1e-5 * max_abs(xr.grad());
        check_close(xg.grad(), xr.grad(), atol, 1e-5, log ? "log_softmax backward" : "softmax backward");
      }
    }
  }
}

TEST_CASE("cross-entropy at every warp and block boundary matches float64, target in the last column",
          "[cuda][softmax][edges]") {
  uint64_t seed = 300;
  for (int64_t cols : kRowCols) {
    for (int64_t rows : kRowRows) {
      const Tensor x = random_cpu({rows, cols}, ++seed, -4.0, 4.0);
      const Tensor t = edge_targets(rows, cols, ++seed);
      const Tensor w = random_cpu({rows}, ++seed);  // upstream gradient of the per-row losses (None)
      for (ops::Reduction red : {ops::Reduction::Mean, ops::Reduction::None}) {
        Tensor xr = x.to(DType::Float64).requires_grad_();
        Tensor lr = ops::softmax_cross_entropy(xr, t, red);
        if (red == ops::Reduction::None) lr.backward(w.to(DType::Float64));
        else lr.backward();
        for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
          const std::string what = std::string(mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate") +
                                   (red == ops::Reduction::Mean ? ", mean" : ", none");
          INFO("[" << rows << ", " << cols << "], " << what);
          Tensor xg = x.to(kGpu).detach().requires_grad_();
          Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu), red, mode);
          if (red == ops::Reduction::None) lg.backward(w.to(kGpu));
          else lg.backward();
          // loss = log s - (x_t - m): a few ulp of values up to ~20 (~1e-6) per row, plus the
          // float32 mean of <= 9 of them.
          check_close(lg, lr, 1e-5, 1e-5, "loss");
          // dlogits = (p - onehot)·scale: p with <= ~1e-6 relative error, and p - 1 at the target
          // cancels when p ≈ 1, leaving ~eps·scale absolute: 1e-6 of the largest |dlogits|.
          check_close(xg.grad(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, "dlogits");
        }
      }
    }
  }
}

TEST_CASE("sum, mean and argmax of rows at every warp and block boundary match the CPU", "[cuda][reduce][edges]") {
  uint64_t seed = 500;
  for (int64_t cols : kRowCols) {
    for (int64_t rows : kRowRows) {
      INFO("[" << rows << ", " << cols << "]");
      const Tensor x = random_cpu({rows, cols}, ++seed, 0.0, 1.0);
      const Tensor x64 = x.to(DType::Float64);
      check_close(x.to(kGpu).sum(1), x64.sum(1), 0.0, kSumRtol, "row sums of uniform values");
      check_close(x.to(kGpu).mean(1), x64.mean(1), 0.0, kSumRtol, "row means of uniform values");
      const Tensor k = small_integers({rows, cols}, ++seed);
      check_equal(k.to(kGpu).sum(1), k.sum(1), "row sums of small integers (exact)");
      // Rows that start 4 bytes past alignment: the block kernel's float4 path must not be taken.
      check_equal(offset_gpu(k, 1).sum(1), k.sum(1), "row sums of an offset view (exact)");
      check_equal(x.to(kGpu).argmax(1), x.argmax(1), "argmax of distinct values");
      // Values in {0, 1, 2}: every row has ties for its maximum, in every lane; the first wins.
      const Tensor ties = small_integers({rows, cols}, ++seed, 3);
      check_equal(ties.to(kGpu).argmax(1), ties.argmax(1), "argmax with ties");
    }
  }
}

// ============================================================================================
// NaN and infinities through every row strategy
// ============================================================================================

namespace {

// One size per row strategy (row_engine.cuh): warp per row (1, 33, 1024), block with scalar loads
// (1025), block with the float4 register cache (1028, 4096), float4 streaming (40000 > 32768).
const int64_t kNonFiniteCols[] = {1, 33, 1024, 1025, 1028, 4096, 40000};

}  // namespace

TEST_CASE("a NaN logit makes its whole row NaN on the device, as on the CPU, on every row strategy",
          "[cuda][softmax][edges]") {
  // Rows: 0 finite; 1 NaN in the last column; 2 NaN in column 0; 3 NaN in the middle.
  uint64_t seed = 700;
  for (int64_t cols : kNonFiniteCols) {
    const int64_t rows = 4;
    INFO("cols " << cols);
    std::vector<double> v = random_cpu({rows, cols}, ++seed, -4.0, 4.0).to(DType::Float64).to_vector<double>();
    v[static_cast<size_t>(1 * cols + cols - 1)] = kNaN;
    v[static_cast<size_t>(2 * cols)] = kNaN;
    v[static_cast<size_t>(3 * cols + cols / 2)] = kNaN;
    const Tensor x = from_doubles(v, rows, cols);
    const Tensor x64 = x.to(DType::Float64);
    // The finite row within the tolerances above; the NaN rows must be NaN in every element.
    check_close(ops::softmax(x.to(kGpu), 1), ops::softmax(x64, 1), 0.0, kSoftmaxRtol, "softmax");
    check_close(ops::log_softmax(x.to(kGpu), 1), ops::log_softmax(x64, 1), kLogSoftmaxTol, kLogSoftmaxTol,
                "log_softmax");
    const Tensor t = edge_targets(rows, cols, ++seed);
    const Tensor loss_ref = ops::softmax_cross_entropy(x64, t, ops::Reduction::None);
    for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
      const std::string what = mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate";
      Tensor xr = x64.clone().requires_grad_();
      Tensor lr = ops::softmax_cross_entropy(xr, t, ops::Reduction::Sum, mode);
      lr.backward();
      Tensor xg = x.to(kGpu).detach().requires_grad_();
      Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu), ops::Reduction::Sum, mode);
      lg.backward();
      check_close(lg, lr, 1e-5, 1e-5, what + " summed loss (NaN)");
      // dlogits of the finite row as in the cross-entropy test; NaN rows NaN everywhere.
      check_close(xg.grad(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, what + " dlogits");
    }
    check_close(ops::softmax_cross_entropy(x.to(kGpu), t.to(kGpu), ops::Reduction::None), loss_ref, 1e-5, 1e-5,
                "per-row loss (NaN rows NaN)");
  }
}

TEST_CASE("a +inf logit gives the CPU's softmax on every row strategy: NaN at the +inf, 0 elsewhere",
          "[cuda][softmax][edges]") {
  // The CPU (kernels/cpu/softmax.cpp) takes m = +inf, s = 1 per +inf, then exp(x - m): exp(+inf -
  // +inf) = NaN at each +inf and exp(-inf) = 0 elsewhere, as PyTorch; log_softmax NaN and -inf.
  // Rows: 0 one +inf in the middle; 1 +inf in the first and the last column; 2 finite.
  uint64_t seed = 800;
  for (int64_t cols : kNonFiniteCols) {
    const int64_t rows = 3;
    INFO("cols " << cols);
    std::vector<double> v = random_cpu({rows, cols}, ++seed, -4.0, 4.0).to(DType::Float64).to_vector<double>();
    v[static_cast<size_t>(cols / 2)] = kInf;
    v[static_cast<size_t>(cols)] = kInf;
    v[static_cast<size_t>(2 * cols - 1)] = kInf;
    const Tensor x = from_doubles(v, rows, cols);
    const Tensor x64 = x.to(DType::Float64);
    check_close(ops::softmax(x.to(kGpu), 1), ops::softmax(x64, 1), 0.0, kSoftmaxRtol, "softmax");
    check_close(ops::log_softmax(x.to(kGpu), 1), ops::log_softmax(x64, 1), kLogSoftmaxTol, kLogSoftmaxTol,
                "log_softmax");
    // Targets away from the +inf columns where the row has more than one column: loss = +inf.
    std::vector<int64_t> tv = {cols > 2 ? 1 : 0, cols > 2 ? 1 : 0, 0};
    const Tensor t = from_vector(tv, Shape{rows}, DType::Int64);
    for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
      const std::string what = mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate";
      Tensor xr = x64.clone().requires_grad_();
      Tensor lr = ops::softmax_cross_entropy(xr, t, ops::Reduction::None, mode);
      lr.backward(ones({rows}, DType::Float64));
      Tensor xg = x.to(kGpu).detach().requires_grad_();
      Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu), ops::Reduction::None, mode);
      lg.backward(ones({rows}, gpu_f32()));
      check_close(lg, lr, 1e-5, 1e-5, what + " per-row loss");
      check_close(xg.grad(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, what + " dlogits");
    }
  }
}

// ============================================================================================
// More than 65535 rows
// ============================================================================================

TEST_CASE("70000 rows of 3 go through the row ops, reductions and elementwise ops like the CPU", "[cuda][edges][grid]") {
  // 70000 > 65535: a launch that put rows (or row blocks of 8) on gridDim.y fails or drops rows.
  const int64_t rows = 70000, cols = 3;
  const Tensor x = random_cpu({rows, cols}, 900, -4.0, 4.0);
  const Tensor x64 = x.to(DType::Float64);
  const Tensor xg = x.to(kGpu);

  SECTION("softmax family and cross-entropy") {
    check_close(ops::softmax(xg, 1), ops::softmax(x64, 1), 0.0, kSoftmaxRtol, "softmax over the rows");
    check_close(ops::log_softmax(xg, 1), ops::log_softmax(x64, 1), kLogSoftmaxTol, kLogSoftmaxTol, "log_softmax");
    // Along dim 0: a transposed copy, then 3 rows of 70000 (block per row, float4 streaming).
    check_close(ops::softmax(xg, 0), ops::softmax(x64, 0), 0.0, kSoftmaxRtol, "softmax along the 70000");
    check_close(ops::log_softmax(xg, 0), ops::log_softmax(x64, 0), kLogSoftmaxTol, kLogSoftmaxTol,
                "log_softmax along the 70000");
    const Tensor g = random_cpu({rows, cols}, 901);
    Tensor xr = x64.clone().requires_grad_();
    ops::log_softmax(xr, 1).backward(g.to(DType::Float64));
    Tensor xd = xg.detach().requires_grad_();
    ops::log_softmax(xd, 1).backward(g.to(kGpu));
    check_close(xd.grad(), xr.grad(), 1e-5, 1e-5, "log_softmax backward");  // as at the boundaries

    const Tensor t = edge_targets(rows, cols, 902);
    for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
      const std::string what = mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate";
      Tensor cr = x64.clone().requires_grad_();
      Tensor lr = ops::softmax_cross_entropy(cr, t, ops::Reduction::Mean, mode);
      lr.backward();
      Tensor cg = xg.detach().requires_grad_();
      Tensor lg = ops::softmax_cross_entropy(cg, t.to(kGpu), ops::Reduction::Mean, mode);
      lg.backward();
      // The mean of 70000 losses of ~1e-6 error each, summed in float32 in a fixed tree:
      // ~1e-6 relative; 1e-5.
      check_close(lg, lr, 1e-5, 1e-5, what + " mean loss");
      check_close(cg.grad(), cr.grad(), 1e-6 * max_abs(cr.grad()), 1e-5, what + " dlogits");
    }
    const Tensor per_row = ops::softmax_cross_entropy(xg, t.to(kGpu), ops::Reduction::None);
    check_close(per_row, ops::softmax_cross_entropy(x64, t, ops::Reduction::None), 1e-5, 1e-5, "per-row losses");
  }

  SECTION("sums, means and argmax over either dim") {
    const Tensor u = random_cpu({rows, cols}, 903, 0.0, 1.0);
    const Tensor u64 = u.to(DType::Float64);
    check_close(u.to(kGpu).sum(1), u64.sum(1), 0.0, kSumRtol, "row sums");
    check_close(u.to(kGpu).mean(1), u64.mean(1), 0.0, kSumRtol, "row means");
    check_close(u.to(kGpu).sum(0), u64.sum(0), 0.0, kSumRtol, "column sums (split)");
    check_close(u.to(kGpu).mean(0), u64.mean(0), 0.0, kSumRtol, "column means");
    check_close(u.to(kGpu).sum(), u64.sum(), 0.0, kSumRtol, "sum of all");
    const Tensor k = small_integers({rows, cols}, 904);
    check_equal(k.to(kGpu).sum(0), k.sum(0), "column sums of small integers (exact)");
    check_equal(k.to(kGpu).sum(1), k.sum(1), "row sums of small integers (exact)");
    check_equal(k.to(kGpu).argmax(1), k.argmax(1), "argmax of rows with ties");
    check_equal(k.to(kGpu).argmax(0), k.argmax(0), "argmax of 70000-long columns with ties");
  }

  SECTION("elementwise ops, relu and copies") {
    const Tensor y = random_cpu({rows, cols}, 905, 0.5, 2.0);
    const Tensor row = random_cpu({cols}, 906, 0.5, 2.0);
    const Tensor col = random_cpu({rows, 1}, 907, 0.5, 2.0);
    const Tensor yg = y.to(kGpu), rowg = row.to(kGpu), colg = col.to(kGpu);
    for (BinaryOp op : kBinaryOps) {
      INFO(binary_op_name(op));
      check_close(apply_binary(op, xg, yg), apply_binary(op, x, y), kElementwiseAtol, 0.0, "contiguous (map kernel)");
      check_close(apply_binary(op, xg, rowg), apply_binary(op, x, row), kElementwiseAtol, 0.0, "row broadcast");
      check_close(apply_binary(op, colg, xg), apply_binary(op, col, x), kElementwiseAtol, 0.0, "column broadcast");
      check_close(apply_binary(op, xg, 2.0 * yg), apply_binary(op, x, 2.0 * y), kElementwiseAtol, 0.0, "scalar");
    }
    check_equal(xg.t().contiguous(), x.t().contiguous(), "transposed copy");
    check_equal(xg.t().t().contiguous(), x, "transposed twice (a contiguous view)");
    const Tensor g = random_cpu({rows, cols}, 908);
    Tensor xc = x.clone().requires_grad_();
    ops::relu(xc).backward(g);
    Tensor xd = xg.detach().requires_grad_();
    ops::relu(xd).backward(g.to(kGpu));
    check_equal(ops::relu(xg), ops::relu(x), "relu");
    check_equal(xd.grad(), xc.grad(), "relu backward");
    check_equal(xg.eq(yg), x.eq(y), "eq");
  }

  SECTION("batch norm of [70000, 3] and dropout") {
    Tensor rm_cpu = random_cpu({cols}, 909), rv_cpu = random_cpu({cols}, 910, 0.5, 2.0);
    Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
    const Tensor w = random_cpu({cols}, 911), b = random_cpu({cols}, 912), g = random_cpu({rows, cols}, 913);
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
    Tensor xd = xg.detach().requires_grad_(), wd = w.to(kGpu).requires_grad_(), bd = b.to(kGpu).requires_grad_();
    const Tensor yc = ops::batch_norm(xc, rm_cpu, rv_cpu, wc, bc, true, 0.1, 1e-5);
    const Tensor yd = ops::batch_norm(xd, rm_gpu, rv_gpu, wd, bd, true, 0.1, 1e-5);
    yc.backward(g);
    yd.backward(g.to(kGpu));
    // Statistics of 70000 values per channel: float32 block sums on the device, double on the
    // CPU: ~1e-6 relative in mean and variance, so normalised values of size ~3 within 1e-4;
    // dγ and dβ are sums of 70000 terms (|sum| up to ~300): 1e-4 relative + 1e-3 absolute.
    check_close(yd, yc, 1e-4, 1e-4, "batch_norm forward");
    check_close(xd.grad(), xc.grad(), 1e-4, 1e-4, "dx");
    check_close(wd.grad(), wc.grad(), 1e-3, 1e-4, "dgamma");
    check_close(bd.grad(), bc.grad(), 1e-3, 1e-4, "dbeta");
    check_close(rm_gpu, rm_cpu, 1e-5, 1e-5, "running_mean");
    check_close(rv_gpu, rv_cpu, 1e-5, 1e-5, "running_var");
    Generator ga(914), gb(914);
    const Tensor dc = ops::dropout(x, 0.3, true, &ga);
    const Tensor dd = ops::dropout(xg, 0.3, true, &gb);
    check_equal(dd, dc, "dropout (x times the same 0 or 1/0.7 in float32: exact)");
  }
}

TEST_CASE("index_rows gathers more than 65535 rows and rows wider than a grid pass like the CPU",
          "[cuda][memory][edges][grid]") {
  // gather_rows (memory.cu) puts rows on gridDim.y capped at 65535 with a stride loop, and row
  // elements on gridDim.x capped at 4096 / 256 blocks with a stride loop: 70000 rows cross the
  // first, 5000 columns the second. Pure copies: exact. (The 70001-row gather is the heaviest
  // launch of this file on a simulated GPU: 65535 blocks of 256 threads, most of them idle.)
  const Tensor tall = random_cpu({70000, 3}, 950);
  Generator g(951);
  const std::vector<int64_t> idx = randint(0, 70000, {70001}, DType::Int64, &g).to_vector<int64_t>();
  check_equal(ops::index_rows(tall.to(kGpu), idx), ops::index_rows(tall, idx), "70001 rows gathered");
  const Tensor wide = random_cpu({3, 5000}, 952);
  const std::vector<int64_t> few = {2, 0, 2, 1};
  check_equal(ops::index_rows(wide.to(kGpu), few), ops::index_rows(wide, few), "rows of 5000");
}

// ============================================================================================
// Empty tensors
// ============================================================================================

namespace {

using Outputs = std::vector<Tensor>;

enum class Expect { Values, Error };

// Runs f(device) on the CPU and on cuda:0 (f makes its inputs on that device from CPU values
// and returns what to compare). Expect::Values: both return, with the same shapes and values
// (exact: nothing is summed, or at most a few terms in one order, hence `atol`). Expect::Error:
// both throw a minidl::Error with the same message, the CPU's clear error also on the device.
template <typename F>
void same_outcome(const F& f, const std::string& what, double atol, Expect expect) {
  INFO(what);
  Outputs want, got;
  std::string want_error = "none", got_error = "none";
  try {
    want = f(Device::cpu());
  } catch (const Error& e) {
    want_error = e.what();
  }
  try {
    got = f(kGpu);
  } catch (const Error& e) {
    got_error = e.what();
  }
  INFO("error on the cpu: " << want_error << "\nerror on cuda:0: " << got_error);
  REQUIRE((want_error != "none") == (expect == Expect::Error));
  REQUIRE(got_error == want_error);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("output " << i);
    REQUIRE(got[i].defined() == want[i].defined());
    if (!want[i].defined()) continue;
    if (want[i].dtype() == DType::Int64) check_equal(got[i], want[i], what);
    else check_close(got[i], want[i], atol, 0.0, what);
  }
}

// Both devices return the same values (no error on either).
template <typename F>
void check_same_outcome(const F& f, const std::string& what, double atol = 0.0) {
  same_outcome(f, what, atol, Expect::Values);
}

// Both devices throw the CPU's error, with the same message.
template <typename F>
void check_same_error(const F& f, const std::string& what) {
  same_outcome(f, what, 0.0, Expect::Error);
}

// A leaf on `device` with t's values that requires grad (t a CPU float tensor; not mutated).
Tensor leaf_on(const Tensor& t, Device device) { return t.to(device).detach().requires_grad_(); }

// Empty shapes: no rows, no columns, neither, an empty middle dim, and [1, 0]. A tensor with no
// element is contiguous whatever its strides (Tensor::is_contiguous, core/tensor.cpp, PyTorch's
// rule), so view()/reshape() of a fresh [5, 0] work and every op below reaches the kernels: only
// the mean of nothing and a mean or argmax along an empty dim are errors (the CPU's, on both).
const Shape kEmptyShapes[] = {Shape{0}, Shape{0, 5}, Shape{5, 0}, Shape{0, 0}, Shape{2, 0, 3}, Shape{1, 0}};

}  // namespace

TEST_CASE("elementwise ops, reductions and softmax of empty tensors give the CPU's shapes and errors",
          "[cuda][edges]") {
  for (const Shape& shape : kEmptyShapes) {
    const std::string s = "shape " + detail::make_message(shape) + ": ";
    const Tensor a = random_cpu(shape, 1000), b = random_cpu(shape, 1001, 0.5, 2.0);
    for (BinaryOp op : kBinaryOps) {
      check_same_outcome([&](Device d) { return Outputs{apply_binary(op, a.to(d), b.to(d))}; },
                         s + binary_op_name(op));
      check_same_outcome([&](Device d) { return Outputs{apply_binary(op, a.to(d), 2.0)}; },
                         s + binary_op_name(op) + " with a scalar");
    }
    check_same_outcome([&](Device d) { return Outputs{ops::relu(a.to(d)), a.to(d).eq(b.to(d))}; }, s + "relu, eq");
    check_same_outcome([&](Device d) { return Outputs{a.to(d).sum(), a.to(d).clone(), a.to(d).contiguous()}; },
                       s + "sum of nothing (0), clone, contiguous");
    check_same_error([&](Device d) { return Outputs{a.to(d).mean()}; }, s + "mean of nothing (an error)");
    // A backward through an empty product reaches the leaves with empty gradients.
    check_same_outcome(
        [&](Device d) {
          Tensor ad = leaf_on(a, d), bd = leaf_on(b, d);
          ((ad * bd + ad / bd).relu().sum()).backward();
          return Outputs{ad.grad(), bd.grad()};
        },
        s + "gradients of an empty product");
    for (int64_t dim = 0; dim < shape.rank(); ++dim) {
      const std::string sd = s + "dim " + std::to_string(dim) + ", ";
      check_same_outcome([&](Device d) { return Outputs{a.to(d).sum(dim), a.to(d).sum(dim, true)}; },
                         sd + "sum over a dim: zeros or nothing");
      // Along an empty dim: no element to average or to pick, the CPU's error on both.
      if (shape[dim] == 0) {
        check_same_error([&](Device d) { return Outputs{a.to(d).mean(dim)}; }, sd + "mean over an empty dim");
        check_same_error([&](Device d) { return Outputs{a.to(d).argmax(dim)}; }, sd + "argmax over an empty dim");
      } else {
        check_same_outcome([&](Device d) { return Outputs{a.to(d).mean(dim)}; }, sd + "mean over a dim");
        check_same_outcome([&](Device d) { return Outputs{a.to(d).argmax(dim)}; }, sd + "argmax over a dim");
      }
      check_same_outcome([&](Device d) { return Outputs{ops::softmax(a.to(d), dim), ops::log_softmax(a.to(d), dim)}; },
                         sd + "softmax and log_softmax");
      check_same_outcome(
          [&](Device d) {
            Tensor x = leaf_on(a, d);
            ops::log_softmax(x, dim).sum().backward();
            return Outputs{x.grad()};
          },
          sd + "log_softmax backward");
      if (shape.rank() >= 2)
        check_same_outcome([&](Device d) { return Outputs{a.to(d).transpose(0, dim).contiguous()}; },
                           sd + "transposed copy");
    }
  }
}

TEST_CASE("cross-entropy of an empty batch or of no classes is the CPU's clear error on the device",
          "[cuda][softmax][edges]") {
  const Tensor no_rows = zeros({0, 5}), no_targets = zeros({0}, DType::Int64);
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(no_rows, no_targets), Catch::Contains("empty batch"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(no_rows.to(kGpu), no_targets.to(kGpu)), Catch::Contains("empty batch"));
  const Tensor no_classes = zeros({3, 0}), targets = zeros({3}, DType::Int64);
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(no_classes, targets), Catch::Contains("no classes"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(no_classes.to(kGpu), targets.to(kGpu)), Catch::Contains("no classes"));
  // The device is still usable: a loss right after matches the CPU.
  const Tensor x = random_cpu({4, 3}, 1010);
  const Tensor t = from_vector(std::vector<int64_t>{0, 2, 1, 2}, Shape{4}, DType::Int64);
  check_close(ops::softmax_cross_entropy(x.to(kGpu), t.to(kGpu)), ops::softmax_cross_entropy(x, t), 1e-5, 1e-5,
              "a loss after the errors");
}

TEST_CASE("matmul and linear with an empty M, N or K give the CPU's values and gradients", "[cuda][gemm][edges]") {
  struct Case {
    int64_t m, k, n;
  };
  // [M, K]·[K, N]: an empty output (M or N = 0: nothing to write) or an empty sum (K = 0: zeros,
  // the bias, or relu of the bias), and gradients that are empty sums in turn ({1, 0, 1}: [1, 0]
  // and [0, 1] operands; {3, 0, 4}: a [3, 0] one).
  const Case cases[] = {{0, 4, 3}, {3, 0, 4}, {3, 4, 0}, {0, 0, 0}, {1, 0, 1}, {1, 0, 5}};
  uint64_t seed = 1020;
  for (GemmImpl impl : {GemmImpl::Native, GemmImpl::Cublas}) {
    GemmImplScope scope(impl);
    for (const Case& c : cases) {
      const std::string s = "M=" + std::to_string(c.m) + " K=" + std::to_string(c.k) + " N=" + std::to_string(c.n) +
                            " impl=" + gemm_impl_name(impl) + ": ";
      const Tensor a = random_cpu({c.m, c.k}, ++seed), b = random_cpu({c.k, c.n}, ++seed);
      const Tensor w = random_cpu({c.n, c.k}, ++seed), bias = random_cpu({c.n}, ++seed);
      const Tensor g = random_cpu({c.m, c.n}, ++seed);
      check_same_outcome([&](Device d) { return Outputs{ops::matmul(a.to(d), b.to(d))}; }, s + "matmul");
      check_same_outcome(
          [&](Device d) {
            Tensor ad = leaf_on(a, d), bd = leaf_on(b, d);
            ops::matmul(ad, bd).backward(g.to(d));
            return Outputs{ad.grad(), bd.grad()};
          },
          s + "matmul gradients");
      for (bool relu : {false, true}) {
        // With K = 0, y = relu(bias) on every row and db = column sums of the (masked) g: at most
        // 3 terms in row order on both devices, exact up to 1e-6.
        check_same_outcome([&](Device d) { return Outputs{ops::linear(a.to(d), w.to(d), bias.to(d), relu)}; },
                           s + (relu ? "linear + relu" : "linear"), 1e-6);
        check_same_outcome(
            [&](Device d) {
              Tensor xd = leaf_on(a, d), wd = leaf_on(w, d), bd = leaf_on(bias, d);
              ops::linear(xd, wd, bd, relu).backward(g.to(d));
              return Outputs{xd.grad(), wd.grad(), bd.grad()};
            },
            s + (relu ? "linear + relu gradients" : "linear gradients"), 1e-6);
      }
    }
  }
}

TEST_CASE("copies, gathers, pools, conv, batch norm, dropout and random fills of empty tensors match the CPU",
          "[cuda][edges]") {
  const Tensor e = random_cpu({0, 5}, 1030), rows = random_cpu({2, 5}, 1031), some = random_cpu({4, 3}, 1032);
  check_same_outcome(
      [&](Device d) {
        return Outputs{e.to(d).narrow(1, 2, 0).contiguous(), ops::cat({e.to(d), rows.to(d), e.to(d)}),
                       ops::index_rows(e.to(d), {}), ops::index_rows(some.to(d), {})};
      },
      "narrow to nothing, cat with empty parts, gathers of no rows");
  check_same_outcome(
      [&](Device d) {
        Tensor filled = empty({0, 3}, TensorOptions(DType::Float32, d));
        filled.fill_(2.0);
        filled.copy_(zeros({0, 3}));
        return Outputs{filled};
      },
      "fill_ and copy_ of nothing");
  check_same_outcome(
      [&](Device d) {
        Generator gen(1033);
        const Tensor r = rand({0, 4}, TensorOptions(DType::Float32, d), &gen);
        const Tensor dropped = ops::dropout(e.to(d), 0.5, true, &gen);
        // The generator moved as on the CPU: the next draws agree bit for bit.
        return Outputs{r, dropped, rand({7}, TensorOptions(DType::Float32, d), &gen)};
      },
      "rand and dropout of nothing, and the draws after");
  for (const Shape& shape : {Shape{0, 2, 5, 5}, Shape{2, 0, 5, 5}, Shape{1, 0, 5, 5}}) {
    const Tensor x = random_cpu(shape, 1034);
    const std::string s = "x " + detail::make_message(shape) + ": ";
    check_same_outcome(
        [&](Device d) {
          Tensor xd = leaf_on(x, d);
          const Tensor m = ops::max_pool2d(xd, {3, 3}, Size2{2, 2}, {1, 1});
          const Tensor v = ops::avg_pool2d(xd, {2, 2});
          (m.sum() + v.sum()).backward();
          return Outputs{m, v, xd.grad()};
        },
        s + "max_pool2d and avg_pool2d, forward and backward");
  }
  // conv2d of an empty batch: y [0, 3, 5, 5], no gradient flows (dW and db zeros).
  const Tensor no_batch = random_cpu({0, 2, 5, 5}, 1035);
  const Tensor w = random_cpu({3, 2, 3, 3}, 1036), b = random_cpu({3}, 1037);
  check_same_outcome(
      [&](Device d) {
        Tensor xd = leaf_on(no_batch, d), wd = leaf_on(w, d), bd = leaf_on(b, d);
        const Tensor y = ops::conv2d(xd, wd, bd, {1, 1}, {1, 1});
        y.sum().backward();
        return Outputs{y, xd.grad(), wd.grad(), bd.grad()};
      },
      "conv2d of an empty batch");
  // Training over an empty batch has no variance: the CPU's error on both.
  check_same_error(
      [&](Device d) {
        return Outputs{ops::batch_norm(no_batch.to(d), Tensor(), Tensor(), Tensor(), Tensor(), true)};
      },
      "batch_norm training over an empty batch (an error)");
}

TEST_CASE("batch norm in evaluation over an empty batch gives dgamma = dbeta = 0 on the device",
          "[cuda][batch_norm][edges]") {
  // Σ over no element is 0. batch_norm_backward (batch_norm.cu, and the CPU's likewise) forms
  // dγ = (Σ dy·(x - mean))·invstd = 0·invstd from the forward's save_mean and save_invstd, so
  // core/ops/batch_norm.cpp runs the forward also for an empty x, which writes them from the
  // running statistics; left unwritten, dγ is NaN when that memory held NaN or inf. Freed NaN
  // blocks of their size just before the op make that the likely case on the device (the
  // caching allocator hands back a freed block of the same size).
  const Tensor x = random_cpu({0, 2, 5, 5}, 1038);
  const Tensor rm = random_cpu({2}, 1039).to(kGpu), rv = random_cpu({2}, 1040, 0.5, 2.0).to(kGpu);
  Tensor xd = x.to(kGpu).requires_grad_();
  Tensor gd = random_cpu({2}, 1041).to(kGpu).requires_grad_(), bd = random_cpu({2}, 1042).to(kGpu).requires_grad_();
  {
    std::vector<Tensor> poison;
    for (int i = 0; i < 4; ++i) poison.push_back(full({2}, kNaN, gpu_f32()));
  }
  const Tensor y = ops::batch_norm(xd, rm, rv, gd, bd, false);
  CHECK(y.shape() == x.shape());
  y.sum().backward();
  CHECK(xd.grad().shape() == x.shape());
  check_equal(gd.grad(), zeros({2}), "dgamma of an empty batch");
  check_equal(bd.grad(), zeros({2}), "dbeta of an empty batch");
}

TEST_CASE("batch norm in evaluation over zero channels runs forward and backward like the CPU",
          "[cuda][batch_norm][edges]") {
  // x [N, 0, 3]: no channel at all. batch_norm.cu launches its per-channel statistics and sums
  // kernels with one block per channel: with C = 0 a grid of 0 blocks, which CUDA refuses
  // (cudaErrorInvalidConfiguration), so its forward and backward return first; the CPU loops
  // over no channel.
  for (const Shape& shape : {Shape{1, 0, 3}, Shape{2, 0, 3}}) {
    const Tensor x = zeros(shape);
    check_same_outcome(
        [&](Device d) {
          Tensor xd = leaf_on(x, d);
          const Tensor y = ops::batch_norm(xd, zeros({0}, TensorOptions(DType::Float32, d)),
                                           ones({0}, TensorOptions(DType::Float32, d)), Tensor(), Tensor(), false);
          y.sum().backward();
          return Outputs{y, xd.grad()};
        },
        "batch_norm in evaluation over x " + detail::make_message(shape));
  }
}

// ============================================================================================
// Offset and non-contiguous views through elementwise kernels and copies
// ============================================================================================

TEST_CASE("the map kernel on outputs 1-3 floats past alignment peels a head, vectorises the body, writes the tail",
          "[cuda][elementwise][edges]") {
  // Through the backend directly: the op layer always writes a fresh (aligned) output, so only
  // here does map_kernel's scalar head run (Note [vector alignment], elementwise.cu). With the
  // output and both inputs at the same offset the head is 4 - offset elements, then float4s,
  // then a tail of (n - head) % 4; n from 1 (the head alone, clipped to n) to 4099. The output's
  // storage has sentinels on both sides: a head or tail that runs past the view shows.
  Backend& gpu = backend_for(kGpu);
  constexpr float kSentinel = -12345.0f;
  uint64_t seed = 1100;
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 31, 33, 1027, 4099}) {
    for (int64_t offset : {1, 2, 3}) {
      INFO("n " << n << ", offset " << offset);
      const Tensor a = random_cpu({n}, ++seed), b = random_cpu({n}, ++seed, 0.5, 2.0);
      const Tensor ag = offset_gpu(a, offset), bg = offset_gpu(b, offset);
      for (BinaryOp op : kBinaryOps) {
        Tensor storage = full({offset + n + 5}, kSentinel, gpu_f32());
        Tensor out = storage.narrow(0, offset, n);
        gpu.binary(op, ag, bg, out);
        check_close(out, apply_binary(op, a, b), kElementwiseAtol, 0.0, binary_op_name(op));
        check_untouched(storage, offset, n, kSentinel, binary_op_name(op));
      }
      // A broadcast scalar operand (the map kernel with one input), scalar on either side.
      const Tensor s = random_cpu({}, ++seed, 0.5, 2.0);
      const Tensor sg = ops::expand(s.to(kGpu), {n});
      Tensor storage = full({offset + n + 5}, kSentinel, gpu_f32());
      Tensor out = storage.narrow(0, offset, n);
      gpu.binary(BinaryOp::Div, ag, sg, out);
      check_close(out, a / s, kElementwiseAtol, 0.0, "offset / scalar");
      gpu.binary(BinaryOp::Sub, sg, ag, out);
      check_close(out, s - a, kElementwiseAtol, 0.0, "scalar - offset");
      check_untouched(storage, offset, n, kSentinel, "scalar ops");
      // In place (out is the first input), as the op layer runs the mean's scaling.
      Tensor inplace = offset_gpu(a, offset);
      gpu.binary(BinaryOp::Mul, inplace, bg, inplace);
      check_close(inplace, a * b, kElementwiseAtol, 0.0, "in place");
      // Inputs one and two floats out of phase with the output: the whole range runs scalar.
      const Tensor a2 = offset_gpu(a, (offset + 1) % 4), b2 = offset_gpu(b, (offset + 2) % 4);
      gpu.binary(BinaryOp::Add, a2, b2, out);
      check_close(out, a + b, kElementwiseAtol, 0.0, "inputs out of phase");
      check_untouched(storage, offset, n, kSentinel, "out of phase");
      // relu forward and backward into an offset output.
      gpu.relu_forward(ag, out);
      check_equal(out, ops::relu(a), "relu forward (exact)");
      Tensor dx_storage = full({offset + n + 5}, kSentinel, gpu_f32());
      Tensor dx = dx_storage.narrow(0, offset, n);
      gpu.relu_backward(bg, ag, dx);  // dy = b, y = a
      std::vector<float> want = b.to_vector<float>();
      const std::vector<float> av = a.to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) want[i] = av[i] > 0.0f ? want[i] : 0.0f;
      check_equal(dx, from_vector(want, Shape{n}, cpu_f32()), "relu backward (exact)");
      check_untouched(dx_storage, offset, n, kSentinel, "relu backward");
    }
  }
}

TEST_CASE("elementwise ops over narrowed, transposed, permuted and expanded views match the CPU",
          "[cuda][elementwise][edges]") {
  // The strided kernel (elementwise.cu) after collapse_geometry: views that start at an odd
  // element, transposes on one or both sides, a rank-5 permutation, a broadcast column against a
  // transposed view, and size-1 dims that must be dropped.
  const Tensor base = random_cpu({33, 9}, 1200), other = random_cpu({33, 9}, 1201, 0.5, 2.0);
  const Tensor base_g = base.to(kGpu), other_g = other.to(kGpu);
  for (BinaryOp op : kBinaryOps) {
    INFO(binary_op_name(op));
    // Columns 1..5 (stride 9, odd start) against columns 3..7.
    check_close(apply_binary(op, base_g.narrow(1, 1, 5), other_g.narrow(1, 3, 5)),
                apply_binary(op, base.narrow(1, 1, 5), other.narrow(1, 3, 5)), kElementwiseAtol, 0.0,
                "narrowed columns op narrowed columns");
    // Rows 1..31 (contiguous, odd offset) transposed against a transposed view of the other.
    check_close(apply_binary(op, base_g.narrow(0, 1, 31).t(), other_g.narrow(0, 2, 31).t()),
                apply_binary(op, base.narrow(0, 1, 31).t(), other.narrow(0, 2, 31).t()), kElementwiseAtol, 0.0,
                "two transposed offset views");
    // A broadcast column (stride 0 along the rows) against a transposed view.
    const Tensor col = random_cpu({9, 1}, 1202, 0.5, 2.0);
    check_close(apply_binary(op, col.to(kGpu), base_g.t()), apply_binary(op, col, base.t()), kElementwiseAtol, 0.0,
                "column op transposed");
    // Rank 5 with two dims swapped and size-1 dims between them.
    const Tensor r3 = random_cpu({4, 1, 5, 1, 6}, 1203), r3b = random_cpu({6, 1, 5, 1, 4}, 1204, 0.5, 2.0);
    check_close(apply_binary(op, r3.to(kGpu), r3b.to(kGpu).transpose(0, 4)),
                apply_binary(op, r3, r3b.transpose(0, 4)), kElementwiseAtol, 0.0, "permuted rank 5 with size-1 dims");
  }
}

TEST_CASE("the strided binary kernel's 64-bit index path (negative strides) matches the CPU",
          "[cuda][elementwise][edges]") {
  // fits_int32 (elementwise.cu) sends a view with a negative stride to the int64_t instantiation
  // of binary_strided_kernel, as it does views whose offsets pass 2^30 (too large to test here):
  // views that read the rows backwards, the columns backwards (merged with a contiguous operand
  // into one reversed dim by collapse_geometry), or both, against contiguous, transposed and
  // broadcast operands; and their copies (strided_copy with negative strides). make_view builds
  // them (the op layer has no flip).
  const int64_t r = 33, c = 17;
  const Tensor a = random_cpu({r, c}, 1250), b = random_cpu({r, c}, 1251, 0.5, 2.0);
  const Tensor bt = random_cpu({c, r}, 1252, 0.5, 2.0), row = random_cpu({c}, 1253, 0.5, 2.0);
  const auto reversed = [](const Tensor& t, bool rows, bool cols) {  // t contiguous [R, C]
    const int64_t R = t.shape()[0], C = t.shape()[1];
    const int64_t offset = t.offset() + (rows ? (R - 1) * C : 0) + (cols ? C - 1 : 0);
    return make_view(t, Shape{R, C}, Shape{rows ? -C : C, cols ? -1 : 1}, offset);
  };
  const Tensor ag = a.to(kGpu), bg = b.to(kGpu), btg = bt.to(kGpu), rowg = row.to(kGpu);
  const std::vector<float> av = a.to_vector<float>();
  for (int flip = 1; flip <= 3; ++flip) {
    const bool rows = (flip & 1) != 0, cols = (flip & 2) != 0;
    INFO("rows reversed " << rows << ", columns reversed " << cols);
    // The reference's own sanity: the CPU reads the reversed view as the host does.
    std::vector<float> want(av.size());
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        want[static_cast<size_t>(i * c + j)] = av[static_cast<size_t>((rows ? r - 1 - i : i) * c + (cols ? c - 1 - j : j))];
    REQUIRE(reversed(a, rows, cols).contiguous().to_vector<float>() == want);
    check_equal(reversed(ag, rows, cols).contiguous(), from_vector(want, Shape{r, c}, cpu_f32()),
                "copy of the reversed view (exact)");
    for (BinaryOp op : kBinaryOps) {
      INFO(binary_op_name(op));
      check_close(apply_binary(op, reversed(ag, rows, cols), bg), apply_binary(op, reversed(a, rows, cols), b),
                  kElementwiseAtol, 0.0, "reversed op contiguous");
      check_close(apply_binary(op, btg.t(), reversed(ag, rows, cols)), apply_binary(op, bt.t(), reversed(a, rows, cols)),
                  kElementwiseAtol, 0.0, "transposed op reversed");
      check_close(apply_binary(op, reversed(ag, rows, cols), rowg), apply_binary(op, reversed(a, rows, cols), row),
                  kElementwiseAtol, 0.0, "reversed op row broadcast");
    }
  }
}

TEST_CASE("copies into and out of non-contiguous device views match the CPU, float32 and int64",
          "[cuda][memory][edges]") {
  // strided_copy (memory.cu) behind copy_, fill_, contiguous, cat and to(): destination views that
  // are narrowed at an odd column and transposed, views of rank 8 (the most a Shape holds), 0-dim
  // and stride-0 sources, and 8-byte int64 words. Pure copies: exact.
  const Tensor src = random_cpu({5, 7}, 1300);
  Tensor dst_cpu = random_cpu({7, 9}, 1301);
  Tensor dst_gpu = dst_cpu.to(kGpu);
  dst_cpu.narrow(1, 1, 5).t().copy_(src);  // a [5, 7] view: stride (1, 9), offset 1
  dst_gpu.narrow(1, 1, 5).t().copy_(src);  // from the CPU into the device view
  check_equal(dst_gpu, dst_cpu, "copy_ from the CPU into a transposed, narrowed device view");
  dst_cpu.narrow(1, 1, 5).t().copy_(src * 2.0);
  dst_gpu.narrow(1, 1, 5).t().copy_(src.to(kGpu) * 2.0);  // device to device
  check_equal(dst_gpu, dst_cpu, "copy_ between device views");
  dst_cpu.narrow(0, 3, 2).t().fill_(-3.5);
  dst_gpu.narrow(0, 3, 2).t().fill_(-3.5);
  check_equal(dst_gpu, dst_cpu, "fill_ of a transposed view");
  check_equal(dst_gpu.narrow(1, 3, 5).t().to(Device::cpu()), dst_cpu.narrow(1, 3, 5).t().contiguous(),
              "a transposed device view to the CPU");
  check_equal(ops::cat({dst_gpu.t(), dst_gpu.narrow(1, 1, 7).t()}), ops::cat({dst_cpu.t(), dst_cpu.narrow(1, 1, 7).t()}),
              "cat of transposed views");
  // Rank 8, every dim of size 2 or 3, two of them swapped: the kernel's deepest unravel.
  const Tensor r8 = random_cpu({2, 3, 2, 2, 3, 2, 2, 3}, 1302);
  check_equal(r8.to(kGpu).transpose(1, 6).contiguous(), r8.transpose(1, 6).contiguous(), "rank 8 transpose");
  check_equal(r8.to(kGpu).transpose(0, 7).transpose(2, 5).contiguous(), r8.transpose(0, 7).transpose(2, 5).contiguous(),
              "rank 8, two swaps");
  // A 0-dim source expanded (stride 0 everywhere) and a 0-dim copy.
  const Tensor s = random_cpu({}, 1303);
  check_equal(ops::expand(s.to(kGpu), {3, 4}).contiguous(), ops::expand(s, {3, 4}).contiguous(), "0-dim expanded");
  check_equal(s.to(kGpu).clone(), s, "0-dim clone");
  // int64: 8-byte words through the same strided copy.
  Generator g(1304);
  const Tensor labels = randint(-1000, 1000, {6, 11}, DType::Int64, &g);
  check_equal(labels.to(kGpu).t().contiguous(), labels.t().contiguous(), "int64 transposed copy");
  Tensor ldst_cpu = randint(0, 3, {11, 8}, DType::Int64, &g);
  Tensor ldst_gpu = ldst_cpu.to(kGpu);
  ldst_cpu.narrow(1, 1, 6).copy_(labels.t());
  ldst_gpu.narrow(1, 1, 6).copy_(labels.to(kGpu).t());
  check_equal(ldst_gpu, ldst_cpu, "int64 copy_ into a narrowed view");
  check_equal(labels.to(kGpu).t().eq(labels.to(kGpu).t()), labels.t().eq(labels.t()), "eq of int64 transposed views");
}

TEST_CASE("cross-entropy with non-contiguous int64 targets and logits matches the CPU", "[cuda][softmax][edges]") {
  // targets every other element of an [N, 2] int64 tensor (a strided copy of 8-byte words before
  // the loss), logits a transposed view (a float copy): both made contiguous first.
  const int64_t n = 37, c = 11;
  Generator g(1310);
  const Tensor pairs = randint(0, c, {n, 2}, DType::Int64, &g);
  const Tensor t = make_view(pairs, Shape{n}, Shape{2}, pairs.offset() + 1);
  REQUIRE_FALSE(t.is_contiguous());
  const Tensor xt = random_cpu({c, n}, 1311, -4.0, 4.0);
  const Tensor x64 = xt.t().to(DType::Float64);
  Tensor xr = x64.clone().requires_grad_();
  Tensor lr = ops::softmax_cross_entropy(xr, t.contiguous());
  lr.backward();
  const Tensor pairs_g = pairs.to(kGpu);
  const Tensor tg = make_view(pairs_g, Shape{n}, Shape{2}, pairs_g.offset() + 1);
  REQUIRE_FALSE(tg.is_contiguous());
  Tensor xg = xt.to(kGpu).requires_grad_();
  Tensor lg = ops::softmax_cross_entropy(xg.t(), tg);
  lg.backward();
  check_close(lg, lr, 1e-5, 1e-5, "mean loss");  // as in the boundary test
  check_close(xg.grad().t(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, "dlogits through the transpose");
}

// ============================================================================================
// GEMM: M, N or K of 1, split K through the op layer, odd leading dimensions
// ============================================================================================

namespace {

// Note [GEMM tolerance] (test_cuda_gemm.cpp): the devices add the K products of each output in
// different orders, so their float32 results differ by rounding, bounded by a multiple of
// eps·Σ_p |a_p·b_p|; each element is compared against scale = |op(A)|·|op(B)| (+ |bias|):
//   |cuda - cpu| <= 1e-5 · scale + 1e-6,
// while a lost, doubled or misplaced product (an edge-tile or K-tail bug) moves an element by
// |a_p·b_p| ~ 0.25, far above that at these K (<= 4000).
constexpr double kGemmRel = 1e-5, kGemmAbs = 1e-6;

Tensor abs_cpu(const Tensor& t) {
  std::vector<float> v = t.to(Device::cpu()).contiguous().to_vector<float>();
  for (float& x : v) x = std::abs(x);
  return from_vector(v, t.shape(), cpu_f32());
}

// |op(A)|·|op(B)| + |bias| on every row, on the CPU (A, B, bias CPU float32).
Tensor gemm_scale(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m, int64_t n,
                  const Tensor& bias = Tensor()) {
  Tensor s = empty({m, n}, cpu_f32());
  cpu_backend().matmul(abs_cpu(a), abs_cpu(b), s, ta, tb);
  if (!bias.defined()) return s;
  std::vector<float> v = s.to_vector<float>();
  const std::vector<float> bv = abs_cpu(bias).to_vector<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(i * n + j)] += bv[static_cast<size_t>(j)];
  return from_vector(v, s.shape(), cpu_f32());
}

// |got - want| <= kGemmRel · scale + kGemmAbs for every element (NaN fails); reports the worst.
void check_gemm(const Tensor& got, const Tensor& want, const Tensor& scale, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(scale.shape() == want.shape());
  const std::vector<float> g = got.to(Device::cpu()).contiguous().to_vector<float>();
  const std::vector<float> w = want.to(Device::cpu()).contiguous().to_vector<float>();
  const std::vector<float> s = scale.to(Device::cpu()).contiguous().to_vector<float>();
  size_t worst = 0, bad = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(static_cast<double>(g[i]) - w[i]);
    const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - (kGemmRel * s[i] + kGemmAbs);
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  INFO(bad << " of " << g.size() << " elements outside; worst element " << worst << ": got "
            << (g.empty() ? 0.f : g[worst]) << ", want " << (w.empty() ? 0.f : w[worst]) << ", scale "
            << (s.empty() ? 0.f : s[worst]));
  CHECK(bad == 0);
}

std::string plan_str(const cuda::NativeGemmPlan& p) {
  return std::string(cuda::gemm_tile_name(p.tile)) + ", " + std::to_string(p.splits) + " K slice(s) of " +
         std::to_string(p.k_split);
}

struct Mnk {
  int64_t m, n, k;
};
// Degenerate shapes through matmul and linear: single outputs, single rows and columns, K = 1
// (one partial K step, the rest zero-filled), and long K over M = 1 or N = 1 (split K).
const Mnk kThinShapes[] = {{1, 1, 1},   {1, 257, 1},  {257, 1, 1},    {33, 65, 1},
                           {1, 300, 70}, {65, 1, 300}, {1, 129, 1000}, {1, 1, 4000}};
// Their plans on a 132-SM H200 (gemm_plan.cpp): the small tile whole, and split K for the last
// three: 65x1x300 in 2 slices of 160, 1x129x1000 in 7 of 144, 1x1x4000 in 28 of 144.
constexpr int kH200Sms = 132;
const int64_t kThinSplitsOn132[] = {1, 1, 1, 1, 1, 2, 7, 28};

}  // namespace

TEST_CASE("the thin GEMM shapes take the small tile, split K for the long ones, on a 132-SM H200",
          "[cuda][gemm][edges]") {
  // Host code: holds the table above to the heuristic whatever the device.
  for (size_t i = 0; i < std::size(kThinShapes); ++i) {
    const Mnk& s = kThinShapes[i];
    const cuda::NativeGemmPlan p = cuda::native_gemm_plan(s.m, s.n, s.k, kH200Sms);
    INFO("M=" << s.m << " N=" << s.n << " K=" << s.k << ": " << plan_str(p));
    CHECK(p.tile == cuda::GemmTile::Small32x32);
    CHECK(p.splits == kThinSplitsOn132[i]);
  }
}

TEST_CASE("matmul and linear with M, N or K of 1 match the cpu, plain, transposed and offset, native and cublas",
          "[cuda][gemm][linear][edges]") {
  const int sms = device_sm_count();
  uint64_t seed = 1400;
  for (const Mnk& s : kThinShapes) {
    const cuda::NativeGemmPlan plan = cuda::native_gemm_plan(s.m, s.n, s.k, sms);
    const Tensor a = random_cpu({s.m, s.k}, ++seed), b = random_cpu({s.k, s.n}, ++seed);
    const Tensor w = random_cpu({s.n, s.k}, ++seed), bias = random_cpu({s.n}, ++seed);
    const Tensor g = random_cpu({s.m, s.n}, ++seed);
    const Tensor want = ops::matmul(a, b);
    const Tensor scale = gemm_scale(a, b, false, false, s.m, s.n);
    for (GemmImpl impl : {GemmImpl::Native, GemmImpl::Cublas}) {
      GemmImplScope scope(impl);
      INFO("M=" << s.m << " N=" << s.n << " K=" << s.k << " impl=" << gemm_impl_name(impl) << "; native plan on "
                << sms << " SMs: " << plan_str(plan));
      check_gemm(ops::matmul(a.to(kGpu), b.to(kGpu)), want, scale, "matmul");
      // Operands given as transposed views (copied contiguous by the op) ...
      const Tensor at = a.t().contiguous().to(kGpu), bt = b.t().contiguous().to(kGpu);
      check_gemm(ops::matmul(at.t(), bt.t()), want, scale, "matmul of transposed views");
      // ... and as views one float into their storage (the scalar load path of the kernel).
      check_gemm(ops::matmul(offset_gpu(a, 1), offset_gpu(b, 3)), want, scale, "matmul of offset views");
      // linear with and without bias and the fused relu (1-Lipschitz: the bound holds after it).
      for (bool with_bias : {false, true}) {
        for (bool relu : {false, true}) {
          const Tensor bc = with_bias ? bias : Tensor(), bd = with_bias ? bias.to(kGpu) : Tensor();
          const Tensor lc = ops::linear(a, w, bc, relu);
          const Tensor ld = ops::linear(offset_gpu(a, 1), w.to(kGpu), bd, relu);
          check_gemm(ld, lc, gemm_scale(a, w, false, true, s.m, s.n, bc),
                     std::string("linear") + (with_bias ? " +bias" : "") + (relu ? " +relu" : ""));
        }
      }
      // Gradients of linear (no relu: a pre-activation within rounding of 0 could flip its mask):
      // dx = g·W, dW = gᵀ·x (K = M), db = column sums of g (scale Σ |g|).
      Tensor xc = a.clone().requires_grad_(), wc = w.clone().requires_grad_(), bc = bias.clone().requires_grad_();
      ops::linear(xc, wc, bc).backward(g);
      Tensor xd = a.to(kGpu).requires_grad_(), wd = w.to(kGpu).requires_grad_(), bd = bias.to(kGpu).requires_grad_();
      ops::linear(xd, wd, bd).backward(g.to(kGpu));
      check_gemm(xd.grad(), xc.grad(), gemm_scale(g, w, false, false, s.m, s.k), "linear dx");
      check_gemm(wd.grad(), wc.grad(), gemm_scale(g, a, true, false, s.n, s.k), "linear dW");
      check_gemm(bd.grad(), bc.grad(), abs_cpu(g).sum(0), "linear db");
    }
  }
}

namespace {

// C = act(op(A)·op(B) + bias) on the native kernel with `plan`, every matrix stored with a leading
// dimension wider than its rows: the padding of A and B holds NaN (a read of it poisons the
// output) and C's padding a sentinel (a write to it shows). A's leading dimension is odd in even
// variants (scalar loads only) and a multiple of 4 in odd ones (float4 loads up to the edge, never
// past it); B's the other way round; C's a multiple of 4 in variants 0 and 3 (float4 stores
// guarded at the edge), odd in 1 and 2.
void check_padded_native_gemm(const Mnk& s, bool ta, bool tb, int variant, const cuda::NativeGemmPlan& plan,
                              bool epilogue, uint64_t& seed) {
  const auto wider = [](int64_t cols, bool multiple_of_4) {
    if (multiple_of_4) return (cols + 1 + 3) / 4 * 4;  // at least one float of padding
    return cols % 2 == 0 ? cols + 1 : cols + 2;         // odd
  };
  const int64_t a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
  const int64_t b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
  const int64_t lda = wider(a_cols, variant % 2 == 1), ldb = wider(b_cols, variant % 2 == 0);
  const int64_t ldc = wider(s.n, variant == 0 || variant == 3);
  const Tensor a = random_cpu({a_rows, a_cols}, ++seed), b = random_cpu({b_rows, b_cols}, ++seed);
  const Tensor bias = random_cpu({s.n}, ++seed);
  Tensor product = empty({s.m, s.n}, cpu_f32());
  cpu_backend().matmul(a, b, product, ta, tb);
  std::vector<float> w = product.to_vector<float>();
  const std::vector<float> bv = bias.to_vector<float>();
  if (epilogue)
    for (size_t i = 0; i < w.size(); ++i) {
      const float v = w[i] + bv[i % static_cast<size_t>(s.n)];
      w[i] = v < 0.0f ? 0.0f : v;
    }
  const Tensor want = from_vector(w, Shape{s.m, s.n}, cpu_f32());

  constexpr float kSentinel = -777.0f;
  Tensor a_store = full({a_rows, lda}, kNaN, gpu_f32());
  a_store.narrow(1, 0, a_cols).copy_(a);
  Tensor b_store = full({b_rows, ldb}, kNaN, gpu_f32());
  b_store.narrow(1, 0, b_cols).copy_(b);
  Tensor c_store = full({s.m, ldc}, kSentinel, gpu_f32());
  const Tensor bias_g = bias.to(kGpu);
  Tensor workspace = plan.workspace_floats() > 0 ? full({plan.workspace_floats()}, kNaN, gpu_f32()) : Tensor();
  cuda::GemmProblem p;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.a = a_store.data<float>();
  p.lda = lda;
  p.trans_a = ta;
  p.b = b_store.data<float>();
  p.ldb = ldb;
  p.trans_b = tb;
  p.c = c_store.data<float>();
  p.ldc = ldc;
  p.bias = epilogue ? bias_g.data<float>() : nullptr;
  p.relu = epilogue;
  backend_for(kGpu).synchronize();  // the stores were written on the backend's stream
  cuda::native_sgemm_with_plan(p, plan, device_sm_count(), workspace.defined() ? workspace.data<float>() : nullptr,
                               nullptr);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  const std::string what = plan_str(plan) + " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) +
                           " lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) + " ldc=" +
                           std::to_string(ldc) + (epilogue ? ", bias+relu" : "");
  check_gemm(c_store.narrow(1, 0, s.n), want, gemm_scale(a, b, ta, tb, s.m, s.n, epilogue ? bias : Tensor()), what);
  // C's padding columns still hold the sentinel.
  const std::vector<float> c = c_store.to(Device::cpu()).to_vector<float>();
  size_t touched = 0;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = s.n; j < ldc; ++j) touched += c[static_cast<size_t>(i * ldc + j)] == kSentinel ? 0 : 1;
  INFO(what << ": " << touched << " padding element(s) of C written");
  CHECK(touched == 0);
}

}  // namespace

TEST_CASE("the native GEMM reads and writes matrices with leading dimensions wider than their rows, every tile",
          "[cuda][gemm][edges]") {
  // linear.cu always passes ld = the row length; the kernel's contract (gemm.h) allows any
  // ld >= it, which only a direct call reaches. Per tile (all four, the K16 candidate included)
  // and transpose variant: M one past the block tile with N inside one partial tile (variants 0
  // and 1), or N three past it with M inside one (2 and 3), K = 2·BK + 3 (two full K steps and a
  // tail of 3); variants 1 and 3 in two K slices (the split-K partials and their sum), 2 and 3
  // with the bias + ReLU epilogue.
  uint64_t seed = 1500;
  for (cuda::GemmTile tile : cuda::kGemmTiles) {
    const cuda::GemmTileShape t = cuda::gemm_tile_shape(tile);
    for (int variant = 0; variant < 4; ++variant) {
      const bool ta = variant == 1 || variant == 3, tb = variant >= 2;
      const Mnk s = variant < 2 ? Mnk{t.bm + 1, t.bn / 2 + 3, 2 * t.bk + 3} : Mnk{t.bm / 2 + 1, t.bn + 3, 2 * t.bk + 3};
      const int64_t splits = variant % 2 == 1 ? 2 : 1;
      const cuda::NativeGemmPlan plan = cuda::native_gemm_plan_with(tile, splits, s.m, s.n, s.k);
      INFO("M=" << s.m << " N=" << s.n << " K=" << s.k << ": " << plan_str(plan));
      REQUIRE_NOTHROW(cuda::check_gemm_plan(plan, s.m, s.n, s.k));
      REQUIRE(plan.splits == splits);
      check_padded_native_gemm(s, ta, tb, variant, plan, variant >= 2, seed);
    }
  }
}

// ============================================================================================
// Max-pool ties and NaN
// ============================================================================================

namespace {

struct PoolGeometry {
  Size2 kernel, stride, padding;
};
// The CPU's branch-free 2x2 path (kernels/cpu/pool.cpp) and its general loop, overlapping windows
// (stride < kernel), padding (clipped windows), a non-square kernel.
const PoolGeometry kPoolGeometries[] = {{{2, 2}, {2, 2}, {0, 0}},
                                        {{3, 3}, {1, 1}, {1, 1}},
                                        {{3, 3}, {2, 2}, {1, 1}},
                                        {{2, 2}, {1, 1}, {0, 0}},
                                        {{2, 3}, {1, 2}, {1, 1}}};

// max_pool2d forward and the gradient of a weighted sum (weights small integers: every dx is an
// exact sum, so the element each output's gradient lands on must be the CPU's).
void check_max_pool(const Tensor& x, const PoolGeometry& pg, uint64_t seed, const std::string& what) {
  Tensor xc = x.clone().requires_grad_();
  Tensor xd = x.to(kGpu).requires_grad_();
  const Tensor yc = ops::max_pool2d(xc, pg.kernel, pg.stride, pg.padding);
  const Tensor yd = ops::max_pool2d(xd, pg.kernel, pg.stride, pg.padding);
  // Max moves values: exact, NaN matched by NaN.
  check_close(yd, yc, 0.0, 0.0, what + ": forward");
  const Tensor dy = small_integers(yc.shape(), seed) + 1.0;  // >= 1: a gradient sent nowhere shows
  yc.backward(dy);
  yd.backward(dy.to(kGpu));
  check_equal(xd.grad(), xc.grad(), what + ": gradient");
}

}  // namespace

TEST_CASE("max_pool2d sends each gradient to the CPU's element when the window has ties", "[cuda][pool][edges]") {
  uint64_t seed = 1600;
  for (const PoolGeometry& pg : kPoolGeometries) {
    INFO("kernel (" << pg.kernel[0] << ", " << pg.kernel[1] << "), stride (" << pg.stride[0] << ", " << pg.stride[1]
                    << "), padding (" << pg.padding[0] << ", " << pg.padding[1] << ")");
    check_max_pool(full({2, 3, 7, 9}, 1.5), pg, ++seed, "constant input: every window one tie");
    check_max_pool(full({1, 2, 6, 8}, -kInf), pg, ++seed, "all -inf");
    const Tensor binary = small_integers({2, 3, 7, 9}, ++seed, 2);
    check_max_pool(binary, pg, ++seed, "values in {0, 1}: ties in most windows");
  }
}

TEST_CASE("max_pool2d and avg_pool2d propagate NaN like the CPU, and the gradient follows the first NaN",
          "[cuda][pool][edges]") {
  uint64_t seed = 1700;
  for (const PoolGeometry& pg : kPoolGeometries) {
    INFO("kernel (" << pg.kernel[0] << ", " << pg.kernel[1] << "), stride (" << pg.stride[0] << ", " << pg.stride[1]
                    << "), padding (" << pg.padding[0] << ", " << pg.padding[1] << ")");
    // About one element in 8 NaN (some windows with two or more, some with one at the window's
    // first element), the rest small integers with ties, and a few infinities.
    const int64_t n = 2, c = 3, h = 7, w = 9;
    std::vector<double> v = small_integers({n, c, h, w}, ++seed, 4).to(DType::Float64).to_vector<double>();
    Generator g(++seed);
    const std::vector<int64_t> pick = randint(0, 16, {n * c * h * w}, DType::Int64, &g).to_vector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      if (pick[i] < 2) v[i] = kNaN;
      else if (pick[i] == 2) v[i] = kInf;
      else if (pick[i] == 3) v[i] = -kInf;
    }
    v[0] = kNaN;  // the first element of the first window
    const Tensor x = from_vector(v, Shape{n, c, h, w}, DType::Float32);
    check_max_pool(x, pg, ++seed, "NaN, inf and ties");
    // avg: a NaN (or +inf with -inf) in a window makes its mean NaN; the rest sums <= 9 values
    // in another order: 1e-6.
    const Tensor ac = ops::avg_pool2d(x, pg.kernel, pg.stride, pg.padding);
    const Tensor ad = ops::avg_pool2d(x.to(kGpu), pg.kernel, pg.stride, pg.padding);
    check_close(ad, ac, 1e-6, 1e-6, "avg_pool2d forward");
  }
}

// ============================================================================================
// Batch norm: one channel, many channels, two values per channel
// ============================================================================================

TEST_CASE("batch_norm with one channel, 257 channels, rank 2 and the fewest values per channel matches the CPU",
          "[cuda][batch_norm][edges]") {
  struct Case {
    Shape shape;
    const char* what;
  };
  // Stats and backward sums run one block per channel; the elementwise and per-channel copy
  // kernels grid-stride over 256-thread blocks: 1 channel (one block), 257 channels (one past a
  // block of channels), [N, C] input (S = 1), [N, C, S] with N·S = 2 (the fewest training allows).
  const Case cases[] = {{{3, 1, 5, 7}, "one channel"},
                        {{2, 257, 1, 3}, "257 channels"},
                        {{40, 33}, "rank 2"},
                        {{1, 5, 2}, "two values per channel"},
                        {{2, 3}, "rank 2, two values per channel"}};
  uint64_t seed = 1800;
  for (const Case& k : cases) {
    const int64_t channels = k.shape[1];
    for (bool training : {true, false}) {
      INFO(k.what << " " << k.shape << (training ? ", training" : ", eval"));
      // With two values per channel x̂ = ±1 whatever x, and dx is a difference of nearly equal
      // terms scaled by invstd: values at least 0.25 apart keep invstd <= ~8.
      Tensor x = random_cpu(k.shape, ++seed, -2.0, 3.0);
      if (k.shape.numel() / channels == 2) {
        std::vector<float> v = x.to_vector<float>();
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7) % 5) * 0.5f - 1.0f + 0.01f * static_cast<float>(i % 3);
        x = from_vector(v, k.shape, cpu_f32());
      }
      const Tensor w = random_cpu({channels}, ++seed), b = random_cpu({channels}, ++seed);
      const Tensor g = random_cpu(k.shape, ++seed);
      Tensor rm_cpu = random_cpu({channels}, ++seed), rv_cpu = random_cpu({channels}, ++seed, 0.5, 2.0);
      Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
      Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
      Tensor xd = x.to(kGpu).requires_grad_(), wd = w.to(kGpu).requires_grad_(), bd = b.to(kGpu).requires_grad_();
      const Tensor yc = ops::batch_norm(xc, rm_cpu, rv_cpu, wc, bc, training, 0.1, 1e-5);
      const Tensor yd = ops::batch_norm(xd, rm_gpu, rv_gpu, wd, bd, training, 0.1, 1e-5);
      yc.backward(g);
      yd.backward(g.to(kGpu));
      // Normalised values of size ~3 from float32 statistics (double on the CPU) over at most
      // 140 values: 1e-4 covers the summation orders; the gradients carry the same relative error.
      check_close(yd, yc, 1e-4, 1e-4, "forward");
      check_close(xd.grad(), xc.grad(), 1e-4, 1e-4, "dx");
      check_close(wd.grad(), wc.grad(), 1e-4, 1e-4, "dgamma");
      check_close(bd.grad(), bc.grad(), 1e-4, 1e-4, "dbeta");
      check_close(rm_gpu, rm_cpu, 1e-5, 1e-5, "running_mean");
      check_close(rv_gpu, rv_cpu, 1e-5, 1e-5, "running_var");
    }
  }
}

// ============================================================================================
// Dropout tails, split-sum boundaries
// ============================================================================================

TEST_CASE("dropout draws the CPU's mask for odd sizes, p = 1 and transposed inputs", "[cuda][dropout][edges]") {
  // dropout_mask (dropout.cu) grid-strides over the elements: sizes not a multiple of the block
  // (1, 257, 3 x 85) and beyond one pass of the grid (70001); p = 1 (all zero), p close to 1; a
  // transposed input (the mask is drawn over x's shape, then the strided multiply). x times the
  // same 0 or 1/(1 - p) in float32: exact.
  uint64_t seed = 1900;
  for (const Shape& shape : {Shape{1}, Shape{257}, Shape{3, 85}, Shape{70001}}) {
    for (double p : {0.25, 0.999, 1.0}) {
      INFO("shape " << shape << ", p " << p);
      const Tensor x = random_cpu(shape, ++seed);
      Generator ga(seed), gb(seed);
      Tensor xc = x.clone().requires_grad_();
      Tensor xd = x.to(kGpu).requires_grad_();
      const Tensor yc = ops::dropout(xc, p, true, &ga);
      const Tensor yd = ops::dropout(xd, p, true, &gb);
      check_equal(yd, yc, "forward");
      const Tensor g = random_cpu(shape, ++seed);
      yc.backward(g);
      yd.backward(g.to(kGpu));
      check_equal(xd.grad(), xc.grad(), "backward");
    }
  }
  const Tensor xt = random_cpu({85, 3}, ++seed);
  Generator ga(seed), gb(seed);
  check_equal(ops::dropout(xt.to(kGpu).t(), 0.5, true, &gb), ops::dropout(xt.t(), 0.5, true, &ga),
              "dropout of a transposed view");
}

TEST_CASE("sums at the split boundaries of reduce.cu match the CPU exactly on small integers", "[cuda][reduce][edges]") {
  // Row sums split when n >= 2·16384 (kMinSplitElements) and the rows are few; chunks are
  // multiples of 4, the last one shorter: n = 32767 (no split), 32768 (two float4 chunks), 32769
  // (scalar, a last chunk of 1), 65537. Column sums split at n >= 2·64 rows (kMinSplitRows):
  // 127, 128, 129 rows, with inner widths of 3 (tile of 4 columns) and 33 (a second, partial tile
  // of 32). The split decision depends on the device's multiprocessor count, the values do not.
  uint64_t seed = 2000;
  for (int64_t n : {32767, 32768, 32769, 65537}) {
    INFO("row of " << n);
    const Tensor k = small_integers({1, n}, ++seed);
    check_equal(k.to(kGpu).sum(1), k.sum(1), "row sum (exact)");
    check_equal(offset_gpu(k, 3).sum(1), k.sum(1), "offset row sum (exact)");
    const Tensor k2 = small_integers({3, n}, ++seed);
    check_equal(k2.to(kGpu).sum(1), k2.sum(1), "three rows (exact)");
  }
  for (int64_t n : {127, 128, 129}) {
    for (int64_t inner : {3, 33}) {
      INFO(n << " rows of " << inner);
      const Tensor k = small_integers({n, inner}, ++seed);
      check_equal(k.to(kGpu).sum(0), k.sum(0), "column sums (exact)");
      const Tensor k3 = small_integers({2, n, inner}, ++seed);
      check_equal(k3.to(kGpu).sum(1), k3.sum(1), "middle-dim sums (exact)");
    }
  }
}
