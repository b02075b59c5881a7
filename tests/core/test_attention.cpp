// scaled_dot_product_attention (core/ops/attention, kernels/cpu/attention.cpp): outputs and
// gradients against a reference written here that materialises the [L, S] scores in double,
// on odd sizes that cut the kernel's blocks (32 query rows, 64 keys) unevenly, one head, head
// sizes 1 and 128, causal and not, L > S; the dropout mask (its counters, its rate, the same
// mask from the same generator state, gradients that use it); finite differences of q, k, v;
// causality (future keys change neither out[i] nor dq[i]); strided head views of a fused qkv
// projection; any number of leading dims; empty sizes; and the errors.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/attention.h"
#include "core/philox.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;
using minidl::testing::rand64;

namespace {

struct Dims {
  int64_t BH, L, S, E, Ev;
};

struct Reference {
  std::vector<double> out, dq, dk, dv;
};

// PyTorch's composition, per head: s = q·kᵀ·scale (−inf above the diagonal when causal),
// P = softmax(s), Pd = P∘Z, out = Pd·v; the gradients from dout by the chain rule through the
// materialised matrices. Z(i, j) is the dropout factor of Philox counter offset + (bh·L + i)·S + j.
Reference reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                    const std::vector<double>& dout, Dims d, bool causal, double scale, double p = 0,
                    uint64_t seed = 0, uint64_t offset = 0) {
  Reference r;
  r.out.assign(static_cast<size_t>(d.BH * d.L * d.Ev), 0.0);
  r.dq.assign(static_cast<size_t>(d.BH * d.L * d.E), 0.0);
  r.dk.assign(static_cast<size_t>(d.BH * d.S * d.E), 0.0);
  r.dv.assign(static_cast<size_t>(d.BH * d.S * d.Ev), 0.0);
  auto at = [](const std::vector<double>& x, int64_t i) { return x[static_cast<size_t>(i)]; };
  // [L, S] probabilities and dropout factors of one head, and one row of dP (made once: GCC 12
  // at -O3 misreads vectors made inside the loop as freed at an offset).
  std::vector<double> P(static_cast<size_t>(d.L * d.S)), Z(P.size()), dS(static_cast<size_t>(d.S));
  for (int64_t bh = 0; bh < d.BH; ++bh) {
    std::fill(Z.begin(), Z.end(), 1.0);
    for (int64_t i = 0; i < d.L; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < d.S; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d.E; ++e) s += at(q, (bh * d.L + i) * d.E + e) * at(k, (bh * d.S + j) * d.E + e);
        s = causal && j > i ? -std::numeric_limits<double>::infinity() : s * scale;
        P[static_cast<size_t>(i * d.S + j)] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < d.S; ++j) sum += (P[static_cast<size_t>(i * d.S + j)] = std::exp(P[static_cast<size_t>(i * d.S + j)] - mx));
      for (int64_t j = 0; j < d.S; ++j) {
        P[static_cast<size_t>(i * d.S + j)] /= sum;
        if (p > 0) {
          const uint64_t counter = static_cast<uint64_t>((bh * d.L + i) * d.S + j);
          const float u = philox::uniform_float(philox::block_for(seed, offset, counter));
          Z[static_cast<size_t>(i * d.S + j)] = u < static_cast<float>(1 - p) ? 1 / (1 - p) : 0.0;
        }
      }
    }
    for (int64_t i = 0; i < d.L; ++i) {
      double row = 0;
      for (int64_t j = 0; j < d.S; ++j) {
        const double pz = P[static_cast<size_t>(i * d.S + j)] * Z[static_cast<size_t>(i * d.S + j)];
        double dpd = 0;
        for (int64_t e = 0; e < d.Ev; ++e) {
          r.out[static_cast<size_t>((bh * d.L + i) * d.Ev + e)] += pz * at(v, (bh * d.S + j) * d.Ev + e);
          r.dv[static_cast<size_t>((bh * d.S + j) * d.Ev + e)] += pz * at(dout, (bh * d.L + i) * d.Ev + e);
          dpd += at(dout, (bh * d.L + i) * d.Ev + e) * at(v, (bh * d.S + j) * d.Ev + e);
        }
        dS[static_cast<size_t>(j)] = dpd * Z[static_cast<size_t>(i * d.S + j)];  // dP
        row += P[static_cast<size_t>(i * d.S + j)] * dS[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < d.S; ++j) {
        const double ds = P[static_cast<size_t>(i * d.S + j)] * (dS[static_cast<size_t>(j)] - row) * scale;
        for (int64_t e = 0; e < d.E; ++e) {
          r.dq[static_cast<size_t>((bh * d.L + i) * d.E + e)] += ds * at(k, (bh * d.S + j) * d.E + e);
          r.dk[static_cast<size_t>((bh * d.S + j) * d.E + e)] += ds * at(q, (bh * d.L + i) * d.E + e);
        }
      }
    }
  }
  return r;
}

void check_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])))) {
      if (bad++ == 0) {
        INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
        CHECK(false);
      }
    }
  }
  CHECK(bad == 0);
}

// The op on [BH/2 or 1, ...] float64 inputs against the reference, output and gradients.
void check_against_reference(Dims d, bool causal, uint64_t seed, DType dtype = DType::Float64,
                             std::optional<double> scale = std::nullopt, double p = 0) {
  INFO("BH " << d.BH << ", L " << d.L << ", S " << d.S << ", E " << d.E << ", Ev " << d.Ev << ", causal " << causal
             << ", dtype " << dtype << ", p " << p);
  Generator g(seed);
  const int64_t B = d.BH % 2 == 0 ? 2 : 1, H = d.BH / B;
  const Tensor q = rand64({B, H, d.L, d.E}, g, -2, 2), k = rand64({B, H, d.S, d.E}, g, -2, 2);
  const Tensor v = rand64({B, H, d.S, d.Ev}, g), dout = rand64({B, H, d.L, d.Ev}, g);
  // The reference takes the inputs the kernel sees: float32 rounds them first.
  const std::vector<double> qv = q.to(dtype).to(DType::Float64).to_vector<double>();
  const std::vector<double> kv = k.to(dtype).to(DType::Float64).to_vector<double>();
  const std::vector<double> vv = v.to(dtype).to(DType::Float64).to_vector<double>();
  const std::vector<double> gv = dout.to(dtype).to(DType::Float64).to_vector<double>();
  const double sc = scale ? *scale : 1 / std::sqrt(static_cast<double>(d.E));
  const Reference want = reference(qv, kv, vv, gv, d, causal, sc, p, 77, 0);
  Tensor qt = q.to(dtype).clone().requires_grad_(), kt = k.to(dtype).clone().requires_grad_();
  Tensor vt = v.to(dtype).clone().requires_grad_();
  Generator drop(77);  // fresh: the mask's counters start at 0
  const Tensor out = ops::scaled_dot_product_attention(qt, kt, vt, causal, p, &drop, scale);
  CHECK(out.shape() == Shape{B, H, d.L, d.Ev});
  out.backward(dout.to(dtype));
  // float64: each value is a few hundred products of size <= 4 summed in a different order
  // than the reference: 1e-12 relative covers that. float32: the inputs are the same, the
  // kernel rounds each product and sum (and its exp is within 2 ulp): a few hundred ulps of
  // the magnitudes involved, 2e-5 with room; a wrong term is O(1e-2) or more.
  const double tol = dtype == DType::Float64 ? 1e-12 : 2e-5;
  check_near(out.to(DType::Float64).to_vector<double>(), want.out, tol, "out");
  check_near(qt.grad().to(DType::Float64).to_vector<double>(), want.dq, tol, "dq");
  check_near(kt.grad().to(DType::Float64).to_vector<double>(), want.dk, tol, "dk");
  check_near(vt.grad().to(DType::Float64).to_vector<double>(), want.dv, tol, "dv");
}

}  // namespace

TEST_CASE("scaled_dot_product_attention matches the materialised reference on odd shapes, causal and not",
          "[core][attention]") {
  uint64_t seed = 1;
  for (bool causal : {false, true}) {
    check_against_reference({6, 37, 45, 16, 24}, causal, seed++);  // several blocks, E != Ev
    check_against_reference({1, 1, 1, 1, 1}, causal, seed++);
    check_against_reference({1, 70, 67, 1, 1}, causal, seed++);     // head size 1, crossing 32 and 64
    check_against_reference({1, 33, 129, 128, 128}, causal, seed++);  // head size 128
    check_against_reference({2, 50, 20, 8, 5}, causal, seed++);     // L > S: rows >= S see every key
    check_against_reference({3, 20, 70, 8, 8}, causal, seed++);     // L < S
  }
}

TEST_CASE("scaled_dot_product_attention in float32 matches the reference", "[core][attention]") {
  check_against_reference({4, 65, 97, 32, 32}, false, 40, DType::Float32);
  check_against_reference({4, 129, 129, 64, 64}, true, 41, DType::Float32);
  check_against_reference({1, 7, 3, 1, 1}, true, 42, DType::Float32);
}

TEST_CASE("scaled_dot_product_attention uses a given scale instead of 1/sqrt(E)", "[core][attention]") {
  check_against_reference({2, 9, 11, 5, 3}, false, 50, DType::Float64, 0.3);
  check_against_reference({2, 9, 11, 5, 3}, true, 51, DType::Float64, 2.0);
}

TEST_CASE("scaled_dot_product_attention with dropout draws the mask from its Philox counters",
          "[core][attention][dropout]") {
  check_against_reference({2, 37, 70, 8, 6}, false, 60, DType::Float64, std::nullopt, 0.3);
  check_against_reference({2, 37, 70, 8, 6}, true, 61, DType::Float64, std::nullopt, 0.5);
  check_against_reference({1, 40, 33, 16, 16}, true, 62, DType::Float32, std::nullopt, 0.2);
}

TEST_CASE("scaled_dot_product_attention dropout keeps a fraction 1 - p of the probabilities, the same from the "
          "same generator state",
          "[core][attention][dropout]") {
  // q = 0 makes every probability 1/S, and v = the identity makes out = Pd: out[i, j] is
  // 0 or 1/((1 − p)·S), and its zeros are the mask.
  const int64_t B = 4, H = 4, L = 64, S = 64;
  const double p = 0.3;
  const Tensor q = zeros({B, H, L, 8}, DType::Float64), k = uniform({B, H, S, 8}, -1, 1, DType::Float64);
  Tensor eye = zeros({S, S}, DType::Float64);
  for (int64_t j = 0; j < S; ++j) eye.data<double>()[j * S + j] = 1;
  const Tensor v = eye.reshape(Shape{1, 1, S, S}).expand(Shape{B, H, S, S}).contiguous();
  Generator g(9), g_again(9);
  const std::vector<double> first = ops::scaled_dot_product_attention(q, k, v, false, p, &g).to_vector<double>();
  const std::vector<double> again = ops::scaled_dot_product_attention(q, k, v, false, p, &g_again).to_vector<double>();
  CHECK(first == again);
  const std::vector<double> next = ops::scaled_dot_product_attention(q, k, v, false, p, &g).to_vector<double>();
  CHECK(next != first);  // the generator advanced past the first mask's counters
  int64_t kept = 0;
  for (double x : first) {
    if (x != 0) {
      ++kept;
      CHECK(x == Approx(1 / ((1 - p) * S)).epsilon(1e-14));
    }
  }
  // kept ~ Binomial(n, 1 − p) with n = 65536: sd = sqrt(n·p·(1 − p)) ≈ 117; 6 sd fail a
  // correct mask with probability about 2e-9.
  const double n = static_cast<double>(first.size()), sd = std::sqrt(n * p * (1 - p));
  CHECK(std::abs(static_cast<double>(kept) - n * (1 - p)) <= 6 * sd);
}

TEST_CASE("scaled_dot_product_attention gradients match finite differences, causal and not, with dropout",
          "[core][attention][gradcheck]") {
  Generator g(70);
  for (bool causal : {false, true}) {
    for (double p : {0.0, 0.4}) {
      INFO("causal " << causal << ", p " << p);
      const Tensor q = rand64({2, 5, 3}, g), k = rand64({2, 7, 3}, g), v = rand64({2, 7, 4}, g);
      minidl::testing::check_gradients(
          [&](const std::vector<Tensor>& in) {
            Generator drop(123);  // the same mask in every evaluation
            return minidl::testing::weighted_sum(
                ops::scaled_dot_product_attention(in[0], in[1], in[2], causal, p, &drop), 5);
          },
          {q, k, v});
    }
  }
}

TEST_CASE("scaled_dot_product_attention with causal leaves out[i] and dq[i] unchanged when keys after i change",
          "[core][attention]") {
  Generator g(80);
  const int64_t L = 70, S = 70, E = 12, i_last = 40;  // rows <= 40 must not see keys > 40
  const Tensor q = rand64({1, 2, L, E}, g), k = rand64({1, 2, S, E}, g), v = rand64({1, 2, S, E}, g);
  const Tensor dout = rand64({1, 2, L, E}, g);
  auto run = [&](const Tensor& kk, const Tensor& vv) {
    Tensor qq = q.clone().requires_grad_();
    const Tensor out = ops::scaled_dot_product_attention(qq, kk, vv, true);
    out.backward(dout);
    return std::pair{out.narrow(2, 0, i_last + 1).contiguous().to_vector<double>(),
                     qq.grad().narrow(2, 0, i_last + 1).contiguous().to_vector<double>()};
  };
  const auto before = run(k, v);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = i_last + 1; j < S; ++j)
      for (int64_t e = 0; e < E; ++e) {
        k2.data<double>()[(h * S + j) * E + e] += 5.0;
        v2.data<double>()[(h * S + j) * E + e] -= 3.0;
      }
  const auto after = run(k2, v2);
  // Hidden keys never enter a visible row's sums: the same bits, not just close.
  CHECK(before.first == after.first);
  CHECK(before.second == after.second);
}

TEST_CASE("scaled_dot_product_attention on head views of a fused qkv projection equals it on contiguous copies",
          "[core][attention]") {
  Generator g(90);
  const int64_t B = 3, T = 37, H = 4, hs = 16, C = H * hs;
  for (bool causal : {false, true}) {
    const Tensor qkv = rand64({B, T, 3 * C}, g);
    // [B, T, 3C] -> three [B, T, C] -> [B, T, H, hs] -> [B, H, T, hs]: strided on B, H and T.
    const Tensor fused = qkv.clone().requires_grad_();
    std::vector<Tensor> parts = fused.split(C, 2);
    std::vector<Tensor> heads;
    for (const Tensor& t : parts) heads.push_back(t.reshape(Shape{B, T, H, hs}).transpose(1, 2));
    REQUIRE(!heads[0].is_contiguous());
    const Tensor dout = rand64({B, H, T, hs}, g);
    const Tensor out = ops::scaled_dot_product_attention(heads[0], heads[1], heads[2], causal);
    out.backward(dout);
    Tensor qc = heads[0].detach().contiguous().clone().requires_grad_();
    Tensor kc = heads[1].detach().contiguous().clone().requires_grad_();
    Tensor vc = heads[2].detach().contiguous().clone().requires_grad_();
    const Tensor want = ops::scaled_dot_product_attention(qc, kc, vc, causal);
    want.backward(dout);
    // The same kernel on the same values in the same order: the same bits.
    CHECK(out.to_vector<double>() == want.to_vector<double>());
    const Tensor dqkv = fused.grad();  // [B, T, 3C]: the three head gradients, back in place
    const std::vector<Tensor> grads = {qc.grad(), kc.grad(), vc.grad()};
    for (int64_t part = 0; part < 3; ++part) {
      const Tensor got = dqkv.narrow(2, part * C, C).reshape(Shape{B, T, H, hs}).transpose(1, 2).contiguous();
      CHECK(got.to_vector<double>() == grads[static_cast<size_t>(part)].to_vector<double>());
    }
  }
}

TEST_CASE("scaled_dot_product_attention takes any number of leading dims and empty sizes", "[core][attention]") {
  Generator g(100);
  const Tensor q = rand64({2, 3, 2, 9, 5}, g), k = rand64({2, 3, 2, 11, 5}, g), v = rand64({2, 3, 2, 11, 4}, g);
  const Tensor out5 = ops::scaled_dot_product_attention(q, k, v, true);
  CHECK(out5.shape() == Shape{2, 3, 2, 9, 4});
  const Tensor out4 = ops::scaled_dot_product_attention(q.reshape(Shape{6, 2, 9, 5}), k.reshape(Shape{6, 2, 11, 5}),
                                                        v.reshape(Shape{6, 2, 11, 4}), true);
  CHECK(out5.to_vector<double>() == out4.to_vector<double>());
  // Rank 2 (one head, no batch) and rank 3.
  const Tensor q2 = rand64({9, 5}, g), k2 = rand64({11, 5}, g), v2 = rand64({11, 4}, g);
  const Tensor out2 = ops::scaled_dot_product_attention(q2, k2, v2);
  CHECK(out2.shape() == Shape{9, 4});
  const Tensor out3 = ops::scaled_dot_product_attention(q2.reshape(Shape{1, 9, 5}), k2.reshape(Shape{1, 11, 5}),
                                                        v2.reshape(Shape{1, 11, 4}));
  CHECK(out2.to_vector<double>() == out3.to_vector<double>());
  // No keys: softmax over nothing times an empty v is zeros (PyTorch), and so are the gradients.
  Tensor q0 = rand64({2, 4, 3}, g).requires_grad_();
  const Tensor k0 = zeros({2, 0, 3}, DType::Float64), v0 = zeros({2, 0, 5}, DType::Float64);
  const Tensor out0 = ops::scaled_dot_product_attention(q0, k0, v0);
  CHECK(out0.shape() == Shape{2, 4, 5});
  CHECK(out0.to_vector<double>() == std::vector<double>(40, 0.0));
  out0.sum().backward();
  CHECK(q0.grad().to_vector<double>() == std::vector<double>(24, 0.0));
  // No queries: an empty output.
  CHECK(ops::scaled_dot_product_attention(zeros({2, 0, 3}, DType::Float64), rand64({2, 4, 3}, g),
                                          rand64({2, 4, 5}, g))
            .shape() == Shape{2, 0, 5});
}

TEST_CASE("scaled_dot_product_attention rejects bad arguments with errors that name the shapes",
          "[core][attention][errors]") {
  const Tensor q = zeros({2, 3, 4}, DType::Float64), k = zeros({2, 5, 4}, DType::Float64);
  const Tensor v = zeros({2, 5, 6}, DType::Float64);
  std::string m = error_message([&] { ops::scaled_dot_product_attention(zeros({4}, DType::Float64), k, v); });
  CHECK_THAT(m, Catch::Contains("scaled_dot_product_attention") && Catch::Contains("rank >= 2") &&
                    Catch::Contains("[4]"));
  m = error_message([&] { ops::scaled_dot_product_attention(q, zeros({2, 1, 5, 4}, DType::Float64), v); });
  CHECK_THAT(m, Catch::Contains("one rank"));
  m = error_message([&] { ops::scaled_dot_product_attention(q, zeros({3, 5, 4}, DType::Float64), v); });
  CHECK_THAT(m, Catch::Contains("equal leading dims") && Catch::Contains("[3, 5, 4]"));
  m = error_message([&] { ops::scaled_dot_product_attention(q, zeros({2, 5, 7}, DType::Float64), v); });
  CHECK_THAT(m, Catch::Contains("k's last dim must equal q's") && Catch::Contains("[2, 5, 7]"));
  m = error_message([&] { ops::scaled_dot_product_attention(q, k, zeros({2, 6, 6}, DType::Float64)); });
  CHECK_THAT(m, Catch::Contains("as many rows as k") && Catch::Contains("[2, 6, 6]"));
  m = error_message([&] { ops::scaled_dot_product_attention(q, k.to(DType::Float32), v); });
  CHECK_THAT(m, Catch::Contains("share a dtype") && Catch::Contains("float32"));
  m = error_message([&] {
    ops::scaled_dot_product_attention(zeros({3, 4}, DType::Int64), zeros({3, 4}, DType::Int64),
                                      zeros({3, 4}, DType::Int64));
  });
  CHECK_THAT(m, Catch::Contains("must be a floating dtype") && Catch::Contains("int64"));
  for (double p : {1.0, -0.1}) {
    m = error_message([&] { ops::scaled_dot_product_attention(q, k, v, false, p); });
    CHECK_THAT(m, Catch::Contains("dropout_p must be in [0, 1)"));
  }
  m = error_message([&] {
    ops::scaled_dot_product_attention(zeros({2, 3, 0}, DType::Float64), zeros({2, 5, 0}, DType::Float64), v);
  });
  CHECK_THAT(m, Catch::Contains("E >= 1"));
  m = error_message([&] { ops::scaled_dot_product_attention(Tensor(), k, v); });
  CHECK_THAT(m, Catch::Contains("scaled_dot_product_attention"));
}
