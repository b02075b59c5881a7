// conv2d (core/ops/conv): against a direct nested-loop convolution written here, against
// finite differences in float64 over odd geometries (stride 2, padding 1, dilation 2, groups,
// non-square kernels and inputs, sizes the stride does not divide, batch 1), float32 against
// float64, and the errors for every bad argument.
#include <catch2/catch.hpp>

#include "core/ops/conv.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::error_message;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

namespace {

struct Case {
  int64_t n, c_in, h, w, c_out, kh, kw;
  Size2 stride, padding, dilation;
  int64_t groups;
};

// The geometries every test runs: each line stresses one thing the lowering could get wrong.
const Case kCases[] = {
    {2, 3, 5, 5, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1},  // plain
    {1, 2, 7, 6, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1},  // stride 2 + padding 1, W the stride does not divide, batch 1
    {2, 2, 9, 8, 2, 3, 2, {1, 1}, {2, 1}, {2, 2}, 1},  // dilation 2, non-square kernel, padding 2/1
    {2, 4, 6, 5, 6, 3, 1, {2, 1}, {1, 0}, {1, 1}, 2},  // groups 2, 3x1 kernel, per-dim stride
    {1, 6, 5, 7, 3, 2, 3, {3, 2}, {1, 1}, {2, 1}, 3},  // groups 3 (one output channel each), stride 3/2, dilation 2/1
    {3, 1, 4, 4, 2, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1},  // 1x1 kernel
    {1, 2, 3, 3, 1, 5, 5, {1, 1}, {2, 2}, {1, 1}, 1},  // kernel larger than the input, saved by the padding
};

// y[n, co, oh, ow] = b[co] + Σ_(ci in group, i, j) x[n, ci, oh·s − p + i·d, ow·s − p + j·d] · w[co, ci', i, j]
std::vector<double> reference_conv(const Case& k, const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& b, int64_t& h_out, int64_t& w_out) {
  h_out = (k.h + 2 * k.padding[0] - k.dilation[0] * (k.kh - 1) - 1) / k.stride[0] + 1;
  w_out = (k.w + 2 * k.padding[1] - k.dilation[1] * (k.kw - 1) - 1) / k.stride[1] + 1;
  const int64_t cig = k.c_in / k.groups, cog = k.c_out / k.groups;
  std::vector<double> y(static_cast<size_t>(k.n * k.c_out * h_out * w_out));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t co = 0; co < k.c_out; ++co)
      for (int64_t oh = 0; oh < h_out; ++oh)
        for (int64_t ow = 0; ow < w_out; ++ow) {
          double acc = b.empty() ? 0.0 : b[static_cast<size_t>(co)];
          const int64_t grp = co / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t ih = oh * k.stride[0] - k.padding[0] + i * k.dilation[0];
                const int64_t iw = ow * k.stride[1] - k.padding[1] + j * k.dilation[1];
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                const int64_t c = grp * cig + ci;
                acc += x[static_cast<size_t>(((n * k.c_in + c) * k.h + ih) * k.w + iw)] *
                       w[static_cast<size_t>(((co * cig + ci) * k.kh + i) * k.kw + j)];
              }
          y[static_cast<size_t>(((n * k.c_out + co) * h_out + oh) * w_out + ow)] = acc;
        }
  return y;
}

Tensor conv(const Case& k, const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) {
  return ops::conv2d(x, w, b, k.stride, k.padding, k.dilation, k.groups);
}

}  // namespace

TEST_CASE("conv2d matches a direct nested-loop convolution for odd geometries", "[core][conv]") {
  int seed = 0;
  for (const Case& k : kCases) {
    Generator g(++seed);
    Tensor x = rand64({k.n, k.c_in, k.h, k.w}, g), w = rand64({k.c_out, k.c_in / k.groups, k.kh, k.kw}, g);
    Tensor b = rand64({k.c_out}, g);
    int64_t h_out = 0, w_out = 0;
    const std::vector<double> want =
        reference_conv(k, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), h_out, w_out);
    const Tensor y = conv(k, x, w, b);
    REQUIRE(y.shape() == Shape{k.n, k.c_out, h_out, w_out});
    const std::vector<double> got = y.to_vector<double>();
    INFO("case " << seed);
    // float64 sums of at most 75 products of values in [-1, 1], in a different order than the
    // reference: rounding differences stay below 1e-13.
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-12);
    // without bias
    const std::vector<double> want_nb = reference_conv(k, x.to_vector<double>(), w.to_vector<double>(), {}, h_out, w_out);
    const std::vector<double> got_nb = conv(k, x, w).to_vector<double>();
    for (size_t i = 0; i < got_nb.size(); ++i) CHECK(std::abs(got_nb[i] - want_nb[i]) <= 1e-12);
  }
}

TEST_CASE("conv2d on a larger layer (the GEMM's blocked path) matches the nested loops", "[core][conv]") {
  // 16 output channels x 288 rows x 2·100 columns: well above the GEMM's small-problem cutoff,
  // so packing, blocking and the thread split all run.
  const Case k{2, 32, 10, 10, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1};
  Generator g(99);
  Tensor x = rand64({k.n, k.c_in, k.h, k.w}, g), w = rand64({k.c_out, k.c_in, k.kh, k.kw}, g), b = rand64({k.c_out}, g);
  int64_t h_out = 0, w_out = 0;
  const auto want = reference_conv(k, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), h_out, w_out);
  const auto got = conv(k, x, w, b).to_vector<double>();
  REQUIRE(got.size() == want.size());
  // 288 products per output in [-1, 1]: float64 rounding below 1e-12.
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-11);
  // float32 against the float64 result: 288 terms of size <= 1 accumulate about 288 · 6e-8
  // relative error in the worst case; 1e-4 absolute is far above what appears (~1e-6).
  const auto got32 = conv(k, x.to(DType::Float32), w.to(DType::Float32), b.to(DType::Float32)).to(DType::Float64)
                         .to_vector<double>();
  for (size_t i = 0; i < got32.size(); ++i) CHECK(std::abs(got32[i] - want[i]) <= 1e-4);
}

TEST_CASE("conv2d backward matches finite differences for odd geometries", "[core][conv][gradcheck]") {
  int seed = 100;
  for (const Case& k : kCases) {
    Generator g(++seed);
    Tensor x = rand64({k.n, k.c_in, k.h, k.w}, g), w = rand64({k.c_out, k.c_in / k.groups, k.kh, k.kw}, g);
    Tensor b = rand64({k.c_out}, g);
    INFO("case " << seed - 100);
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(conv(k, v[0], v[1], v[2]), seed); },
                    {x, w, b});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(conv(k, v[0], v[1]), seed); }, {x, w});
  }
}

TEST_CASE("conv2d's weight gradient of a thin layer over many terms matches the nested loops", "[core][conv]") {
  // One input channel, 3x3: dW has K = 9 columns, so it takes the dot-product path (Note [thin
  // weight gradients] in kernels/cpu/conv.cpp); 255x253 outputs per sample cut the batch of 8
  // into chunks of 7 and 1 samples (the col buffer's budget), so the second chunk adds onto the
  // first, and each chunk's terms (451,605 and 64,515) span many pieces, the last one short. Stride 2 with
  // dilation 2 on the second layer keeps the gather's index arithmetic honest.
  for (const Case& k : {Case{8, 1, 255, 253, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1},
                        Case{3, 2, 61, 45, 4, 2, 3, {2, 1}, {1, 2}, {2, 2}, 2}}) {
    Generator g(123);
    Tensor x = rand64({k.n, k.c_in, k.h, k.w}, g);
    Tensor w = rand64({k.c_out, k.c_in / k.groups, k.kh, k.kw}, g).requires_grad_();
    Tensor y = conv(k, x, w);
    const Tensor r = rand64(y.shape(), g);  // dL/dy
    ops::sum(y * r).backward();
    // dW[co, ci', i, j] = Σ_(n, oh, ow) r[n, co, oh, ow] · x[n, grp·cig + ci', oh·s − p + i·d, ow·s − p + j·d]
    const int64_t h_out = y.shape()[2], w_out = y.shape()[3], cig = k.c_in / k.groups, cog = k.c_out / k.groups;
    const std::vector<double> xv = x.to_vector<double>(), rv = r.to_vector<double>();
    std::vector<double> want(static_cast<size_t>(w.numel()), 0.0);
    for (int64_t co = 0; co < k.c_out; ++co)
      for (int64_t ci = 0; ci < cig; ++ci)
        for (int64_t i = 0; i < k.kh; ++i)
          for (int64_t j = 0; j < k.kw; ++j) {
            double acc = 0;
            for (int64_t n = 0; n < k.n; ++n)
              for (int64_t oh = 0; oh < h_out; ++oh)
                for (int64_t ow = 0; ow < w_out; ++ow) {
                  const int64_t ih = oh * k.stride[0] - k.padding[0] + i * k.dilation[0];
                  const int64_t iw = ow * k.stride[1] - k.padding[1] + j * k.dilation[1];
                  if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                  acc += rv[static_cast<size_t>(((n * k.c_out + co) * h_out + oh) * w_out + ow)] *
                         xv[static_cast<size_t>(((n * k.c_in + (co / cog) * cig + ci) * k.h + ih) * k.w + iw)];
                }
            want[static_cast<size_t>(((co * cig + ci) * k.kh + i) * k.kw + j)] = acc;
          }
    const std::vector<double> got = w.grad().to_vector<double>();
    REQUIRE(got.size() == want.size());
    // Up to 524,288 products in [-1, 1] per entry, summed in pieces: float64 rounding stays
    // below 1e-9 (the sums themselves are of order sqrt(terms) ~ 700).
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-9);
  }
}

TEST_CASE("conv2d gives only the gradients asked for", "[core][conv]") {
  Generator g(7);
  Tensor x = rand64({1, 2, 5, 5}, g), w = rand64({3, 2, 3, 3}, g).requires_grad_(), b = rand64({3}, g);
  ops::sum(ops::conv2d(x, w, b)).backward();
  CHECK(w.grad().defined());
  CHECK_FALSE(x.grad().defined());
  // dw of sum(y) = Σ over positions of the input patch: checked against the reference by gradcheck
  // above; here only that x, which needs no gradient, got none.
}

TEST_CASE("conv2d rejects bad arguments with errors that name the op, the shapes and what was expected",
          "[core][conv][errors]") {
  const Tensor x = zeros({2, 4, 8, 8}), w = zeros({6, 4, 3, 3});
  std::string m = error_message([&] { ops::conv2d(zeros({4, 8, 8}), w); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("rank 4") && Catch::Contains("[4, 8, 8]"));
  m = error_message([&] { ops::conv2d(x, zeros({6, 4, 3})); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("weight") && Catch::Contains("[6, 4, 3]"));
  m = error_message([&] { ops::conv2d(x, zeros({6, 3, 3, 3})); });  // channels disagree with the weight
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("4 channels") && Catch::Contains("[2, 4, 8, 8]") &&
                    Catch::Contains("[6, 3, 3, 3]") && Catch::Contains("must be 4"));
  m = error_message([&] { ops::conv2d(x, w, {}, {0, 1}); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("stride must be >= 1") && Catch::Contains("(0, 1)"));
  m = error_message([&] { ops::conv2d(x, w, {}, {-1, 1}); });
  CHECK_THAT(m, Catch::Contains("stride must be >= 1") && Catch::Contains("(-1, 1)"));
  m = error_message([&] { ops::conv2d(x, w, {}, {1, 1}, {-1, 0}); });
  CHECK_THAT(m, Catch::Contains("padding must be >= 0") && Catch::Contains("(-1, 0)"));
  m = error_message([&] { ops::conv2d(x, w, {}, {1, 1}, {0, 0}, {0, 1}); });
  CHECK_THAT(m, Catch::Contains("dilation must be >= 1"));
  m = error_message([&] { ops::conv2d(x, zeros({6, 2, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 3); });
  CHECK_THAT(m, Catch::Contains("divisible by groups = 3") && Catch::Contains("[2, 4, 8, 8]"));
  m = error_message([&] { ops::conv2d(x, zeros({6, 4, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2); });
  CHECK_THAT(m, Catch::Contains("groups = 2") && Catch::Contains("must be 2"));
  m = error_message([&] { ops::conv2d(x, zeros({6, 4, 9, 3})); });  // kernel larger than the (unpadded) input
  CHECK_THAT(m, Catch::Contains("larger than the padded input") && Catch::Contains("[6, 4, 9, 3]") &&
                    Catch::Contains("8 x 8"));
  m = error_message([&] { ops::conv2d(x, zeros({6, 4, 3, 3}), {}, {1, 1}, {0, 0}, {4, 4}); });  // dilated: 9 > 8
  CHECK_THAT(m, Catch::Contains("larger than the padded input") && Catch::Contains("9 x 9"));
  m = error_message([&] { ops::conv2d(x, w, zeros({5})); });
  CHECK_THAT(m, Catch::Contains("bias has shape [5]") && Catch::Contains("expected [6]"));
  m = error_message([&] { ops::conv2d(x, w.to(DType::Float64)); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("float32") && Catch::Contains("float64"));
  // The padding that saves a large kernel is accepted.
  CHECK(ops::conv2d(x, zeros({6, 4, 9, 9}), {}, {1, 1}, {1, 1}).shape() == Shape{2, 6, 2, 2});
}
