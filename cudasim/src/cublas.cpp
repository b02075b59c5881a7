// cuBLAS of the simulated device: handles, math modes and cublasSgemm (cudasim/include/cublas_v2.h
// says what is simulated and what is not).
//
// How the GEMM runs: cublasSgemm checks its arguments as cuBLAS does (an error is returned at
// once and nothing is queued), reads alpha and beta from the host (CUBLAS_POINTER_MODE_HOST),
// and queues one piece of work on the handle's stream (cudasim::enqueue). That work runs later
// on the stream's host thread, in order with the kernels around it. It first checks that every
// operand it will touch lies in memory a kernel may touch (cudasim::device_accessible): one that
// does not is an illegal address on the device (cudasim::device_fault), reported with the
// operand and its shape, and nothing is read or written. Then it computes, per column j of C,
// a column of float accumulators over l = 0..k-1 (acc[i] += op(A)[i, l] · op(B)[l, j]) — the
// K products of each output added in k order, as a naive loop would — and writes
// C[i, j] = alpha · acc[i] (+ beta · C[i, j] unless beta is 0). Each output's arithmetic does not
// depend on how columns are split, so large products are spread over a few host threads and the
// result is the same bit for bit.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "runtime_internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;  // nullptr: the legacy default stream (of the device current at each call)
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace {

constexpr int kMathModeMask = 0xf;  // the mode; CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is a flag above

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// TF32 as the tensor cores read a float: 10 mantissa bits, rounded to nearest (ties away from zero).
float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7f800000u) != 0x7f800000u) {  // finite: round; Inf and NaN pass unchanged
    u += 0x1000u;
    u &= 0xffffe000u;
  }
  float r;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}

// One queued GEMM, everything it needs copied in (the caller's scalars may be gone by then).
struct SgemmJob {
  bool trans_a = false, trans_b = false, tf32 = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 0, beta = 0;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

// Elements spanned by a column-major [rows, cols] matrix with leading dimension ld (rows, cols >= 1).
int64_t span_elements(int64_t rows, int64_t cols, int64_t ld) { return (cols - 1) * ld + rows; }

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

// The operand is readable by a kernel, or the device faults and the work stops.
bool check_operand(const SgemmJob& job, const char* name, const void* p, int64_t rows, int64_t cols, int64_t ld,
                   bool transposed) {
  const int64_t bytes = span_elements(rows, cols, ld) * static_cast<int64_t>(sizeof(float));
  if (cudasim::device_accessible(p, static_cast<size_t>(bytes))) return true;
  std::string msg = "cublasSgemm (m = " + std::to_string(job.m) + ", n = " + std::to_string(job.n) +
                    ", k = " + std::to_string(job.k) + ", transa = " + (job.trans_a ? "T" : "N") +
                    ", transb = " + (job.trans_b ? "T" : "N") + "): operand " + name + " at " + hex(p) + " (" +
                    std::to_string(rows) + " x " + std::to_string(cols) + " column-major" +
                    (transposed ? ", read transposed" : "") + ", leading dimension " + std::to_string(ld) + ", " +
                    std::to_string(bytes) + " bytes) is not device memory: illegal address";
  cudasim::device_fault(cudaErrorIllegalAddress, msg);
  return false;
}

// Columns [j0, j1) of C. `a` is op(A) read as a[i * a_rs + l * a_cs].
void sgemm_columns(const SgemmJob& job, const float* a, int64_t a_rs, int64_t a_cs, bool product, int64_t j0,
                   int64_t j1, std::vector<float>& acc) {
  const int64_t m = job.m, k = job.k;
  for (int64_t j = j0; j < j1; ++j) {
    float* c = job.c + j * job.ldc;
    if (!product) {  // k = 0 or alpha = 0: C = beta · C, A and B unread
      for (int64_t i = 0; i < m; ++i) c[i] = job.beta == 0.0f ? 0.0f : job.beta * c[i];
      continue;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t l = 0; l < k; ++l) {
      float bv = job.trans_b ? job.b[j + l * job.ldb] : job.b[l + j * job.ldb];
      if (job.tf32) bv = round_to_tf32(bv);
      const float* col = a + l * a_cs;
      if (a_rs == 1) {
        for (int64_t i = 0; i < m; ++i) acc[static_cast<size_t>(i)] += col[i] * bv;
      } else {
        for (int64_t i = 0; i < m; ++i) acc[static_cast<size_t>(i)] += col[i * a_rs] * bv;
      }
    }
    if (job.beta == 0.0f) {  // C is not read: a NaN there does not survive
      for (int64_t i = 0; i < m; ++i) c[i] = job.alpha * acc[static_cast<size_t>(i)];
    } else {
      for (int64_t i = 0; i < m; ++i) c[i] = job.alpha * acc[static_cast<size_t>(i)] + job.beta * c[i];
    }
  }
}

void run_sgemm(const SgemmJob& job) noexcept {
  try {
    const bool product = job.k > 0 && job.alpha != 0.0f;
    if (product) {
      if (!check_operand(job, "A", job.a, job.trans_a ? job.k : job.m, job.trans_a ? job.m : job.k, job.lda,
                         job.trans_a))
        return;
      if (!check_operand(job, "B", job.b, job.trans_b ? job.n : job.k, job.trans_b ? job.k : job.n, job.ldb,
                         job.trans_b))
        return;
    }
    if (!check_operand(job, "C", job.c, job.m, job.n, job.ldc, false)) return;

    // op(A) as a[i * rs + l * cs]: A itself when it is read as stored in full fp32, otherwise a
    // contiguous column-major copy of op(A) (transposed, TF32-rounded) so the inner loop is unit-stride.
    const float* a = job.a;
    int64_t rs = job.trans_a ? job.lda : 1, cs = job.trans_a ? 1 : job.lda;
    std::vector<float> packed;
    if (product && (job.trans_a || job.tf32)) {
      try {
        packed.resize(static_cast<size_t>(job.m * job.k));
        for (int64_t l = 0; l < job.k; ++l)
          for (int64_t i = 0; i < job.m; ++i) {
            const float v = job.a[i * rs + l * cs];
            packed[static_cast<size_t>(i + l * job.m)] = job.tf32 ? round_to_tf32(v) : v;
          }
        a = packed.data();
        rs = 1;
        cs = job.m;
      } catch (const std::bad_alloc&) {
        packed.clear();
        if (job.tf32) throw;  // TF32 needs the rounded copy
      }
    }

    // A few host threads for large products, each a range of columns.
    const double work =
        static_cast<double>(job.m) * static_cast<double>(job.n) * static_cast<double>(std::max<int64_t>(job.k, 1));
    int64_t threads = 1;
    if (work >= (1 << 22)) {
      const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
      threads = std::min<int64_t>(
          {static_cast<int64_t>(std::min(hw, 8u)), job.n, static_cast<int64_t>(work / (1 << 21))});
    }
    const int64_t per = (job.n + threads - 1) / threads;
    std::vector<std::thread> pool;
    std::vector<std::vector<float>> accs(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(job.m)));
    int64_t j0 = per;  // the calling thread takes [0, per)
    for (int64_t t = 1; t < threads && j0 < job.n; ++t, j0 += per) {
      const int64_t j1 = std::min(job.n, j0 + per);
      try {
        pool.emplace_back(
            [&, j0, j1, t] { sgemm_columns(job, a, rs, cs, product, j0, j1, accs[static_cast<size_t>(t)]); });
      } catch (const std::exception&) {  // no thread to be had: do those columns here
        sgemm_columns(job, a, rs, cs, product, j0, j1, accs[static_cast<size_t>(t)]);
      }
    }
    sgemm_columns(job, a, rs, cs, product, 0, std::min(job.n, per), accs[0]);
    for (std::thread& t : pool) t.join();
  } catch (const std::exception& e) {
    cudasim::device_fault(cudaErrorLaunchFailure, std::string("cublasSgemm: the simulated GEMM failed: ") + e.what());
  } catch (...) {
    cudasim::device_fault(cudaErrorLaunchFailure, "cublasSgemm: the simulated GEMM failed");
  }
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = nullptr;
  int devices = 0;
  try {
    devices = cudasim::device_count();
  } catch (...) {
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  if (devices < 1) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* h = new (std::nothrow) cublasContext;
  if (h == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;  // queued GEMMs carry copies of what they need
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion(cublasHandle_t handle, int* version) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;  // as cuBLAS: checked when work is launched on it
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int bits = static_cast<int>(mode);
  const int base = bits & kMathModeMask;
  const int flags = bits & ~kMathModeMask;
  if (base > CUBLAS_TF32_TENSOR_OP_MATH || (flags & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) != 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown cuBLAS status";
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // cuBLAS's checks, all before anything is queued.
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;  // quick return: C is empty
  SgemmJob job;
  job.trans_a = ta;
  job.trans_b = tb;
  job.tf32 = (static_cast<int>(handle->math_mode) & kMathModeMask) == CUBLAS_TF32_TENSOR_OP_MATH;
  job.m = m;
  job.n = n;
  job.k = k;
  job.lda = lda;
  job.ldb = ldb;
  job.ldc = ldc;
  job.alpha = *alpha;  // CUBLAS_POINTER_MODE_HOST: read now
  job.beta = *beta;
  job.a = A;
  job.b = B;
  job.c = C;
  if ((job.k == 0 || job.alpha == 0.0f) && job.beta == 1.0f) return CUBLAS_STATUS_SUCCESS;  // C unchanged
  cudaError_t status;
  try {
    status = cudasim::enqueue(handle->stream, "cublasSgemm", [job] { run_sgemm(job); });
  } catch (const std::bad_alloc&) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  } catch (...) {
    return CUBLAS_STATUS_INTERNAL_ERROR;
  }
  if (status != cudaSuccess) {
    // As a failed kernel launch inside cuBLAS: the CUDA error is the thread's last error.
    cudasim::set_last_error(status);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// As cublasSgemm per product: the same checks (made on product 0, whose shape every product
// shares) and one queued GEMM per product, in order.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC,
                                         int batchCount) {
  if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batchCount; ++i) {
    const cublasStatus_t status = cublasSgemm(handle, transa, transb, m, n, k, alpha, A + i * strideA, lda,
                                              B + i * strideB, ldb, beta, C + i * strideC, ldc);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
