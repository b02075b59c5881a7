// topk and multinomial: validation and the [rows, cols] view the kernels work on; the kernels
// are Backend::topk, find_invalid_distribution and multinomial (kernels/cpu/sampling.cpp,
// kernels/cuda/sampling.cu).
//
// Note [multinomial's sums]: a draw is an inverse CDF, the first column j whose running sum of
// weights passes u · Σ w for a uniform u in [0, 1) (53 bits, Philox counter offset + row·n + draw).
// For the same generator state to give the same samples on every backend, every sum is formed in
// the same order in double: the row is cut into 256 parts of ceil(V / 256) columns, each part's
// sum adds its weights in increasing j, the total adds the 256 part sums in order, and the walk
// adds part sums until one would pass the target, then that part's weights one by one (a
// weight-0 column never passes it, so it is never drawn). A GPU block gives a part to each of its
// 256 threads, the CPU loops over them; the additions are the same. Without replacement the drawn
// weight becomes 0 and only its part's sum is formed again. Should u · total round up to the
// total, the last positive weight is drawn.
#include "core/ops/sampling.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/view.h"
#include "core/profiler.h"

namespace minidl::ops {

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  profiler::RecordScope profile_scope("topk", profiler::Kind::Op, {&x});
  (void)sorted;  // the result is always sorted (see the header)
  constexpr const char* op = "topk";
  check_defined(x, op, "x");
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype(), " with shape ", x.shape());
  MINIDL_CHECK(x.dim() >= 1, op, ": expected at least one dim, got a scalar");
  const int d = wrap_dim(dim, x.dim(), op);
  const int64_t cols = x.shape()[d];
  MINIDL_CHECK(k >= 0 && k <= cols, op, ": k = ", k, " must lie in [0, ", cols, "] for dim ", d, " of shape ",
               x.shape());
  MINIDL_CHECK(!autograd::any_requires_grad({&x}), op, ": values are not differentiable; x of shape ", x.shape(),
               " requires grad (detach it, or call under GradModeGuard(false))");
  check_backend_computes(x, op, "x");
  // x as [rows, cols] with dim last; the results come back through the same rearrangement.
  const int last = x.dim() - 1;
  const Tensor moved = (d == last ? x : transpose(x, d, last)).contiguous();
  const int64_t rows = cols == 0 ? 0 : moved.numel() / cols;
  Shape out_shape = moved.shape();
  out_shape[last] = k;
  Tensor values = empty(Shape{rows, k}, x.options());
  Tensor indices = empty(Shape{rows, k}, TensorOptions(DType::Int64, x.device()));
  if (rows > 0 && k > 0) backend_for(x.device()).topk(moved.reshape(Shape{rows, cols}), k, largest, values, indices);
  values = values.reshape(out_shape);
  indices = indices.reshape(out_shape);
  if (d != last) {
    values = transpose(values, d, last).contiguous();
    indices = transpose(indices, d, last).contiguous();
  }
  return {values, indices};
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  profiler::RecordScope profile_scope("multinomial", profiler::Kind::Op, {&probs});
  constexpr const char* op = "multinomial";
  check_defined(probs, op, "probs");
  MINIDL_CHECK(is_floating(probs.dtype()), op, ": probs must be a floating dtype (float32, float64, bfloat16, float16), got ", probs.dtype(),
               " with shape ", probs.shape());
  MINIDL_CHECK(probs.dim() == 1 || probs.dim() == 2, op, ": probs must be [V] or [N, V], got shape ", probs.shape());
  const int64_t v = probs.shape().back(), rows = probs.dim() == 2 ? probs.shape()[0] : 1;
  MINIDL_CHECK(v > 0, op, ": probs ", probs.shape(), " have no categories");
  MINIDL_CHECK(num_samples > 0, op, ": num_samples must be at least 1, got ", num_samples);
  MINIDL_CHECK(replacement || num_samples <= v, op, ": cannot draw ", num_samples, " samples from ", v,
               " categories without replacement (probs ", probs.shape(), ")");
  check_backend_computes(probs, op, "probs");
  Backend& be = backend_for(probs.device());
  const Tensor w = probs.detach().contiguous().reshape(Shape{rows, v});
  if (rows > 0) {
    if (auto bad = be.find_invalid_distribution(w, replacement ? 1 : num_samples)) {
      const char* why = "";
      switch (bad->second) {
        case MultinomialDefect::NotFinite: why = "holds an infinite or NaN weight"; break;
        case MultinomialDefect::Negative: why = "holds a negative weight"; break;
        case MultinomialDefect::ZeroSum: why = "sums to 0 (no positive weight)"; break;
        case MultinomialDefect::TooFewPositive: why = "has fewer positive weights than the samples drawn without replacement"; break;
      }
      throw Error(detail::make_message(op, ": row ", bad->first, " of probs ", probs.shape(), " ", why, " (num_samples ",
                                       num_samples, ", replacement ", replacement ? "true" : "false", ")"));
    }
  }
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed();
  const uint64_t per_row = static_cast<uint64_t>(num_samples);
  const uint64_t offset = probs.dim() == 2 ? reserve_rows(g, rows, per_row) : g.reserve(per_row);
  Tensor out = empty(Shape{rows, num_samples}, TensorOptions(DType::Int64, probs.device()));
  if (rows > 0) be.multinomial(w, num_samples, replacement, seed, offset, out);
  return probs.dim() == 2 ? out : out.reshape(Shape{num_samples});
}

}  // namespace minidl::ops
