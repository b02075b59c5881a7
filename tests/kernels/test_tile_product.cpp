// kernels/cpu/tile_product.h, the register-tiled block product of the CPU attention, against a
// long double reference on fresh random blocks: every count of rows left over by the register
// tile, column counts that take the two-vector strips, the one-vector strip and the partial
// last vector, A read as stored and transposed, B and C with padded rows (the padding must stay
// untouched), C = A·B and C += A·B, and k = 0. And the header's promise that an element's bits
// do not depend on which path or which tile position computed it.
// With MINIDL_NATIVE this file is compiled with -march=native as the library is
// (tests/CMakeLists.txt), so that the multiply-adds fuse here as they do there: a path that
// fused differently from the others would show in the bit check. (The AVX2 instantiation runs
// in the AVX2 copy of the GEMM, tests/kernels/test_gemm_avx2.cpp, through its narrow path.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/cpu/tile_product.h"

using namespace minidl;
using minidl::cpu::tile_product;

namespace {

template <typename T>
struct Problem {
  int64_t m, n, k;
  bool a_transposed;
  std::vector<T> a, b, c;  // a: [m, k] or [k, m]; b: [k, n + 3]; c: [m, n + 5], padding included
  int64_t a_row() const { return a_transposed ? 1 : k; }
  int64_t a_col() const { return a_transposed ? m : 1; }
  static constexpr int64_t kBPad = 3, kCPad = 5;
  int64_t b_row() const { return n + kBPad; }
  int64_t c_row() const { return n + kCPad; }
  T a_at(int64_t r, int64_t p) const { return a[static_cast<size_t>(r * a_row() + p * a_col())]; }
};

template <typename T>
Problem<T> make_problem(int64_t m, int64_t n, int64_t k, bool a_transposed, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  Problem<T> p{m, n, k, a_transposed, {}, {}, {}};
  p.a.resize(static_cast<size_t>(m * k));
  p.b.resize(static_cast<size_t>(k * p.b_row()));
  p.c.resize(static_cast<size_t>(m * p.c_row()));
  for (T& x : p.a) x = static_cast<T>(u(rng));
  for (T& x : p.b) x = static_cast<T>(u(rng));
  for (T& x : p.c) x = static_cast<T>(u(rng));
  return p;
}

template <typename T, bool kAccumulate>
void check_against_reference(int64_t m, int64_t n, int64_t k, bool a_transposed, std::mt19937_64& rng) {
  INFO("m " << m << ", n " << n << ", k " << k << ", A transposed " << a_transposed << ", accumulate " << kAccumulate
            << ", " << sizeof(T) * 8 << "-bit");
  Problem<T> p = make_problem<T>(m, n, k, a_transposed, rng);
  const std::vector<T> c0 = p.c;
  tile_product<T, kAccumulate>(m, n, k, p.a.data(), p.a_row(), p.a_col(), p.b.data(), p.b_row(), p.c.data(), p.c_row());
  // Each element is k rounded multiply-adds onto C (or 0): within k·eps·(|C| + Σ|a·b|) of the
  // exact sum, half of that being the bound (eps/2 a rounding), the other half room.
  const double eps = std::numeric_limits<T>::epsilon();
  int64_t bad = 0;
  std::ostringstream first_bad;  // INFO is scoped: it is given to CHECK below, not inside the loop
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < p.c_row(); ++j) {
      const size_t at = static_cast<size_t>(r * p.c_row() + j);
      if (j >= n) {  // the padding of C's rows: never written
        if (std::memcmp(&p.c[at], &c0[at], sizeof(T)) != 0) ++bad;
        continue;
      }
      long double want = kAccumulate ? c0[at] : 0, size = kAccumulate ? std::fabs(c0[at]) : 0;
      for (int64_t q = 0; q < k; ++q) {
        const long double term =
            static_cast<long double>(p.a_at(r, q)) * p.b[static_cast<size_t>(q * p.b_row() + j)];
        want += term;
        size += std::fabs(term);
      }
      const double tol = static_cast<double>(k + 1) * eps * static_cast<double>(size);
      if (!(std::fabs(static_cast<double>(p.c[at] - want)) <= tol)) {
        if (bad == 0)
          first_bad << "first bad element (" << r << ", " << j << "): got " << p.c[at] << ", want "
                    << static_cast<double>(want);
        ++bad;
      }
    }
  INFO(first_bad.str());
  CHECK(bad == 0);
}

// The product of rows [r0, m) and columns [j0, n) computed alone against the same elements of
// the whole product: other tile positions, other strips or the partial vector, the same bits.
template <typename T, bool kAccumulate>
void check_position_independent(int64_t m, int64_t n, int64_t k, int64_t r0, int64_t j0, std::mt19937_64& rng) {
  INFO("m " << m << ", n " << n << ", k " << k << ", from row " << r0 << ", column " << j0);
  Problem<T> whole = make_problem<T>(m, n, k, false, rng);
  Problem<T> part = whole;
  tile_product<T, kAccumulate>(m, n, k, whole.a.data(), whole.a_row(), whole.a_col(), whole.b.data(),
                               whole.b_row(), whole.c.data(), whole.c_row());
  tile_product<T, kAccumulate>(m - r0, n - j0, k, part.a.data() + r0 * part.a_row(), part.a_row(), part.a_col(),
                               part.b.data() + j0, part.b_row(), part.c.data() + r0 * part.c_row() + j0,
                               part.c_row());
  int64_t differ = 0;
  for (int64_t r = r0; r < m; ++r)
    for (int64_t j = j0; j < n; ++j) {
      const size_t at = static_cast<size_t>(r * whole.c_row() + j);
      if (std::memcmp(&whole.c[at], &part.c[at], sizeof(T)) != 0) ++differ;
    }
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("tile_product matches a long double reference on every tile remainder and layout",
          "[kernels][attention][tile_product]") {
  std::mt19937_64 rng(2026);
  for (int64_t m : {1, 2, 5, 6, 7, 8, 9, 13, 32, 37})
    for (int64_t n : {1, 3, 4, 8, 15, 16, 17, 31, 32, 33, 47, 64, 70})
      for (int64_t k : {0, 1, 7, 64})
        for (bool at : {false, true}) {
          check_against_reference<float, false>(m, n, k, at, rng);
          check_against_reference<float, true>(m, n, k, at, rng);
          check_against_reference<double, false>(m, n, k, at, rng);
          check_against_reference<double, true>(m, n, k, at, rng);
        }
}

TEST_CASE("tile_product gives an element the same bits whatever its tile position or path",
          "[kernels][attention][tile_product]") {
  std::mt19937_64 rng(7);
  for (int64_t r0 : {0, 1, 3, 7})
    for (int64_t j0 : {0, 1, 5, 8, 16, 17}) {
      check_position_independent<float, true>(40, 70, 33, r0, j0, rng);
      check_position_independent<float, false>(40, 70, 33, r0, j0, rng);
      check_position_independent<double, true>(40, 70, 33, r0, j0, rng);
      check_position_independent<double, false>(40, 70, 33, r0, j0, rng);
    }
}
