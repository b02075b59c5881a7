// The softmax family of the CUDA backend (float32), over the rows of x [rows, cols]:
//   log_softmax:  y = (x - m) - log s,   m = max_j x_j,  s = Σ_j exp(x_j - m)
//   softmax:      y = exp(x - m) · (1/s)
//   (never through lse = m + log s rounded to float: Note [softmax at the logits' scale] in
//   core/ops/softmax.cpp; kernels/cpu/softmax.cpp computes the same expressions)
//   backward:     log_softmax  dx = dy - exp(y) · Σ_j dy_j        (y the forward output)
//                 softmax      dx = y · (dy - Σ_j dy_j · y_j)
// Strategy: each is a row op of the row engine (row_engine.cuh states the protocol and the
// launch strategies): the forward ops reduce the log-sum-exp of x and map every element, the
// backward ops reduce a sum over (dy, y) and map every element. The cross-entropy ops, on the
// same engine, are in cross_entropy.cu.
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/row_engine.cuh"

namespace minidl::cuda {

namespace {

// ---- the row ops ----

struct LogSoftmaxForward : RowIO {  // a = x, out = y
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = false;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float map(float x, float, int64_t, const RowStat& st, const RowCtx&) const {
    return (x - st.m) - st.log_s;
  }
  __device__ void finish(int64_t, const float*, const RowStat&, const RowCtx&) const {}
};

struct SoftmaxForward : RowIO {  // a = x, out = y
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = true;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float map(float x, float, int64_t, const RowStat& st, const RowCtx&) const {
    return expf(x - st.m) * st.inv_s;
  }
  __device__ float map_exp(float p, int64_t, const RowCtx&) const { return p; }
  __device__ void finish(int64_t, const float*, const RowStat&, const RowCtx&) const {}
};

struct LogSoftmaxBackward : RowIO {  // a = dy, b = y (log-probabilities), out = dx
  static constexpr RowReduce kReduce = RowReduce::Sum;
  static constexpr bool kTwoInputs = true, kWrites = true, kMapFromExp = false;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float summand(float dy, float) const { return dy; }
  __device__ float map(float dy, float y, int64_t, const RowStat& st, const RowCtx&) const {
    return dy - expf(y) * st.sum;
  }
  __device__ void finish(int64_t, const float*, const RowStat&, const RowCtx&) const {}
};

struct SoftmaxBackward : RowIO {  // a = dy, b = y (probabilities), out = dx
  static constexpr RowReduce kReduce = RowReduce::Sum;
  static constexpr bool kTwoInputs = true, kWrites = true, kMapFromExp = false;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float summand(float dy, float y) const { return dy * y; }
  __device__ float map(float dy, float y, int64_t, const RowStat& st, const RowCtx&) const { return y * (dy - st.sum); }
  __device__ void finish(int64_t, const float*, const RowStat&, const RowCtx&) const {}
};

// ---- the one launcher of this file ----

// out [rows, cols] = Op over the rows of a (and b, when the op reads two inputs).
template <RowOp Op>
void launch_softmax_op(const CudaBackend& be, const Tensor& a, const Tensor& b, Tensor& out) {
  MINIDL_INTERNAL_ASSERT(all_float32({&a, &b, &out}) && all_contiguous({&a, &b, &out}));
  MINIDL_INTERNAL_ASSERT(a.dim() == 2 && out.shape() == a.shape() && (!b.defined() || b.shape() == a.shape()),
                         "a ", a.shape(), ", out ", out.shape());
  MINIDL_INTERNAL_ASSERT(b.defined() == Op::kTwoInputs);
  DeviceGuard guard(be.device_index());
  Op op;
  op.a = a.data<float>();
  op.b = b.defined() ? b.data<float>() : nullptr;
  op.out = out.data<float>();
  launch_rows(be, op, a.shape()[0], a.shape()[1]);
}

}  // namespace

// ---- launchers ----

void CudaBackend::log_softmax_forward(const Tensor& x, Tensor& y) {
  if (HalfStaging::needed({&x, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    log_softmax_forward(s.in(x), s.out(y));
    return s.commit();
  }
  launch_softmax_op<LogSoftmaxForward>(*this, x, Tensor(), y);
}

void CudaBackend::softmax_forward(const Tensor& x, Tensor& y) {
  if (HalfStaging::needed({&x, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    softmax_forward(s.in(x), s.out(y));
    return s.commit();
  }
  launch_softmax_op<SoftmaxForward>(*this, x, Tensor(), y);
}

void CudaBackend::log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  if (HalfStaging::needed({&dy, &y, &dx})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    log_softmax_backward(s.in(dy), s.in(y), s.out(dx));
    return s.commit();
  }
  launch_softmax_op<LogSoftmaxBackward>(*this, dy, y, dx);
}

void CudaBackend::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  if (HalfStaging::needed({&dy, &y, &dx})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    softmax_backward(s.in(dy), s.in(y), s.out(dx));
    return s.commit();
  }
  launch_softmax_op<SoftmaxBackward>(*this, dy, y, dx);
}

}  // namespace minidl::cuda
