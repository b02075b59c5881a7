// The 16-bit dtypes (core/half.h, core/dtype.h): the casts bit for bit against a table of
// hand-checked encodings (ties to even both ways, ±0, ±Inf, NaN, overflow to Inf, subnormals),
// against an independent reference (rounding in double with nearbyint, below) on every 16-bit
// pattern and on random float32 patterns, and the tensor surface: to(dtype), printing, item(),
// factories, random fills and type promotion.
#include <catch2/catch.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "core/generator.h"
#include "core/half.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// The format's value nearest to x, ties to even, by arithmetic in double instead of bit
// manipulation: p significand bits, emin the exponent of the smallest normal (subnormals share
// its quantum), max_finite the largest finite value. Every step is exact in double (scaling by
// powers of two, nearbyint of a value below 2^53) except the one rounding that defines the result.
double reference_round(double x, int p, int emin, double max_finite) {
  if (std::isnan(x) || std::isinf(x)) return x;
  if (x == 0) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m·2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const int lead = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, lead - (p - 1));
  const double y = std::nearbyint(std::fabs(x) / quantum) * quantum;  // FE_TONEAREST: ties to even
  const double rounded = y > max_finite ? std::numeric_limits<double>::infinity() : y;
  return std::copysign(rounded, x);
}
double reference_bf16(float x) { return reference_round(x, 8, -126, 3.3895313892515355e38); }
double reference_fp16(float x) { return reference_round(x, 11, -14, 65504.0); }

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

TEST_CASE("float32 -> bfloat16 rounds to nearest even, bit for bit", "[half]") {
  struct Case {
    uint32_t f;
    uint16_t b;
  };
  const Case cases[] = {
      {0x3f800000, 0x3f80},  // 1
      {0xbf800000, 0xbf80},  // -1
      {0x00000000, 0x0000},  // +0
      {0x80000000, 0x8000},  // -0
      {0x3f808000, 0x3f80},  // 1 + 2^-8: a tie, the even neighbour 0x3f80 (down)
      {0x3f818000, 0x3f82},  // a tie above the odd 0x3f81: up to the even 0x3f82
      {0x3f808001, 0x3f81},  // just above a tie: up
      {0x3f807fff, 0x3f80},  // just below a tie: down
      {0x3dcccccd, 0x3dcd},  // 0.1f: the lower half 0xcccd is above halfway
      {0x3fffffff, 0x4000},  // rounds up into the next binade (2)
      {0x7f7f7fff, 0x7f7f},  // below the halfway point under FLT_MAX: the largest finite bf16
      {0x7f7fffff, 0x7f80},  // FLT_MAX rounds past the largest bf16: +Inf
      {0xff7fffff, 0xff80},  // -FLT_MAX: -Inf
      {0x7f800000, 0x7f80},  // +Inf
      {0xff800000, 0xff80},  // -Inf
      {0x7fc00000, 0x7fc0},  // NaN
      {0xffc00000, 0x7fc0},  // -NaN: the canonical quiet NaN (PyTorch's c10::BFloat16 does the same)
      {0x7f800001, 0x7fc0},  // a signalling NaN whose payload would round away: still NaN
      {0x00000001, 0x0000},  // the smallest float32 subnormal: rounds to +0
      {0x00008000, 0x0000},  // a tie at the subnormal quantum: to the even 0
      {0x00018000, 0x0002},  // a tie above the odd 0x0001: to 0x0002
      {0x00010000, 0x0001},  // the smallest bf16 subnormal, exact
      {0x80010000, 0x8001},  // and negative
  };
  for (const Case& c : cases) {
    INFO("float32 bits 0x" << std::hex << c.f);
    CHECK(float_to_bfloat16_bits(from_bits(c.f)) == c.b);
    CHECK(bfloat16(from_bits(c.f)).bits() == c.b);
  }
}

TEST_CASE("float32 -> float16 rounds to nearest even, overflows to Inf and makes subnormals, bit for bit", "[half]") {
  struct Case {
    float f;
    uint16_t h;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {0.1f, 0x2e66},
      {1.0f + 0x1p-11f, 0x3c00},      // a tie: the even 0x3c00
      {1.0f + 3 * 0x1p-11f, 0x3c02},  // a tie above the odd 0x3c01: up
      {65504.0f, 0x7bff},             // the largest float16
      {65519.0f, 0x7bff},             // below the halfway point to 65536: stays finite
      {65520.0f, 0x7c00},             // the halfway point: ties to even, which is Inf
      {1e6f, 0x7c00},                 // far past the range
      {-1e6f, 0xfc00},
      {0x1p-14f, 0x0400},              // the smallest normal
      {0x1p-14f - 0x1p-25f, 0x0400},  // just under it, a tie between 0x03ff and 0x0400: the even 0x0400
      {0x1p-24f, 0x0001},              // the smallest subnormal
      {0x1p-25f, 0x0000},              // half of it: a tie, to the even 0
      {from_bits(0x33000001), 0x0001}, // just above that tie: up
      {3 * 0x1p-25f, 0x0002},          // 1.5 quanta: a tie above the odd 0x0001: up
      {1023 * 0x1p-24f, 0x03ff},       // the largest subnormal, exact
      {inf, 0x7c00},
      {-inf, 0xfc00},
      {nan, 0x7e00},
      {-nan, 0xfe00},  // the sign of a NaN is kept, as PyTorch's c10::Half keeps it
  };
  for (const Case& c : cases) {
    INFO("float32 " << c.f << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(c.f) << ")");
    CHECK(float_to_float16_bits(c.f) == c.h);
    CHECK(float16(c.f).bits() == c.h);
  }
}

TEST_CASE("16-bit -> float32 is exact for every encoding, and rounding back returns it", "[half]") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float fb = bfloat16_bits_to_float(b), fh = float16_bits_to_float(b);
    INFO("bits 0x" << std::hex << bits);
    // bfloat16 is float32's upper half.
    REQUIRE(std::bit_cast<uint32_t>(fb) == bits << 16);
    // float16: every value is a float32 value, so the round trip is the identity; a NaN comes
    // back as a NaN (its payload is not kept, as in PyTorch).
    if (std::isnan(fh)) {
      REQUIRE(((bits >> 10) & 0x1f) == 0x1f);
      REQUIRE((bits & 0x3ff) != 0);
      REQUIRE(float_to_float16_bits(fh) == ((bits & 0x8000) | 0x7e00));
    } else {
      REQUIRE(float_to_float16_bits(fh) == b);
      REQUIRE(same_value(fh, reference_fp16(fh)));
    }
    if (!std::isnan(fb)) REQUIRE(float_to_bfloat16_bits(fb) == b);
  }
  CHECK(float16_bits_to_float(0x0001) == 0x1p-24f);
  CHECK(float16_bits_to_float(0x03ff) == 1023 * 0x1p-24f);
  CHECK(std::signbit(float16_bits_to_float(0x8000)));
  CHECK(std::isinf(float16_bits_to_float(0x7c00)));
}

TEST_CASE("the casts agree with a reference rounding in double on random float32 bit patterns", "[half]") {
  std::mt19937 rng(20261207);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Half of the draws are spread over float16's range (exponents 2^-26 .. 2^17) where its
  // subnormals, ties and overflow lie; the others are any float32 pattern.
  std::uniform_int_distribution<uint32_t> exponent(101, 144), mantissa(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u =
        i % 2 ? any_bits(rng) : (sign(rng) << 31) | (exponent(rng) << 23) | mantissa(rng);
    const float x = from_bits(u);
    INFO("float32 bits 0x" << std::hex << u);
    REQUIRE(same_value(bfloat16_bits_to_float(float_to_bfloat16_bits(x)), reference_bf16(x)));
    REQUIRE(same_value(float16_bits_to_float(float_to_float16_bits(x)), reference_fp16(x)));
    // The float16 type's run-time conversions (F16C instructions where the build has them).
    const float16 h(x);
    REQUIRE(h.bits() == float_to_float16_bits(x));
    REQUIRE(same_value(static_cast<float>(h), float16_bits_to_float(h.bits())));
  }
}

TEST_CASE("Tensor::to converts between every pair of dtypes as the scalar casts do", "[half]") {
  const std::vector<double> values = {0.0, -0.0, 1.0, -2.5, 0.1, 65504.0, 65520.0, 1e-8, 3.0e38, -7.0};
  const Tensor x64 = from_vector(values);  // float64
  for (DType half : {DType::BFloat16, DType::Float16}) {
    INFO(half);
    // From float32 (the path autocast takes) and from float64 (which PyTorch rounds to float first).
    for (const Tensor& src : {x64.to(DType::Float32), x64}) {
      const Tensor h = src.to(half);
      CHECK(h.dtype() == half);
      const std::vector<float> back = h.to(DType::Float32).to_vector<float>();
      for (size_t i = 0; i < values.size(); ++i) {
        const float f = static_cast<float>(values[i]);
        const double want = half == DType::BFloat16 ? reference_bf16(f) : reference_fp16(f);
        INFO(values[i]);
        CHECK(same_value(back[i], want));
      }
    }
    // 16-bit to the other 16-bit format goes through float32.
    const DType other = half == DType::BFloat16 ? DType::Float16 : DType::BFloat16;
    const Tensor round_trip = x64.to(half).to(other).to(DType::Float32);
    const Tensor via_float = x64.to(half).to(DType::Float32).to(other).to(DType::Float32);
    CHECK(round_trip.to_vector<float>() == via_float.to_vector<float>());
    // int64 labels convert too.
    CHECK(from_vector<int64_t>({3, -4, 300}).to(half).to(DType::Float32).to_vector<float>() ==
          std::vector<float>{3, -4, 300});
    CHECK(from_vector<float>({2.75f, -1.5f}).to(half).to(DType::Int64).to_vector<int64_t>() ==
          std::vector<int64_t>{2, -1});
  }
}

TEST_CASE("16-bit tensors print, read back with item() and to_vector(), and come from the factories", "[half]") {
  const Tensor b = from_vector<double>({1.0, 0.1, -3.0}, Shape{3}, DType::BFloat16);
  std::ostringstream os;
  os << b;
  CHECK(os.str().find("dtype=bfloat16") != std::string::npos);
  CHECK(os.str().find("0.1001") != std::string::npos);  // 0.1 in bf16 is 0.10009765625
  CHECK(b.at({1}) == 0.10009765625);
  CHECK(b.narrow(0, 2, 1).item() == -3.0);
  CHECK(b.narrow(0, 0, 1).reshape(Shape{}).item<bfloat16>().bits() == 0x3f80);
  CHECK_THROWS_WITH(b.narrow(0, 0, 1).item<float>(), Catch::Contains("item<float32>") && Catch::Contains("bfloat16"));
  const std::vector<float16> h = full(Shape{2}, 65504.0, DType::Float16).to_vector<float16>();
  CHECK(h[0].bits() == 0x7bff);
  CHECK(ones(Shape{4}, DType::Float16).sum().item() == 4.0);
  CHECK(zeros(Shape{2, 2}, DType::BFloat16).dtype() == DType::BFloat16);
  CHECK(arange(0.0, 4.0, 1.0, DType::BFloat16).to(DType::Float32).to_vector<float>() ==
        std::vector<float>{0, 1, 2, 3});
  CHECK(full(Shape{1}, 1e6, DType::Float16).item() == std::numeric_limits<double>::infinity());
  // 16-bit tensors live on CUDA devices too (tests/cuda/test_cuda_half_ops.cpp); float64 does not.
  CHECK_THROWS_WITH(empty(Shape{2}, TensorOptions(DType::Float64, Device::cuda(0))),
                    Catch::Contains("float64") && Catch::Contains("cuda:0"));
}

TEST_CASE("randn and rand in 16 bits are the float32 draws of the same counters, rounded", "[half]") {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    INFO(half);
    Generator g32(7), g16(7);
    const Tensor n32 = randn(Shape{1000}, DType::Float32, &g32);
    const Tensor n16 = randn(Shape{1000}, half, &g16);
    CHECK(n16.dtype() == half);
    CHECK(n16.to(DType::Float32).to_vector<float>() == n32.to(half).to(DType::Float32).to_vector<float>());
    // uniform stays inside [low, high) after rounding (a draw just under 1 rounds onto 1 in
    // bfloat16 and is pulled back to the largest value below it).
    const std::vector<float> u = rand(Shape{20000}, half, &g16).to(DType::Float32).to_vector<float>();
    for (float v : u) REQUIRE((v >= 0.0f && v < 1.0f));
    const std::vector<float> neg = uniform(Shape{20000}, -2.0, -1.0, half, &g16).to(DType::Float32).to_vector<float>();
    for (float v : neg) REQUIRE((v >= -2.0f && v < -1.0f));
  }
}

TEST_CASE("add, sub, mul and div promote floating dtypes as PyTorch does, and gradients return in each input's dtype",
          "[half]") {
  CHECK(promote_types(DType::BFloat16, DType::Float32) == DType::Float32);
  CHECK(promote_types(DType::Float16, DType::BFloat16) == DType::Float32);
  CHECK(promote_types(DType::Float16, DType::Float64) == DType::Float64);
  CHECK(promote_types(DType::BFloat16, DType::BFloat16) == DType::BFloat16);
  const Tensor a = from_vector<float>({1.5f, -2.0f, 3.0f}).requires_grad_();
  const Tensor b = from_vector<double>({0.1, 0.2, 0.3}, Shape{3}, DType::BFloat16).requires_grad_();
  const Tensor y = a * b + b;
  CHECK(y.dtype() == DType::Float32);
  // b's float32 value is the bf16 one: y = a·b + b exactly as float32 math on those values.
  const std::vector<float> bf = b.to(DType::Float32).to_vector<float>();
  const std::vector<float> yv = y.to_vector<float>();
  for (int i = 0; i < 3; ++i) CHECK(yv[i] == a.to_vector<float>()[i] * bf[i] + bf[i]);
  y.sum().backward();
  CHECK(a.grad().dtype() == DType::Float32);
  CHECK(b.grad().dtype() == DType::BFloat16);
  CHECK(a.grad().to_vector<float>() == bf);
  // db = a + 1 rounded to bf16: 2.5, -1, 4 are exact.
  CHECK(b.grad().to(DType::Float32).to_vector<float>() == std::vector<float>{2.5f, -1.0f, 4.0f});
  // int64 with a floating tensor is still refused.
  CHECK_THROWS_WITH(a + from_vector<int64_t>({1, 2, 3}), Catch::Contains("dtypes differ"));
}

TEST_CASE("16-bit means, reduced losses and scalar ops compute in float32 and round once, as PyTorch's do", "[half]") {
  // A float16 sum of 100000 ones overflows (65504 is its largest value); the mean is still 1.
  CHECK(ops::mean(ones({100000}, DType::Float16)).item() == 1.0);
  CHECK(ops::mean(ones({3, 100000}, DType::Float16), 1).to(DType::Float32).to_vector<float>() ==
        std::vector<float>{1, 1, 1});
  // The scalar is not rounded to 16 bits first: 1e5 is Inf in float16, 0.1 is 0.10009765625 in bfloat16.
  const Tensor h = full({2}, 3.0, DType::Float16);
  CHECK((h / 1e5).dtype() == DType::Float16);
  CHECK((h / 1e5).to(DType::Float32).to_vector<float>()[0] == float16(3.0f / 1e5f));
  const Tensor b = full({2}, 10.0, DType::BFloat16);
  CHECK((b * 0.1).to(DType::Float32).to_vector<float>()[0] == 1.0f);
  // A 0-dim float32 tensor does not decide the dtype of a result with dimensions (PyTorch's rule).
  const Tensor s = scalar_tensor(0.1, DType::Float32);
  CHECK((b * s).dtype() == DType::BFloat16);
  CHECK((s * b).to(DType::Float32).to_vector<float>()[0] == 1.0f);
  // A reduced cross-entropy of float16 logits over many rows: the float32 loss, rounded.
  const int64_t rows = 10000;
  const Tensor logits = zeros({rows, 4}, DType::Float16);
  const Tensor targets = zeros({rows}, DType::Int64);
  const Tensor loss = ops::softmax_cross_entropy(logits, targets, ops::Reduction::Sum);
  CHECK(loss.dtype() == DType::Float16);
  CHECK(loss.item() == Approx(rows * std::log(4.0)).epsilon(1e-3));  // 13863: float16's step there is 8
  // The mean's 1/count is not rounded to 16 bits: log 4 within float16's own rounding of it.
  CHECK(ops::softmax_cross_entropy(logits, targets).item() == Approx(std::log(4.0)).epsilon(1e-3));
}
