// The CPU GEMM's path for CPUs without AVX-512 — its 6 × 16 float (6 × 8 double) micro-kernel,
// the blocking and thread split built on those sizes, and 16-bit operands widened while packed
// (no AVX512_BF16 kernel) — run on this machine from the copy that tests/kernels/gemm_avx2.cpp
// compiles for AVX2. Checked against a double reference on fresh random inputs: every transpose
// variant, shapes that leave partial tiles in both dimensions, the epilogue (alpha, beta, bias,
// ReLU). And for float and double operands, when the library is built for this machine
// (MINIDL_NATIVE, so with FMA), the same bits as the library's own GEMM: the tile sizes differ,
// but both run the same K blocks in the same order and each element's sum is the same chain of
// fused multiply-adds, so the GEMM gives the same bits on either kind of CPU. (bfloat16 differs
// by design: AVX512_BF16 adds its products in pairs. Other ops whose vector reductions depend
// on the vector width, layer norm's row sums among them, do not make this promise.)
// Compiled only when the configuring machine can run AVX2 + FMA (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#if defined(MINIDL_TEST_GEMM_AVX2)

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace minidl::cpu::gemm_avx2 {
template <typename T, typename In>
void gemm(const GemmArgs<T, In>& args);
}

using namespace minidl;

namespace {

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};

template <typename T, typename In>
void check_case(const Case& s, bool epilogue, std::mt19937_64& rng) {
  INFO("m " << s.m << ", n " << s.n << ", k " << s.k << ", ta " << s.ta << ", tb " << s.tb << ", epilogue " << epilogue
            << ", " << sizeof(T) * 8 << "-bit product of " << sizeof(In) * 8 << "-bit operands");
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<In> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n));
  std::vector<T> c(static_cast<size_t>(s.m * s.n)), bias(static_cast<size_t>(s.n));
  for (In& x : a) x = In(static_cast<float>(u(rng)));
  for (In& x : b) x = In(static_cast<float>(u(rng)));
  for (T& x : c) x = static_cast<T>(u(rng));
  for (T& x : bias) x = static_cast<T>(u(rng));
  const std::vector<T> c0 = c;
  cpu::GemmArgs<T, In> g;
  g.m = s.m, g.n = s.n, g.k = s.k;
  g.a = a.data(), g.rs_a = s.ta ? 1 : s.k, g.cs_a = s.ta ? s.m : 1;  // A stored [M, K] or [K, M]
  g.b = b.data(), g.rs_b = s.tb ? 1 : s.n, g.cs_b = s.tb ? s.k : 1;  // B stored [K, N] or [N, K]
  g.c = c.data(), g.ldc = s.n;
  if (epilogue) {
    g.alpha = T(0.75), g.beta = T(-0.5), g.bias = bias.data(), g.relu = true;
  }
  cpu::gemm_avx2::gemm(g);
#if defined(MINIDL_TEST_GEMM_SAME_BITS)
  if constexpr (std::is_same_v<T, In>) {
    std::vector<T> c_library = c0;
    cpu::GemmArgs<T, In> h = g;
    h.c = c_library.data();
    cpu::gemm(h);
    CHECK(std::memcmp(c.data(), c_library.data(), c.size() * sizeof(T)) == 0);
  }
#endif
  // Each element is a float32 (or float64) sum of k products: within k·eps·Σ|a·b| of the exact
  // value, plus the epilogue's few roundings of values of size 1. The operands are the same
  // (rounded) values on both sides, so 16-bit inputs add no error of their own.
  const double eps = std::numeric_limits<T>::epsilon();
  int64_t bad = 0;
  std::ostringstream first_bad;  // INFO is scoped: it is given to CHECK below, not inside the loop
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0, size = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double x = static_cast<double>(static_cast<float>(a[static_cast<size_t>(i * g.rs_a + p * g.cs_a)]));
        const double y = static_cast<double>(static_cast<float>(b[static_cast<size_t>(p * g.rs_b + j * g.cs_b)]));
        sum += x * y;
        size += std::fabs(x * y);
      }
      const size_t at = static_cast<size_t>(i * s.n + j);
      double want = sum;
      if (epilogue) {
        want = 0.75 * sum - 0.5 * static_cast<double>(c0[at]) + static_cast<double>(bias[static_cast<size_t>(j)]);
        want = want < 0 ? 0 : want;
      }
      const double tol = (static_cast<double>(s.k) * size + 8) * eps;
      if (!(std::fabs(static_cast<double>(c[at]) - want) <= tol)) {
        if (bad == 0) first_bad << "first bad element (" << i << ", " << j << "): got " << c[at] << ", want " << want;
        ++bad;
      }
    }
  INFO(first_bad.str());
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("the GEMM compiled for AVX2 matches a double reference on every transpose and partial tile",
          "[kernels][gemm][avx2]") {
  // This file is built only where the configuring machine has AVX2 + FMA (tests/CMakeLists.txt).
  // A binary carried to a CPU without them has run nothing here: say so as a failure, not a pass.
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    FAIL("this CPU has no AVX2 + FMA, though the tests were configured on one that has: "
         "the AVX2 GEMM cannot run here (reconfigure the build on this machine)");
  // 33³ is the smallest size past the plain-loop cut-off (32³); 7 × 13 rows and 17 columns leave
  // partial 6-row and 16-column tiles; 600 and 1100 cross the KC = 512 block, 150 × 300 the
  // MC and the thread split; n = 73 is the char-GPT's vocabulary. n = 7, 10 and 20 take the
  // narrow path (Note [a narrow C] in kernels/cpu/gemm.cpp) where they fit one strip: 7 and 10
  // in both copies (one vector or two), 20 in the library's 32-float strip on AVX-512 but not
  // in AVX2's 16, so that case also holds the narrow path to the blocked one's bits.
  const Case cases[] = {{33, 33, 33, false, false}, {91, 17, 45, false, false}, {91, 17, 45, true, true},
                        {150, 300, 600, false, true}, {150, 300, 600, true, false}, {64, 73, 1100, false, true},
                        {7, 200, 130, true, true},    {257, 40, 3, false, false}, {128, 10, 128, false, false},
                        {129, 10, 127, true, true},   {250, 7, 140, false, true},  {90, 20, 100, true, false}};
  std::mt19937_64 rng(36);
  for (const Case& s : cases)
    for (bool epilogue : {false, true}) {
      check_case<float, float>(s, epilogue, rng);
      check_case<double, double>(s, epilogue, rng);
      check_case<float, bfloat16>(s, epilogue, rng);
      check_case<float, float16>(s, epilogue, rng);
    }
}

#endif  // MINIDL_TEST_GEMM_AVX2
