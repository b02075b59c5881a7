// Sampling kernels in the CUDA backend (float32), over the rows of [rows, cols]:
//   topk: values[r, q], indices[r, q] = the q-th best entry of row r (q < k), best first: largest
//         (or smallest), NaN counting as larger than every number, equal values lower index first.
//   find_invalid_distribution: per row, whether its weights hold a non-finite or negative entry,
//         no positive one, or fewer positive ones than a draw without replacement needs.
//   multinomial: out[r, d] = the column drawn by inverse CDF at the uniform double of Philox
//         counter offset + r·n + d, Note [multinomial's sums] (core/ops/sampling.cpp).
// Strategy: a block per row (grid-stride over rows) for all three.
//   topk makes k passes over the row, pass q keeping each thread's best entry among those after
//   pass q-1's pick in the order, then reducing the threads' candidates in shared memory: O(k·cols)
//   reads, no scratch memory, exact ties, sorted output. Meant for the small k of sampling (a
//   k of 50 over 50257 logits reads the row 50 times, from L2); a large k wants a radix select.
//   multinomial gives thread c the c-th of the 256 parts of the row (its sum, in double, in
//   increasing column order); draws with replacement are spread over the threads, each walking
//   the shared part sums; without replacement thread 0 draws one after another, zeroing the drawn
//   weight in a scratch copy of the row and forming that part's sum again. The same additions as
//   the CPU (kernels/cpu/sampling.cpp), so the same samples.
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kTopkThreads = 256;
constexpr int kSumParts = 256;  // Note [multinomial's sums]; also the multinomial block size
constexpr int kCheckThreads = 256;

// Whether entry (a, i) comes before (b, j) in topk's order; j < 0 is "no entry", after everything.
// (The CPU's topk_before, kernels/cpu/sampling.cpp, plus the empty entry.)
__device__ inline bool topk_before(float a, int64_t i, float b, int64_t j, bool largest) {
  if (j < 0) return i >= 0;
  if (i < 0) return false;
  const bool na = a != a, nb = b != b;
  if (na != nb) return largest ? na : nb;
  if (!na && a != b) return largest ? a > b : a < b;
  return i < j;
}

// The sum of w[begin, end) in double, in increasing order.
__device__ inline double part_sum(const float* w, int64_t begin, int64_t end) {
  double s = 0.0;
  for (int64_t j = begin; j < end; ++j) s += static_cast<double>(w[j]);
  return s;
}

// One draw by inverse CDF: the CPU's draw() (kernels/cpu/sampling.cpp), addition for addition.
__device__ inline int64_t draw(const float* w, int64_t cols, int64_t part_len, const double* part, double total,
                               double u) {
  const double target = u * total;
  double acc = 0.0;
  for (int64_t c = 0; c < kSumParts; ++c) {
    if (acc + part[c] > target) {
      const int64_t begin = c * part_len, end = begin + part_len < cols ? begin + part_len : cols;
      double local = 0.0;
      for (int64_t j = begin; j < end; ++j) {
        local += static_cast<double>(w[j]);
        if (acc + local > target) return j;
      }
    }
    acc += part[c];
  }
  for (int64_t j = cols - 1; j > 0; --j)
    if (w[j] > 0.0f) return j;
  return 0;
}

// ---- kernels ----

__global__ void __launch_bounds__(kTopkThreads)
    topk_kernel(const float* __restrict__ x, int64_t rows, int64_t cols, int64_t k, bool largest,
                float* __restrict__ values, int64_t* __restrict__ indices) {
  __shared__ float cand_v[kTopkThreads];
  __shared__ int64_t cand_i[kTopkThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;  // [cols]
    float prev_v = 0.0f;
    int64_t prev_i = -1;  // pass 0: no previous pick, every entry qualifies
    for (int64_t q = 0; q < k; ++q) {
      float best_v = 0.0f;
      int64_t best_i = -1;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        const float v = row[j];
        if (prev_i >= 0 && !topk_before(prev_v, prev_i, v, j, largest)) continue;  // taken by an earlier pass
        if (topk_before(v, j, best_v, best_i, largest)) {
          best_v = v;
          best_i = j;
        }
      }
      cand_v[threadIdx.x] = best_v;
      cand_i[threadIdx.x] = best_i;
      __syncthreads();
      for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (static_cast<int>(threadIdx.x) < half) {
          const int o = threadIdx.x + half;
          if (topk_before(cand_v[o], cand_i[o], cand_v[threadIdx.x], cand_i[threadIdx.x], largest)) {
            cand_v[threadIdx.x] = cand_v[o];
            cand_i[threadIdx.x] = cand_i[o];
          }
        }
        __syncthreads();
      }
      prev_v = cand_v[0];
      prev_i = cand_i[0];
      if (threadIdx.x == 0) {
        values[r * k + q] = prev_v;
        indices[r * k + q] = prev_i;
      }
      __syncthreads();  // the candidates are rewritten by the next pass
    }
  }
}

// code[r] = 0 for a row multinomial can sample, else 1 + MultinomialDefect.
__global__ void __launch_bounds__(kCheckThreads)
    distribution_check_kernel(const float* __restrict__ w, int64_t rows, int64_t cols, int64_t min_positive,
                              int64_t* __restrict__ code) {
  __shared__ int not_finite[kCheckThreads], negative[kCheckThreads];
  __shared__ int64_t positive[kCheckThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int nf = 0, neg = 0;
    int64_t pos = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = w[r * cols + j];
      nf |= !isfinite(v);
      neg |= v < 0.0f;
      pos += v > 0.0f;
    }
    not_finite[threadIdx.x] = nf;
    negative[threadIdx.x] = neg;
    positive[threadIdx.x] = pos;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int t = 1; t < static_cast<int>(blockDim.x); ++t) {
        nf |= not_finite[t];
        neg |= negative[t];
        pos += positive[t];
      }
      const MultinomialDefect d = nf    ? MultinomialDefect::NotFinite
                                  : neg ? MultinomialDefect::Negative
                                  : pos == 0 ? MultinomialDefect::ZeroSum
                                             : MultinomialDefect::TooFewPositive;
      code[r] = (nf || neg || pos < min_positive || pos == 0) ? 1 + static_cast<int64_t>(d) : 0;
    }
    __syncthreads();  // the shared arrays are rewritten for the next row
  }
}

// w: the weights [rows, cols], or for replacement = false a scratch copy that the kernel changes.
__global__ void __launch_bounds__(kSumParts)
    multinomial_kernel(float* __restrict__ w, int64_t rows, int64_t cols, int64_t n, bool replacement, uint64_t seed,
                       uint64_t offset, int64_t* __restrict__ out) {
  __shared__ double part[kSumParts];
  const int64_t part_len = (cols + kSumParts - 1) / kSumParts;
  const int c = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = w + r * cols;  // [cols]
    const int64_t begin = c * part_len < cols ? c * part_len : cols;
    const int64_t end = (c + 1) * part_len < cols ? (c + 1) * part_len : cols;
    part[c] = part_sum(row, begin, end);
    __syncthreads();
    if (replacement) {
      for (int64_t d = c; d < n; d += blockDim.x) {
        double total = 0.0;
        for (int p = 0; p < kSumParts; ++p) total += part[p];
        const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(r * n + d));
        out[r * n + d] = draw(row, cols, part_len, part, total, philox::uniform_double(b.x[0], b.x[1]));
      }
    } else if (c == 0) {
      for (int64_t d = 0; d < n; ++d) {
        double total = 0.0;
        for (int p = 0; p < kSumParts; ++p) total += part[p];
        const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(r * n + d));
        const int64_t j = draw(row, cols, part_len, part, total, philox::uniform_double(b.x[0], b.x[1]));
        out[r * n + d] = j;
        row[j] = 0.0f;
        const int64_t pc = j / part_len;
        part[pc] = part_sum(row, pc * part_len, (pc + 1) * part_len < cols ? (pc + 1) * part_len : cols);
      }
    }
    __syncthreads();  // the part sums are rewritten for the next row
  }
}

inline unsigned rows_grid(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535);
}

}  // namespace

// ---- launchers ----

void CudaBackend::topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  if (HalfStaging::needed({&x, &values})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    topk(s.in(x), k, largest, s.out(values), indices);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(x.dtype() == DType::Float32 && x.is_contiguous() && x.dim() == 2 && k > 0 &&
                         k <= x.shape()[1] && values.numel() == x.shape()[0] * k && indices.numel() == values.numel());
  DeviceGuard guard(device_index());
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  MINIDL_LAUNCH(topk_kernel, rows_grid(rows), kTopkThreads, 0, stream(), x.data<float>(), rows, cols, k, largest,
                values.data<float>(), indices.data<int64_t>());
}

std::optional<std::pair<int64_t, MultinomialDefect>> CudaBackend::find_invalid_distribution(const Tensor& weights,
                                                                                            int64_t min_positive) {
  if (HalfStaging::needed({&weights})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    return find_invalid_distribution(s.in(weights), min_positive);
  }
  MINIDL_INTERNAL_ASSERT(weights.dtype() == DType::Float32 && weights.is_contiguous() && weights.dim() == 2);
  refuse_in_capture("multinomial", "it checks its weights on the host before it draws");
  DeviceGuard guard(device_index());
  const int64_t rows = weights.shape()[0], cols = weights.shape()[1];
  Tensor code = empty(Shape{rows}, TensorOptions(DType::Int64, device()));
  MINIDL_LAUNCH(distribution_check_kernel, rows_grid(rows), kCheckThreads, 0, stream(), weights.data<float>(), rows,
                cols, min_positive, code.data<int64_t>());
  const std::vector<int64_t> host = code.to(Device::cpu()).to_vector<int64_t>();  // waits
  for (int64_t r = 0; r < rows; ++r)
    if (host[static_cast<size_t>(r)] != 0)
      return std::make_pair(r, static_cast<MultinomialDefect>(host[static_cast<size_t>(r)] - 1));
  return std::nullopt;
}

void CudaBackend::multinomial(const Tensor& weights, int64_t n, bool replacement, uint64_t seed, uint64_t offset,
                              Tensor& out) {
  if (HalfStaging::needed({&weights})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    multinomial(s.in(weights), n, replacement, seed, offset, out);
    return;
  }
  MINIDL_INTERNAL_ASSERT(weights.dtype() == DType::Float32 && weights.is_contiguous() && weights.dim() == 2 &&
                         out.dtype() == DType::Int64 && out.numel() == weights.shape()[0] * n);
  refuse_in_capture("multinomial", kRandomInCapture);
  DeviceGuard guard(device_index());
  const int64_t rows = weights.shape()[0], cols = weights.shape()[1];
  // Drawing without replacement zeroes drawn weights: in a copy, never in the caller's tensor.
  Tensor w = replacement ? weights : empty(weights.shape(), weights.options());
  if (!replacement)
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(w.raw_data(), weights.raw_data(), static_cast<size_t>(rows * cols) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream()));
  MINIDL_LAUNCH(multinomial_kernel, rows_grid(rows), kSumParts, 0, stream(), w.data<float>(), rows, cols, n,
                replacement, seed, offset, out.data<int64_t>());
}

}  // namespace minidl::cuda
