// kernels/cuda/layer_norm.cu through ops::layer_norm, against the CPU in float64 from the same
// float32 inputs: y, dx, dweight and dbias for D = 1, 3, 31, 33, 1023, 1025, 4097 (warp per row
// with each register count, block per row with 256 and 512 threads) and 16385 (1024 threads),
// 1 to 65 rows and 65537 rows (more than 65535 row groups), with and without the affine
// parameters, rows far from 0 (float statistics lose digits there: the tolerance says how
// many), no rows at all, the same bits on a second run, and the device error.
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/layer_norm.h"
#include "tests/softmax_saturated.h"

using namespace minidl;
using namespace minidl::cuda_test;
using minidl::softmax_saturated::check_within;

namespace {

constexpr double kU = 0x1p-24;  // float32's unit roundoff

// Tolerances of the device's float32 results, from the float64 quantities of the same inputs.
// The device sums a row in a tree at most L = 48 additions deep (warp kernel: kPerLane <= 32
// sequential, then 5 shuffle levels; block kernel: D/threads <= 17 sequential, then 5 + 5
// levels), so each statistic carries at most ~L ulps of the magnitudes it sums:
//   mean: L·u·m_r (m_r = max_j |x_rj|), which rstd turns into rstd·L·u·m_r in every x̂;
//   rstd: (L + 8)·u relative (a sum of positive squares, a division, sqrt, a reciprocal).
// So x̂ is within e_r(j) = 64u·(|x̂| + rstd·m_r) of its value, and with 64 ≥ L + 8 + rounding:
//   y:  64u·(|w|·(|x̂| + rstd·m_r) + |b|)
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·w: every term carries the errors above, so
//       64u·rstd·(max|g| + mean|g| + max|x̂|·mean|g·x̂|)·(1 + rstd·m_r) per row.
//   dw = Σ_r dy·x̂ and db = Σ_r dy: the device adds each column in two levels of about √rows
//       terms (param_chunk_rows in layer_norm.cu), so (2√rows + 40)·u·Σ_r |term|, plus for dw
//       the x̂ errors Σ_r |dy|·e_r.
struct Reference {
  std::vector<double> tol_y, tol_dx, tol_dw, tol_db;
};

Reference tolerances(const std::vector<double>& x, const std::vector<double>& dy, const std::vector<double>& w,
                     const std::vector<double>& b, int64_t rows, int64_t D, double eps) {
  Reference ref;
  ref.tol_y.resize(x.size());
  ref.tol_dx.resize(x.size());
  std::vector<double> abs_dw(static_cast<size_t>(D)), abs_db(static_cast<size_t>(D)), xhat_err(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * D;
    const double* gr = dy.data() + r * D;
    double mean = 0, var = 0, m = 0;
    for (int64_t j = 0; j < D; ++j) {
      mean += xr[j];
      m = std::max(m, std::abs(xr[j]));
    }
    mean /= static_cast<double>(D);
    for (int64_t j = 0; j < D; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(D) + eps);
    double max_g = 0, mean_abs_g = 0, mean_abs_gx = 0, max_xhat = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double xhat = (xr[j] - mean) * rstd, g = gr[j] * (w.empty() ? 1.0 : w[static_cast<size_t>(j)]);
      const double wj = w.empty() ? 1.0 : w[static_cast<size_t>(j)], bj = b.empty() ? 0.0 : b[static_cast<size_t>(j)];
      ref.tol_y[static_cast<size_t>(r * D + j)] = 64 * kU * (std::abs(wj) * (std::abs(xhat) + rstd * m) + std::abs(bj));
      max_g = std::max(max_g, std::abs(g));
      max_xhat = std::max(max_xhat, std::abs(xhat));
      mean_abs_g += std::abs(g) / static_cast<double>(D);
      mean_abs_gx += std::abs(g * xhat) / static_cast<double>(D);
      const double e = 64 * kU * (std::abs(xhat) + rstd * m);
      abs_dw[static_cast<size_t>(j)] += std::abs(gr[j] * xhat);
      abs_db[static_cast<size_t>(j)] += std::abs(gr[j]);
      xhat_err[static_cast<size_t>(j)] += std::abs(gr[j]) * e;
    }
    const double row_tol = 64 * kU * rstd * (max_g + mean_abs_g + max_xhat * mean_abs_gx) * (1 + rstd * m);
    for (int64_t j = 0; j < D; ++j) ref.tol_dx[static_cast<size_t>(r * D + j)] = row_tol;
  }
  const double depth = 2 * std::sqrt(static_cast<double>(rows)) + 40;
  for (int64_t j = 0; j < D; ++j) {
    ref.tol_dw.push_back(depth * kU * abs_dw[static_cast<size_t>(j)] + xhat_err[static_cast<size_t>(j)] + 1e-30);
    ref.tol_db.push_back(depth * kU * abs_db[static_cast<size_t>(j)] + 1e-30);
  }
  for (double& t : ref.tol_y) t += 1e-30;  // an exact 0 (D = 1: y = b) compares as 0 / tolerance
  for (double& t : ref.tol_dx) t += 1e-30;
  return ref;
}

std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

// Runs layer_norm forward and backward on cuda:0 and on the CPU in float64 from the same float32
// values (separate storage on each side) and compares y, dx, dweight, dbias.
void check_layer_norm(int64_t rows, int64_t D, bool affine, uint64_t seed, double offset = 0.0) {
  INFO("rows " << rows << ", D " << D << (affine ? ", affine" : ", no affine") << ", offset " << offset);
  const double eps = 1e-5;
  const Tensor x = random_cpu({rows, D}, seed, offset - 1.0, offset + 1.0);
  const Tensor dy = random_cpu({rows, D}, seed + 1);
  const Tensor w = affine ? random_cpu({D}, seed + 2, 0.5, 1.5) : Tensor();
  const Tensor b = affine ? random_cpu({D}, seed + 3) : Tensor();

  Tensor x64 = x.to(DType::Float64).requires_grad_();
  Tensor w64 = affine ? w.to(DType::Float64).requires_grad_() : Tensor();
  Tensor b64 = affine ? b.to(DType::Float64).requires_grad_() : Tensor();
  const Tensor y64 = ops::layer_norm(x64, w64, b64, eps);
  y64.backward(dy.to(DType::Float64));

  Tensor xg = x.to(kGpu).requires_grad_();
  Tensor wg = affine ? w.to(kGpu).requires_grad_() : Tensor();
  Tensor bg = affine ? b.to(kGpu).requires_grad_() : Tensor();
  const Tensor yg = ops::layer_norm(xg, wg, bg, eps);
  yg.backward(dy.to(kGpu));

  const Reference ref = tolerances(values(x), values(dy), affine ? values(w) : std::vector<double>{},
                                   affine ? values(b) : std::vector<double>{}, rows, D, eps);
  check_within(yg, y64.detach(), [&](size_t i) { return ref.tol_y[i]; }, "y");
  check_within(xg.grad(), x64.grad(), [&](size_t i) { return ref.tol_dx[i]; }, "dx");
  if (affine) {
    check_within(wg.grad(), w64.grad(), [&](size_t j) { return ref.tol_dw[j]; }, "dweight");
    check_within(bg.grad(), b64.grad(), [&](size_t j) { return ref.tol_db[j]; }, "dbias");
  }
}

}  // namespace

TEST_CASE("layer_norm on the device matches the CPU for odd D and row counts, forward and backward",
          "[cuda][layer_norm]") {
  uint64_t seed = 100;
  for (int64_t D : {1, 3, 31, 33, 1023, 1025, 4097}) {
    for (int64_t rows : {1, 3, 65}) {
      check_layer_norm(rows, D, true, seed += 10);
      check_layer_norm(rows, D, false, seed += 10);
    }
  }
}

TEST_CASE("layer_norm on the device matches the CPU for more than 65535 rows", "[cuda][layer_norm][grid]") {
  check_layer_norm(65537, 1, true, 500);
  check_layer_norm(65537, 33, true, 510);
}

TEST_CASE("layer_norm on the device matches the CPU for rows of 1024 threads", "[cuda][layer_norm]") {
  check_layer_norm(2, 16385, true, 520);  // D > 16384: a block of 1024 threads per row
}

TEST_CASE("layer_norm on the device matches the CPU for rows far from 0, as a GPT's residual stream has",
          "[cuda][layer_norm]") {
  check_layer_norm(17, 768, true, 600, 100.0);
  check_layer_norm(5, 1100, true, 610, -40.0);
}

TEST_CASE("layer_norm on the device with only a weight or only a bias matches the CPU", "[cuda][layer_norm]") {
  const Tensor x = random_cpu({9, 40}, 700), dy = random_cpu({9, 40}, 701), p = random_cpu({40}, 702);
  for (bool weight_only : {true, false}) {
    INFO((weight_only ? "weight only" : "bias only"));
    Tensor x64 = x.to(DType::Float64).requires_grad_(), p64 = p.to(DType::Float64).requires_grad_();
    Tensor xg = x.to(kGpu).requires_grad_(), pg = p.to(kGpu).requires_grad_();
    const Tensor y64 = weight_only ? ops::layer_norm(x64, p64) : ops::layer_norm(x64, Tensor(), p64);
    const Tensor yg = weight_only ? ops::layer_norm(xg, pg) : ops::layer_norm(xg, Tensor(), pg);
    y64.backward(dy.to(DType::Float64));
    yg.backward(dy.to(kGpu));
    // Values in [-1, 1], D = 40, rows of spread ~0.58 (rstd <= ~3): the file's tolerances come to
    // ~1e-5 here; 5e-5 absolute + relative is their size with room, and far below a wrong term.
    check_close(yg, y64, 5e-5, 5e-5, "y");
    check_close(xg.grad(), x64.grad(), 5e-5, 5e-5, "dx");
    check_close(pg.grad(), p64.grad(), 5e-5, 5e-5, weight_only ? "dweight" : "dbias");
  }
}

TEST_CASE("layer_norm on the device gives the same bits on a second run and zero parameter gradients for no rows",
          "[cuda][layer_norm]") {
  const Tensor x = random_cpu({300, 257}, 800), dy = random_cpu({300, 257}, 801);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor xg = x.to(kGpu).requires_grad_();
    Tensor wg = ones({257}, TensorOptions(DType::Float32, kGpu)).requires_grad_();
    Tensor bg = zeros({257}, TensorOptions(DType::Float32, kGpu)).requires_grad_();
    const Tensor y = ops::layer_norm(xg, wg, bg);
    y.backward(dy.to(kGpu));
    std::vector<float> all = y.to(Device::cpu()).to_vector<float>();
    for (const Tensor& t : {xg.grad(), wg.grad(), bg.grad()}) {
      const std::vector<float> v = t.to(Device::cpu()).to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(all);
  }
  REQUIRE(runs[0].size() == runs[1].size());
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
  // No rows: dw = db = 0 (a sum over nothing), written even though no row kernel runs.
  Tensor x0 = zeros({0, 5}, TensorOptions(DType::Float32, kGpu)).requires_grad_();
  Tensor w0 = ones({5}, TensorOptions(DType::Float32, kGpu)).requires_grad_();
  Tensor b0 = ones({5}, TensorOptions(DType::Float32, kGpu)).requires_grad_();
  const Tensor y0 = ops::layer_norm(x0, w0, b0);
  CHECK(y0.shape() == Shape{0, 5});
  y0.sum().backward();
  CHECK(w0.grad().to(Device::cpu()).to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(b0.grad().to(Device::cpu()).to_vector<float>() == std::vector<float>(5, 0.0f));
}

TEST_CASE("layer_norm with x and weight on different devices is an error naming both", "[cuda][layer_norm]") {
  const Tensor x = zeros({2, 3}, TensorOptions(DType::Float32, kGpu));
  CHECK_THROWS_WITH(ops::layer_norm(x, ones({3})),
                    Catch::Contains("layer_norm") && Catch::Contains("different devices") &&
                        Catch::Contains("cuda:0") && Catch::Contains("cpu"));
}
