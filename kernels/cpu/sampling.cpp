// CPU sampling kernels over the rows of [rows, cols]:
//   topk: the k best entries of each row, best first (largest or smallest; NaN counts as larger
//         than every number; equal values: lower index first), by a partial sort of the indices.
//   find_invalid_distribution / multinomial: draws of column j with probability w_j / Σ w,
//         by inverse CDF over the chunked sums of Note [multinomial's sums] (core/ops/sampling.cpp),
//         which kernels/cuda/sampling.cu follows step by step so that both draw the same samples.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

// Whether entry (a, i) comes before (b, j) in topk's order (the same test as kernels/cuda/sampling.cu).
template <typename T>
bool topk_before(T a, int64_t i, T b, int64_t j, bool largest) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return largest ? na : nb;
  if (!na && a != b) return largest ? a > b : a < b;
  return i < j;
}

constexpr int64_t kSumParts = 256;  // Note [multinomial's sums]

// The sum of w[begin, end) in double, in increasing order.
template <typename T>
double part_sum(const T* w, int64_t begin, int64_t end) {
  double s = 0.0;
  for (int64_t j = begin; j < end; ++j) s += static_cast<double>(w[j]);
  return s;
}

// One draw by inverse CDF (Note [multinomial's sums]): the first j whose running sum passes
// u · total, walking the parts by their sums and then the chosen part element by element.
template <typename T>
int64_t draw(const T* w, int64_t cols, int64_t part_len, const double* part, double total, double u) {
  const double target = u * total;
  double acc = 0.0;
  for (int64_t c = 0; c < kSumParts; ++c) {
    if (acc + part[c] > target) {
      const int64_t begin = c * part_len, end = std::min(begin + part_len, cols);
      double local = 0.0;
      for (int64_t j = begin; j < end; ++j) {
        local += static_cast<double>(w[j]);
        if (acc + local > target) return j;
      }
    }
    acc += part[c];
  }
  // u · total rounded up to the total: the last positive weight (the row has one).
  for (int64_t j = cols - 1; j > 0; --j)
    if (w[j] > T(0)) return j;
  return 0;
}

}  // namespace

void CpuBackend::topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  if (HalfStaging::needed({&x, &values})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    topk(s.in(x), k, largest, s.out(values), indices);
    return s.commit();
  }
  dispatch_floating(x.dtype(), "topk", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.shape()[0], cols = x.shape()[1];
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    parallel_rows(rows, rows * cols, [&](int64_t r) {
      const T* row = px + r * cols;
      std::vector<int64_t> order(static_cast<size_t>(cols));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t i, int64_t j) { return topk_before(row[i], i, row[j], j, largest); });
      for (int64_t q = 0; q < k; ++q) {
        pi[r * k + q] = order[static_cast<size_t>(q)];
        pv[r * k + q] = row[order[static_cast<size_t>(q)]];
      }
    });
  });
}

std::optional<std::pair<int64_t, MultinomialDefect>> CpuBackend::find_invalid_distribution(const Tensor& weights,
                                                                                           int64_t min_positive) {
  if (HalfStaging::needed({&weights})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    return find_invalid_distribution(s.in(weights), min_positive);
  }
  std::optional<std::pair<int64_t, MultinomialDefect>> found;
  dispatch_floating(weights.dtype(), "multinomial", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = weights.shape()[0], cols = weights.shape()[1];
    const T* pw = weights.data<T>();
    for (int64_t r = 0; r < rows && !found; ++r) {
      bool not_finite = false, negative = false;
      int64_t positive = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const T v = pw[r * cols + j];
        not_finite |= !std::isfinite(v);
        negative |= v < T(0);
        positive += v > T(0);
      }
      if (not_finite) found = {r, MultinomialDefect::NotFinite};
      else if (negative) found = {r, MultinomialDefect::Negative};
      else if (positive == 0) found = {r, MultinomialDefect::ZeroSum};
      else if (positive < min_positive) found = {r, MultinomialDefect::TooFewPositive};
    }
  });
  return found;
}

void CpuBackend::multinomial(const Tensor& weights, int64_t n, bool replacement, uint64_t seed, uint64_t offset,
                             Tensor& out) {
  if (HalfStaging::needed({&weights})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    multinomial(s.in(weights), n, replacement, seed, offset, out);
    return s.commit();
  }
  dispatch_floating(weights.dtype(), "multinomial", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = weights.shape()[0], cols = weights.shape()[1];
    const int64_t part_len = (cols + kSumParts - 1) / kSumParts;
    const T* pw = weights.data<T>();
    int64_t* po = out.data<int64_t>();
    parallel_rows(rows, rows * (cols + n), [&](int64_t r) {
      // Without replacement a drawn weight becomes 0: a copy of the row holds the remaining ones.
      std::vector<T> row(pw + r * cols, pw + (r + 1) * cols);
      double part[kSumParts];
      for (int64_t c = 0; c < kSumParts; ++c)
        part[c] = part_sum(row.data(), std::min(c * part_len, cols), std::min((c + 1) * part_len, cols));
      for (int64_t d = 0; d < n; ++d) {
        double total = 0.0;
        for (int64_t c = 0; c < kSumParts; ++c) total += part[c];
        const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(r * n + d));
        const int64_t j = draw(row.data(), cols, part_len, part, total, philox::uniform_double(b.x[0], b.x[1]));
        po[r * n + d] = j;
        if (!replacement) {
          row[static_cast<size_t>(j)] = T(0);
          const int64_t c = j / part_len;
          part[c] = part_sum(row.data(), c * part_len, std::min((c + 1) * part_len, cols));
        }
      }
    });
  });
}

}  // namespace minidl::cpu
