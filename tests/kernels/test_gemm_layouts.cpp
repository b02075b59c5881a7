// The CPU GEMM gives the same bits whatever the layout of its operands. Packing (kernels/cpu/
// gemm.cpp) copies op(A) and op(B) into the same panels whether they are stored row-major,
// transposed or through arbitrary strides: only how it reads them differs (for bfloat16 on a CPU
// with AVX512_BF16, Note [packing pairs]: a 32-bit copy per pair, a vector interleave of two
// runs, or a word loop). So one product computed from five layouts of the same values must
// agree bit for bit, and with a double reference within float32 accumulation's bound. The
// shapes cross every packing edge: odd K (the last pair half empty), K past one K block (512),
// rows and columns that leave partial strips, and a 1-row and a 1-column product.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"

using namespace minidl;

namespace {

// One way of storing a [rows, cols] operand: element (i, j) at data[i*rs + j*cs].
struct Layout {
  const char* name;
  int64_t rs, cs, size;
};

// Row-major, column-major, and two strided ones (every other element of a wider buffer, in
// row and in column order), for a [rows, cols] operand.
std::vector<Layout> layouts(int64_t rows, int64_t cols) {
  return {{"row-major", cols, 1, rows * cols},
          {"transposed", 1, rows, rows * cols},
          {"row-major, stride 2", 2 * cols + 3, 2, rows * (2 * cols + 3)},
          {"transposed, stride 2", 2, 2 * rows + 5, cols * (2 * rows + 5)}};
}

template <typename In>
std::vector<In> store(const std::vector<float>& values, int64_t rows, int64_t cols, const Layout& l) {
  std::vector<In> out(static_cast<size_t>(l.size), In(-7.0f));  // gaps hold a value that must not be read
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(i * l.rs + j * l.cs)] = In(values[static_cast<size_t>(i * cols + j)]);
  return out;
}

template <typename In>
void check_layouts(int64_t m, int64_t n, int64_t k, std::mt19937_64& rng) {
  INFO("m " << m << ", n " << n << ", k " << k << ", " << sizeof(In) * 8 << "-bit operands");
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& x : a) x = static_cast<float>(In(u(rng)));  // values the operand type holds exactly
  for (float& x : b) x = static_cast<float>(In(u(rng)));

  std::vector<float> first;
  std::string first_name;
  for (const Layout& la : layouts(m, k))
    for (const Layout& lb : layouts(k, n)) {
      const std::vector<In> sa = store<In>(a, m, k, la), sb = store<In>(b, k, n, lb);
      std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
      cpu::GemmArgs<float, In> g;
      g.m = m, g.n = n, g.k = k;
      g.a = sa.data(), g.rs_a = la.rs, g.cs_a = la.cs;
      g.b = sb.data(), g.rs_b = lb.rs, g.cs_b = lb.cs;
      g.c = c.data(), g.ldc = n;
      cpu::gemm(g);
      const std::string name = std::string("A ") + la.name + ", B " + lb.name;
      if (first.empty()) {
        first = c;
        first_name = name;
        // Each element is a float32 sum of k exact products: within k·2^-24·Σ|a·b| of the exact
        // sum (the operands are exact in both types, so no input rounding enters).
        int64_t bad = 0;
        std::ostringstream first_bad;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0, size = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double x = a[static_cast<size_t>(i * k + p)], y = b[static_cast<size_t>(p * n + j)];
              sum += x * y;
              size += std::fabs(x * y);
            }
            const double got = c[static_cast<size_t>(i * n + j)];
            if (!(std::fabs(got - sum) <= static_cast<double>(k) * 0x1p-24 * size)) {
              if (bad++ == 0) first_bad << "(" << i << ", " << j << "): got " << got << ", want " << sum;
            }
          }
        INFO(name << ": first element outside the bound " << first_bad.str());
        CHECK(bad == 0);
        continue;
      }
      INFO(name << " against " << first_name);
      CHECK(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0);
    }
}

}  // namespace

TEST_CASE("the CPU GEMM gives the same bits for every layout of its operands", "[kernels][gemm]") {
  struct Shape3 {
    int64_t m, n, k;
  };
  // 33³ is past the plain-loop cut-off; 67 × 45 leaves partial 8-row and 32-column strips; K =
  // 301 is odd, 1031 crosses two K blocks and is odd; 1 × 70 and 70 × 1 are one row, one column.
  const Shape3 shapes[] = {{33, 33, 33}, {67, 45, 301}, {40, 100, 1031}, {1, 70, 65}, {70, 1, 65}, {130, 37, 2}};
  std::mt19937_64 rng(1036);
  for (const Shape3& s : shapes) {
    check_layouts<bfloat16>(s.m, s.n, s.k, rng);
    check_layouts<float16>(s.m, s.n, s.k, rng);
    check_layouts<float>(s.m, s.n, s.k, rng);
  }
}
