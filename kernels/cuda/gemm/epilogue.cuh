// The last step of every CUDA GEMM kernel, for one output element whose sum is complete
// (gemm.h's GemmProblem): v = Σ + bias in float32, then
//   ReLU:  C = round(max(v, 0))            (v < 0 ? 0 : v, so NaN stays NaN as on the CPU)
//   GELU:  C = round(v), gelu_out = round(gelu(float(C)))
//   none:  C = round(v)
// round is the conversion to the output's type T (half.cuh: nearest-even; identity for float).
// The GELU reads back the rounded pre-activation so that the fused epilogue gives the bits a
// separate gelu kernel (gelu.cu) gives on the stored C; its backward reads that same C.
#pragma once

#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/half.cuh"

namespace minidl::cuda {

struct EpilogueAct {
  bool relu = false;
  bool gelu = false;  // gelu_out is written
  GeluApproximate gelu_form = GeluApproximate::None;
};

// The activation of a problem (gemm.h).
inline EpilogueAct epilogue_act(const GemmProblem& p) {
  EpilogueAct act;
  act.relu = p.relu;
  act.gelu = p.gelu_out != nullptr;
  act.gelu_form = p.gelu_form;
  return act;
}

// Stores element `offset` of C (and of gelu_out when act.gelu).
template <typename T>
__device__ inline void store_epilogue(T* c, T* gelu_out, int64_t offset, float v, const EpilogueAct& act) {
  if (act.relu && v < 0.0f) v = 0.0f;
  const T z = from_float<T>(v);
  c[offset] = z;
  if (act.gelu) gelu_out[offset] = from_float<T>(gelu_value(to_float(z), act.gelu_form));
}

}  // namespace minidl::cuda
