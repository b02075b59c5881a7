// kernels/cuda/softmax.cu and cross_entropy.cu through the public ops: log_softmax and softmax
// forward and backward, and softmax-cross-entropy (forward, separate backward, fused) for C from 1
// to 131072 — every row strategy (warp per row, block per row with and without the register
// cache, float4 and scalar loads) — against a float64 CPU reference; saturated rows (logits at
// ±80 or near 1000) to a few eps, unaligned rows, masked (-inf) logits, huge logits, and the
// out-of-range target error that leaves the device usable.
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/backend.h"
#include "tests/softmax_saturated.h"

using namespace minidl;
using namespace minidl::cuda_test;
using minidl::softmax_saturated::below_row_max;
using minidl::softmax_saturated::check_within;
using minidl::softmax_saturated::kEps;
using minidl::softmax_saturated::rows_name;
using minidl::softmax_saturated::saturated_logits;
using minidl::softmax_saturated::targets_for;

namespace {

// Column counts that reach every kernel variant: warp per row (1..1024, each register width),
// block per row with scalar loads (1025, 131071: cols % 4 != 0), float4 with the register
// cache of 2, 4 and 8 float4 per thread (1028, 4096, 16384, 20000, 32768), and float4 streaming
// (32772, 131072).
const int64_t kCols[] = {1,    2,     10,    31,    33,    100,   1000,   1024,  1025,
                         1028, 4096, 16384, 20000, 32768, 32772, 131071, 131072};

// Few rows for the widest rows: the CPU float64 reference stays fast.
std::vector<int64_t> row_counts(int64_t cols) {
  if (cols > 20000) return {1, 3};
  return {1, 3, 65};
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (double v : t.to(Device::cpu()).to(DType::Float64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// A contiguous device view with the values of `cpu_values` that starts 4 bytes past alignment.
Tensor unaligned_gpu(const Tensor& cpu_values) {
  const int64_t n = cpu_values.numel();
  Tensor big = zeros({n + 1}, TensorOptions(DType::Float32, kGpu));
  Tensor view = big.narrow(0, 1, n);
  view.copy_(cpu_values.reshape({n}));
  return view.reshape(cpu_values.shape());
}

Tensor random_targets(int64_t n, int64_t classes, uint64_t seed) {
  Generator g(seed);
  return randint(0, classes, {n}, DType::Int64, &g);
}

// ---- saturated rows: Note [softmax at the logits' scale] (core/ops/softmax.cpp) ----

// The device's few ulps: expf (2 ulp, the CUDA math library's bound) once or twice (the
// register-cached kernels compute exp(x_j - m_t)·exp(m_t - m), m_t a thread's max, whose
// subtractions add up to |x_j - m|), 1/s and up to two products (1/2 ulp each), logf (1 ulp), and
// the relative error of s, a float sum of exps in a fixed tree (terms of 2 ulp each, ~1/2 ulp per
// level of addition that matters; a few ulp on these rows, where s is dominated by its largest
// terms): 16 eps.
constexpr softmax_saturated::Tolerances kSaturatedTol{16.0};

}  // namespace

// Tolerances against the float64 reference, from the float32 error of the GPU side (inputs in
// [-4, 4), so |x - m| <= 8):
//   softmax p = exp(x - m) / s: x - m is exact or off by half an ulp of |x - m| (<= 4.8e-7
//     relative in p); expf, 1/s, the product and the sum s add a few ulp: 1e-5 relative, with room.
//   log_softmax y = (x - m) - log s: the same half ulp of |x - m| and a few ulp of log s
//     (<= log C ≈ 12): ~1e-6 absolute on values up to ~20: 1e-5 absolute + relative.
constexpr double kSoftmaxRtol = 1e-5;
constexpr double kLogSoftmaxTol = 1e-5;

TEST_CASE("log_softmax and softmax on the device match float64 for C from 1 to 131072", "[cuda][softmax]") {
  uint64_t seed = 1;
  for (int64_t cols : kCols) {
    for (int64_t rows : row_counts(cols)) {
      INFO("[" << rows << ", " << cols << "]");
      const Tensor x = random_cpu({rows, cols}, ++seed, -4.0, 4.0);
      const Tensor x64 = x.to(DType::Float64);
      check_close(ops::softmax(x.to(kGpu), 1), ops::softmax(x64, 1), 0.0, kSoftmaxRtol, "softmax");
      check_close(ops::log_softmax(x.to(kGpu), 1), ops::log_softmax(x64, 1), kLogSoftmaxTol, kLogSoftmaxTol,
                  "log_softmax");
    }
  }
}

TEST_CASE("log_softmax and softmax backward on the device match float64", "[cuda][softmax]") {
  uint64_t seed = 1000;
  for (int64_t cols : kCols) {
    for (int64_t rows : row_counts(cols)) {
      INFO("[" << rows << ", " << cols << "]");
      const Tensor x = random_cpu({rows, cols}, ++seed, -4.0, 4.0);
      const Tensor g = random_cpu({rows, cols}, ++seed);
      for (bool log : {true, false}) {
        Tensor xr = x.to(DType::Float64).requires_grad_();
        (log ? ops::log_softmax(xr, 1) : ops::softmax(xr, 1)).backward(g.to(DType::Float64));
        Tensor xg = x.to(kGpu).detach().requires_grad_();
        (log ? ops::log_softmax(xg, 1) : ops::softmax(xg, 1)).backward(g.to(kGpu));
        // log_softmax: dx = dy - p·Σdy, O(1) values with ~eps·|dy| error: 1e-5 absolute + relative.
        // softmax: dx = p·(dy - Σ dy·p) cancels where dy ≈ Σ dy·p, so its absolute part scales with
        // the largest |dx| of the tensor (the p's scale): 1e-5 of it, plus 1e-5 relative.
        const double atol = log ? 1e-5 : 1e-5 * max_abs(xr.grad());
        check_close(xg.grad(), xr.grad(), atol, 1e-5, log ? "log_softmax backward" : "softmax backward");
      }
    }
  }
}

TEST_CASE("softmax along a leading dim and of 3-d tensors on the device matches the CPU", "[cuda][softmax]") {
  const Tensor x = random_cpu({37, 6, 11}, 2000, -4.0, 4.0);
  const Tensor x64 = x.to(DType::Float64);
  for (int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    check_close(ops::softmax(x.to(kGpu), dim), ops::softmax(x64, dim), 0.0, kSoftmaxRtol, "softmax");
    check_close(ops::log_softmax(x.to(kGpu), dim), ops::log_softmax(x64, dim), kLogSoftmaxTol, kLogSoftmaxTol,
                "log_softmax");
  }
}

TEST_CASE("softmax of rows that start off a 16-byte boundary matches the CPU", "[cuda][softmax]") {
  for (int64_t cols : {100, 1028, 5000, 32768}) {
    const int64_t rows = 3;
    INFO("cols " << cols);
    const Tensor x = random_cpu({rows, cols}, 3000 + static_cast<uint64_t>(cols), -4.0, 4.0);
    const Tensor g = random_cpu({rows, cols}, 3001 + static_cast<uint64_t>(cols));
    const Tensor xu = unaligned_gpu(x);
    REQUIRE(xu.is_contiguous());
    check_close(ops::softmax(xu, 1), ops::softmax(x.to(DType::Float64), 1), 0.0, kSoftmaxRtol, "softmax");
    check_close(ops::log_softmax(xu, 1), ops::log_softmax(x.to(DType::Float64), 1), kLogSoftmaxTol, kLogSoftmaxTol,
                "log_softmax");
    // Backward with an unaligned upstream gradient (dy) and an aligned forward output (y).
    Tensor xr = x.to(DType::Float64).requires_grad_();
    ops::log_softmax(xr, 1).backward(g.to(DType::Float64));
    Tensor xg = x.to(kGpu).detach().requires_grad_();
    ops::log_softmax(xg, 1).backward(unaligned_gpu(g));
    check_close(xg.grad(), xr.grad(), 1e-5, 1e-5, "log_softmax backward, unaligned dy");
    // Cross-entropy over unaligned logits.
    const Tensor t = random_targets(rows, cols, 3002 + static_cast<uint64_t>(cols));
    check_close(ops::softmax_cross_entropy(xu, t.to(kGpu), ops::Reduction::None),
                ops::softmax_cross_entropy(x.to(DType::Float64), t, ops::Reduction::None), 1e-5, 1e-5,
                "cross-entropy of unaligned logits");
  }
}

TEST_CASE("masked (-inf) logits get zero probability on the device, as on the CPU", "[cuda][softmax]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t cols : {40, 2000, 32768}) {
    INFO("cols " << cols);
    // Column 0 finite (the CPU's running max starts there), then every column but each 97th
    // masked: whole lanes and threads see only -inf.
    std::vector<double> v(static_cast<size_t>(2 * cols));
    const std::vector<double> noise =
        random_cpu({2 * cols}, 4001 + static_cast<uint64_t>(cols)).to(DType::Float64).to_vector<double>();
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        v[i] = (c == 0 || c % 97 == 0) ? noise[i] : -inf;
      }
    const Tensor x = from_vector(v, {2, cols}, DType::Float32);
    const Tensor x64 = x.to(DType::Float64);
    check_close(ops::softmax(x.to(kGpu), 1), ops::softmax(x64, 1), 0.0, kSoftmaxRtol, "softmax");
    const Tensor t = zeros({2}, DType::Int64);  // the target is an unmasked column
    Tensor xr = x64.clone().requires_grad_();
    Tensor lr = ops::softmax_cross_entropy(xr, t);
    lr.backward();
    Tensor xg = x.to(kGpu).detach().requires_grad_();
    Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu));
    lg.backward();
    check_close(lg, lr, 1e-5, 1e-5, "loss");
    // Masked columns are exactly 0 on both sides; the others as in the cross-entropy test below.
    check_close(xg.grad(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, "dlogits (0 at masked columns)");
  }
}

TEST_CASE("cross-entropy loss and gradients on the device match float64, fused and separate", "[cuda][softmax]") {
  uint64_t seed = 5000;
  const ops::Reduction reductions[] = {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None};
  for (int64_t cols : {int64_t{2}, int64_t{10}, int64_t{31}, int64_t{1000}, int64_t{1025}, int64_t{4096},
                       int64_t{32768}, int64_t{131072}}) {
    for (int64_t rows : row_counts(cols)) {
      const Tensor x = random_cpu({rows, cols}, ++seed, -4.0, 4.0);
      const Tensor t = random_targets(rows, cols, ++seed);
      const Tensor w = random_cpu({rows}, ++seed);  // upstream gradient of the per-row losses (None)
      for (ops::Reduction red : reductions) {
        INFO("[" << rows << ", " << cols << "], reduction " << static_cast<int>(red));
        Tensor xr = x.to(DType::Float64).requires_grad_();
        Tensor lr = ops::softmax_cross_entropy(xr, t, red);
        if (red == ops::Reduction::None) lr.backward(w.to(DType::Float64));
        else lr.backward();
        std::vector<Tensor> grads;
        for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
          const char* what = mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate";
          Tensor xg = x.to(kGpu).detach().requires_grad_();
          Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu), red, mode);
          if (red == ops::Reduction::None) lg.backward(w.to(kGpu));
          else lg.backward();
          // loss = log s - (x_t - m): a few ulp of values up to ~20 (~1e-6) per row, summed over
          // <= 65 rows for Sum.
          check_close(lg, lr, 1e-5 * static_cast<double>(rows), 1e-5, std::string(what) + " loss");
          // dlogits = (p - onehot)·scale: p has <= ~1e-6 relative error, and p - 1 at the target
          // cancels when p ≈ 1, leaving ~eps·scale absolute: 1e-6 of the largest |dlogits|.
          check_close(xg.grad(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, std::string(what) + " dlogits");
          grads.push_back(xg.grad());
        }
        // The two device paths compute the same float32 formula with differently ordered
        // reductions: they agree to the same tolerance.
        check_close(grads[0], grads[1], 1e-6 * max_abs(grads[1]), 1e-5, "fused vs separate dlogits");
      }
    }
  }
}

TEST_CASE("cross-entropy of 4096 rows of 10 classes matches the CPU and repeats bit for bit", "[cuda][softmax]") {
  const Tensor x = random_cpu({4096, 10}, 6000, -4.0, 4.0);
  const Tensor t = random_targets(4096, 10, 6001);
  Tensor xr = x.to(DType::Float64).requires_grad_();
  Tensor lr = ops::softmax_cross_entropy(xr, t);
  lr.backward();
  std::vector<Tensor> losses, grads;
  for (int run = 0; run < 2; ++run) {
    Tensor xg = x.to(kGpu).detach().requires_grad_();
    Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu));
    lg.backward();
    // The mean of 4096 losses of ~1e-6 error each.
    check_close(lg, lr, 1e-5, 1e-5, "mean loss");
    check_close(xg.grad(), xr.grad(), 1e-6 * max_abs(xr.grad()), 1e-5, "dlogits");
    losses.push_back(lg);
    grads.push_back(xg.grad());
  }
  check_equal(losses[0], losses[1], "the same loss bits twice");
  check_equal(grads[0], grads[1], "the same dlogits bits twice");
}

TEST_CASE("cross-entropy of huge logits stays finite on the device", "[cuda][softmax]") {
  for (int64_t cols : {10, 5000}) {
    const Tensor x = random_cpu({4, cols}, 7000 + static_cast<uint64_t>(cols), -4000.0, 4000.0);
    const Tensor t = random_targets(4, cols, 7001 + static_cast<uint64_t>(cols));
    Tensor xr = x.to(DType::Float64).requires_grad_();
    Tensor lr = ops::softmax_cross_entropy(xr, t, ops::Reduction::None);
    lr.backward(ones({4}, DType::Float64));
    Tensor xg = x.to(kGpu).detach().requires_grad_();
    Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu), ops::Reduction::None);
    lg.backward(ones({4}, TensorOptions(DType::Float32, kGpu)));
    // Losses up to ~8000 = log s - (x_t - m): x_t - m is off by up to half an ulp of 8000
    // (2.4e-4) absolute.
    check_close(lg, lr, 1e-3, 1e-5, "loss");
    // p = exp(x - m) / s: x - m is off by half an ulp of |x - m|, ~|x - m|·6e-8 relative in p, up
    // to ~6e-6 for the p above float32's underflow (|x - m| < 104): 1e-3 relative is loose;
    // finite is the point.
    check_close(xg.grad(), xr.grad(), 1e-6, 1e-3, "dlogits");
  }
}

TEST_CASE("an out-of-range target is an Error naming the row and the value, and the device stays usable",
          "[cuda][softmax]") {
  const Tensor x = random_cpu({6, 5}, 8000).to(kGpu);
  const Tensor high = from_vector(std::vector<int64_t>{0, 1, 2, 7, -1, 4}, {6}, DType::Int64).to(kGpu);
  // Note [deferred target errors]: the device checks without a host wait, and the error comes at
  // the next wait (item() here; synchronize() below), once.
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(x, high).item(), Catch::Contains("target 7 at row 3"));
  const Tensor unread = ops::softmax_cross_entropy(x, high);
  CHECK_THROWS_WITH(backend_for(kGpu).synchronize(), Catch::Contains("target 7 at row 3"));
  CHECK_NOTHROW(backend_for(kGpu).synchronize());
  const Tensor negative = from_vector(std::vector<int64_t>{0, 4, -1, 3, 9, 4}, {6}, DType::Int64).to(kGpu);
  Tensor xg = x.detach().requires_grad_();
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(xg, negative).item(), Catch::Contains("target -1 at row 2"));
  // Many blocks: the first bad row wins however the threads are scheduled.
  std::vector<int64_t> many(100000, 1);
  many[70001] = 3;
  many[99999] = -5;
  const Tensor big = random_cpu({100000, 3}, 8001).to(kGpu);
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(big, from_vector(many, {100000}, DType::Int64).to(kGpu)).item(),
                    Catch::Contains("target 3 at row 70001"));
  // The context is intact: a valid loss right after matches the CPU.
  const Tensor t = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6}, DType::Int64);
  check_close(ops::softmax_cross_entropy(x, t.to(kGpu)), ops::softmax_cross_entropy(x.to(Device::cpu()), t), 1e-5,
              1e-5, "loss after the error");
  check_close(x * 2.0, x.to(Device::cpu()) * 2.0, 1e-5, 0.0, "an elementwise op after the error");
}

TEST_CASE("softmax and log_softmax of saturated rows on the device match float64 to a few eps", "[cuda][softmax]") {
  uint64_t seed = 9000;
  for (softmax_saturated::Rows kind : softmax_saturated::kAllRows) {
    for (int64_t cols : kCols) {
      for (int64_t rows : row_counts(cols)) {
        INFO(rows_name(kind) << ", [" << rows << ", " << cols << "]");
        const Tensor x = saturated_logits(kind, rows, cols, ++seed);  // [rows, cols] float32, CPU
        const Tensor x64 = x.to(DType::Float64);                    // the reference's own copy
        const Tensor xg = x.to(kGpu);                                // the device's own copy
        const std::vector<double> below = below_row_max(x64.to_vector<double>(), rows, cols);
        const Tensor p_ref = ops::softmax(x64, 1);
        const Tensor p = ops::softmax(xg, 1);
        const std::vector<double> pv = p_ref.to_vector<double>();
        check_within(p, p_ref, [&](size_t i) { return kSaturatedTol.p(pv[i], below[i]); }, "softmax");
        const Tensor y_ref = ops::log_softmax(x64, 1);
        const Tensor y = ops::log_softmax(xg, 1);
        const std::vector<double> yv = y_ref.to_vector<double>();
        check_within(y, y_ref, [&](size_t i) { return kSaturatedTol.log_p(yv[i]); }, "log_softmax");
      }
    }
  }
}

TEST_CASE("cross-entropy of saturated rows on the device matches float64: loss and dlogits, fused and separate",
          "[cuda][softmax]") {
  uint64_t seed = 9500;
  for (softmax_saturated::Rows kind : softmax_saturated::kAllRows) {
    for (int64_t cols : kCols) {
      for (int64_t rows : row_counts(cols)) {
        INFO(rows_name(kind) << ", [" << rows << ", " << cols << "]");
        const Tensor x = saturated_logits(kind, rows, cols, ++seed);  // [rows, cols] float32, CPU
        const std::vector<double> xv = x.to(DType::Float64).to_vector<double>();
        const Tensor t = targets_for(xv, rows, cols, ++seed);  // [rows] int64, CPU
        const std::vector<double> below = below_row_max(xv, rows, cols);
        const double scale = 1.0 / static_cast<double>(rows);

        // The float64 reference on the CPU, from its own copy of the logits.
        const Tensor p_ref = ops::softmax(x.to(DType::Float64), 1);
        const std::vector<double> pv = p_ref.to_vector<double>();
        const Tensor loss_ref = ops::softmax_cross_entropy(x.to(DType::Float64), t, ops::Reduction::None);
        const std::vector<double> lv = loss_ref.to_vector<double>();
        Tensor xr = x.to(DType::Float64).requires_grad_();
        Tensor mean_ref = ops::softmax_cross_entropy(xr, t, ops::Reduction::Mean);
        mean_ref.backward();
        const Tensor g_ref = xr.grad();
        const std::vector<double> gv = g_ref.to_vector<double>();
        const double mean_ref_value = mean_ref.item();

        // loss = -log p_t: log p's tolerance at the target.
        const Tensor t_gpu = t.to(kGpu);
        const Tensor loss = ops::softmax_cross_entropy(x.to(kGpu), t_gpu, ops::Reduction::None);
        check_within(loss, loss_ref, [&](size_t r) { return kSaturatedTol.log_p(lv[r]); }, "per-row loss");

        // The mean: each loss within its tolerance, so the mean within their mean, plus half an
        // ulp of the mean for each float32 rounding of the sum and of the scale (<= rows + 1).
        double mean_tol = static_cast<double>(rows + 1) * kEps / 2.0 * std::abs(mean_ref_value);
        for (double l : lv) mean_tol += kSaturatedTol.log_p(l) * scale;
        for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
          const std::string what = mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate";
          Tensor xg = x.to(kGpu).detach().requires_grad_();
          Tensor mean = ops::softmax_cross_entropy(xg, t_gpu, ops::Reduction::Mean, mode);
          mean.backward();
          const Tensor g = xg.grad();
          check_within(g, g_ref, [&](size_t i) { return kSaturatedTol.grad(gv[i], pv[i], below[i], scale); },
                       what + " dlogits");
          check_within(mean, mean_ref.detach(), [&](size_t) { return mean_tol; }, what + " mean loss");
        }
      }
    }
  }
}
