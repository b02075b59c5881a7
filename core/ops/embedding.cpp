// embedding and its gradient. Forward gathers rows: out[i, :] = weight[idx[i], :] over the
// flattened indices [N]. Backward scatters them back: dweight[v, :] = Σ_{i : idx[i] = v} dy[i, :],
// a scatter-add where several positions may name one row. Its order is fixed (position order,
// core/backend.h): a GPT batch repeats common tokens many times, and adding their rows in
// whatever order threads happen to run would change dweight's last bits from run to run
// (kernels/cuda/embedding.cu sorts the positions by index instead of using atomics).
// The index check is the loss targets' (Backend::check_targets): same contract, same deferral on CUDA.
#include "core/ops/embedding.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct EmbeddingBackward final : Node {
  Tensor indices;           // [N] int64, contiguous
  Shape weight_shape;       // [V, D]
  TensorOptions options;    // the weight's dtype and device
  std::vector<Tensor> apply(const Tensor& g) override {
    const int64_t n = indices.numel(), D = weight_shape[1];
    Tensor dweight = empty(weight_shape, options);
    if (dweight.numel() > 0) {
      const Tensor dy = g.contiguous().reshape(Shape{n, D});  // [N, D]
      backend_for(options.device).embedding_backward(dy, indices, dweight);
    }
    return {dweight};
  }
  void release_saved() override { indices = Tensor(); }
  std::string name() const override { return "EmbeddingBackward"; }
};

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  profiler::RecordScope profile_scope("embedding", profiler::Kind::Op, {&indices, &weight});
  constexpr const char* op = "embedding";
  check_defined(indices, op, "indices");
  check_defined(weight, op, "weight");
  MINIDL_CHECK(indices.dtype() == DType::Int64, op, ": indices must be int64, got ", indices.dtype(), " with shape ",
               indices.shape(), " (convert with .to(DType::Int64))");
  MINIDL_CHECK(is_floating(weight.dtype()), op, ": weight must be a floating dtype (float32, float64, bfloat16, float16), got ", weight.dtype(),
               " with shape ", weight.shape());
  MINIDL_CHECK(weight.dim() == 2, op, ": weight must be [num_embeddings, embedding_dim], got shape ", weight.shape());
  check_same_device({&indices, &weight}, op);
  check_backend_computes(weight, op, "weight");
  const int64_t V = weight.shape()[0], D = weight.shape()[1], n = indices.numel();
  Backend& be = backend_for(weight.device());
  const Tensor idx = indices.contiguous().reshape(Shape{n});  // [N]
  // Note [deferred target errors] (kernels/cuda/cross_entropy.cu): on a GPU this error may come
  // at the next host wait; until then the kernels give a bad index's row NaN and read nothing
  // out of bounds.
  be.check_targets(idx, V, [op, V, D, shape = indices.shape()](int64_t position, int64_t value) {
    return detail::make_message(op, ": index ", value, " at flat position ", position, " of indices ", shape,
                                " is out of range [0, ", V, ") for weight [", V, ", ", D, "]");
  });
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = empty(out_shape, weight.options());
  if (out.numel() > 0) {
    Tensor out2 = out.view(Shape{n, D});  // out's storage, as the kernel's [N, D]
    be.embedding_forward(idx, weight.detach().contiguous(), out2);
  }
  if (autograd::any_requires_grad({&weight})) {
    auto node = std::make_shared<EmbeddingBackward>();
    node->indices = idx;
    node->weight_shape = weight.shape();
    node->options = weight.options();
    autograd::attach(node, {&weight}, out);
  }
  return out;
}

}  // namespace minidl::ops
