// CPU kernels against plain reference loops in double on fresh random inputs: the GEMM in
// all four transpose variants and tile-unfriendly shapes, the fused bias/ReLU epilogue, and
// the numerically stable softmax-cross-entropy.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/backend.h"
#include "core/ops.h"

using namespace minidl;

namespace {
// Reference C = op(A)·op(B) in double.
std::vector<double> reference_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  const auto av = a.to(DType::Float64).to_vector<double>(), bv = b.to(DType::Float64).to_vector<double>();
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? av[static_cast<size_t>(p * m + i)] : av[static_cast<size_t>(i * k + p)];
        const double y = tb ? bv[static_cast<size_t>(j * k + p)] : bv[static_cast<size_t>(p * n + j)];
        s += x * y;
      }
      c[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}
}  // namespace

TEST_CASE("cpu GEMM matches the reference in every transpose variant and odd shape", "[kernels][gemm]") {
  // {130, 10, 129}, {200, 3, 100} and {150, 20, 90}: N within one strip, the narrow path (Note
  // [a narrow C]), on one vector or two.
  const int64_t shapes[][3] = {{1, 1, 1},     {17, 33, 65}, {3, 1000, 7},   {64, 64, 64},  {129, 31, 257},
                               {300, 5, 999}, {40, 300, 1}, {130, 10, 129}, {200, 3, 100}, {150, 20, 90}};
  Generator g(7);
  for (auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (int variant = 0; variant < 4; ++variant) {
      const bool ta = variant & 1, tb = variant & 2;
      for (DType dt : {DType::Float32, DType::Float64}) {
        Tensor a = randn(ta ? Shape{k, m} : Shape{m, k}, dt, &g), b = randn(tb ? Shape{n, k} : Shape{k, n}, dt, &g);
        Tensor c = empty({m, n}, dt);
        cpu_backend().matmul(a, b, c, ta, tb);
        const auto ref = reference_matmul(a, b, ta, tb, m, n, k);
        const auto got = c.to(DType::Float64).to_vector<double>();
        // float32 sums of k products of N(0,1) values: error grows like eps·sqrt(k)·|terms|,
        // so compare relative to sqrt(k) (1e-4 leaves a 10x margin at k = 1000); float64 ~1e-12.
        const double tol = (dt == DType::Float32 ? 1e-4 : 1e-11) * std::sqrt(static_cast<double>(k));
        for (size_t i = 0; i < ref.size(); ++i) {
          INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb << " " << dt << " i=" << i);
          REQUIRE(std::abs(got[i] - ref[i]) <= tol * (1.0 + std::abs(ref[i])));
        }
      }
    }
  }
}

TEST_CASE("linear forward fuses bias and ReLU exactly like the unfused ops", "[kernels][linear]") {
  Generator g(11);
  for (int64_t n : {1, 7, 130}) {
    Tensor x = randn({n, 45}, DType::Float64, &g), w = randn({33, 45}, DType::Float64, &g), b = randn({33}, DType::Float64, &g);
    Tensor fused = ops::linear(x, w, b, true);
    Tensor unfused = ops::relu(ops::matmul(x, w.t()) + b);
    const auto f = fused.to_vector<double>(), u = unfused.to_vector<double>();
    for (size_t i = 0; i < f.size(); ++i) REQUIRE(std::abs(f[i] - u[i]) <= 1e-12 * (1 + std::abs(u[i])));  // float64 rounding only
  }
  Tensor empty_k = ops::linear(zeros({3, 0}), zeros({2, 0}), from_vector<float>({1.f, -1.f}), true);
  CHECK(empty_k.to_vector<float>() == std::vector<float>{1, 0, 1, 0, 1, 0});
}

TEST_CASE("relu backward selects dy where y > 0 and gives 0 elsewhere, even for a NaN or infinite dy", "[kernels][relu]") {
  // PyTorch's threshold_backward is a select, not dy · [y > 0]: where y <= 0 the gradient is 0
  // whatever dy holds. Long enough (1031 elements, not a multiple of any vector width) that the
  // vectorised body and its tail both run, on both float types.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (DType dtype : {DType::Float32, DType::Float64}) {
    std::vector<double> y(1031), dy(1031);
    for (size_t i = 0; i < y.size(); ++i) {
      y[i] = i % 3 == 0 ? 0.0 : (i % 3 == 1 ? -1.5 : 0.25 * static_cast<double>(i));
      dy[i] = i % 5 == 0 ? nan : (i % 5 == 1 ? -inf : static_cast<double>(i) - 500.0);
    }
    const Tensor ty = from_vector<double>(y, Shape{1031}, DType::Float64).to(dtype);
    const Tensor tdy = from_vector<double>(dy, Shape{1031}, DType::Float64).to(dtype);
    Tensor dx = empty(Shape{1031}, dtype);
    backend_for(Device::cpu()).relu_backward(tdy, ty, dx);
    const std::vector<double> got = dx.to(DType::Float64).to_vector<double>();
    bool ok = true;
    for (size_t i = 0; i < y.size(); ++i) {
      const double want = y[i] > 0 ? static_cast<double>(static_cast<float>(dy[i])) : 0.0;
      ok = ok && (std::isnan(want) ? std::isnan(got[i]) : got[i] == want);
    }
    CHECK(ok);
  }
}

TEST_CASE("softmax-cross-entropy is stable for huge logits and matches log_softmax", "[kernels][softmax]") {
  Tensor logits = from_vector<float>({1000.f, 0.f, -1000.f, 50.f, 50.f, 50.f}, {2, 3});
  Tensor targets = from_vector<int64_t>({0, 2});
  Tensor loss = ops::softmax_cross_entropy(logits, targets, ops::Reduction::None);
  const auto l = loss.to_vector<float>();
  CHECK(l[0] == Approx(0.0).margin(1e-6));
  // loss = log s - (x_t - m) = log 3 - 0: a few ulps of log 3 (~1e-7), well inside this margin
  // (lse = m + log s rounded at 51.1, the old way, carried up to 3.8e-6).
  CHECK(l[1] == Approx(std::log(3.0)).margin(2e-5));
  Generator g(3);
  for (int64_t c : {2, 7, 1000}) {
    Tensor x = randn({5, c}, DType::Float64, &g) * 10.0;
    Tensor t = randint(0, c, {5}, DType::Int64, &g);
    Tensor ce = ops::softmax_cross_entropy(x, t, ops::Reduction::None);
    Tensor ls = ops::log_softmax(x);
    for (int64_t r = 0; r < 5; ++r)
      CHECK(ce.at({r}) == Approx(-ls.at({r, static_cast<int64_t>(t.at({r}))})).epsilon(1e-12));  // same math, float64
  }
}

TEST_CASE("masked rows: leading -inf entries poison neither log_softmax, softmax nor the loss", "[kernels][softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  // Row 0 starts with two masked entries (exp(-inf - -inf) would be NaN); row 1, all masked,
  // sits beside it to show its NaN stays in its own row.
  Tensor x = from_vector<float>({-inf, -inf, 0.f, std::log(3.f), -inf, -inf, -inf, -inf}, {2, 4});
  const auto ls = ops::log_softmax(x).to_vector<float>();
  CHECK(ls[0] == -inf);
  CHECK(ls[1] == -inf);
  CHECK(ls[2] == Approx(-std::log(4.0)).margin(1e-6));  // softmax of [0, log 3] is [1/4, 3/4]
  CHECK(ls[3] == Approx(std::log(0.75)).margin(1e-6));
  const auto p = ops::softmax(x).to_vector<float>();
  CHECK(p[0] == 0.f);
  CHECK(p[1] == 0.f);
  CHECK(p[2] == Approx(0.25).margin(1e-6));
  Tensor loss = ops::softmax_cross_entropy(x.narrow(0, 0, 1), from_vector<int64_t>({3}), ops::Reduction::None);
  CHECK(loss.to_vector<float>()[0] == Approx(-std::log(0.75)).margin(1e-6));
}

TEST_CASE("sum along dims matches loops and is deterministic", "[kernels][reduce]") {
  Generator g(5);
  Tensor x = randn({7, 31, 3}, DType::Float64, &g);
  const auto v = x.to_vector<double>();
  Tensor s1 = x.sum(1);
  for (int64_t a = 0; a < 7; ++a)
    for (int64_t c = 0; c < 3; ++c) {
      double ref = 0;
      for (int64_t b = 0; b < 31; ++b) ref += v[static_cast<size_t>((a * 31 + b) * 3 + c)];
      REQUIRE(s1.at({a, c}) == Approx(ref).epsilon(1e-12));
    }
  Tensor big = randn({1 << 17}, {}, &g);
  CHECK(big.sum().item() == big.sum().item());
}
