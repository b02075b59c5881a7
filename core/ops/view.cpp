// View and copy ops with their backward nodes side by side.
//   reshape/view/(un)squeeze: same storage, new shape; backward reshapes the gradient back.
//   narrow: a window [start, start+length) along dim; backward writes grad into zeros.
//   split/chunk/unbind: every window along dim at once, one node for all the parts; backward
//     writes each part's gradient into its window of one buffer (Note [one node for several
//     outputs], core/autograd.h).
//   transpose: swap two strides; backward transposes back.
//   expand: stride 0 along broadcast dims; backward sums over them (sum_to).
//   contiguous/clone/to: copies; backward passes the gradient (converted back for to()).
#include "core/ops/view.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/reduce.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct ReshapeBackward final : Node {
  Shape input_shape;
  std::vector<Tensor> apply(const Tensor& g) override { return {g.reshape(input_shape)}; }
  std::string name() const override { return "ReshapeBackward"; }
};

struct NarrowBackward final : Node {
  Shape input_shape;
  int dim = 0;
  int64_t start = 0;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dx = zeros(input_shape, g.options());
    Tensor window = dx.narrow(dim, start, g.shape()[dim]);
    backend_for(g.device()).strided_copy(g, window);
    return {dx};
  }
  std::string name() const override { return "NarrowBackward"; }
};

// Where part i of split / chunk / unbind lies in its input: the window [i * split_size,
// min((i + 1) * split_size, size)) along dim, with dim dropped for unbind (split_size 1). The
// forward takes these windows of x; the backward takes the same windows of dx.
struct SplitGeometry {
  int dim = 0;
  int64_t size = 0;  // of the input along dim
  int64_t split_size = 1;
  bool drop_dim = false;

  int64_t parts() const { return (size + split_size - 1) / split_size; }
  Tensor part(const Tensor& base, int64_t i) const {
    const int64_t start = i * split_size;
    Shape shape = base.shape(), strides = base.strides();
    const int64_t offset = base.offset() + start * strides[dim];
    shape[dim] = std::min(split_size, size - start);
    if (drop_dim) {
      shape.erase(dim);
      strides.erase(dim);
    }
    return make_view(base, shape, strides, offset);
  }
};

// Every part's gradient in one call, written once into one buffer: the windows tile the input,
// so the buffer starts uninitialised and only the window of a part that got no gradient (an
// unused part) is zero-filled.
struct SplitBackward final : MultiOutputNode {
  Shape input_shape;
  SplitGeometry geometry;
  explicit SplitBackward(uint32_t parts) : MultiOutputNode(parts) {}
  std::vector<Tensor> apply_outputs(const std::vector<Tensor>& grads) override {
    const Tensor* any = nullptr;
    for (const Tensor& g : grads)
      if (!any && g.defined()) any = &g;
    MINIDL_INTERNAL_ASSERT(any != nullptr, name(), ": the engine runs a node only once a gradient reached it");
    Tensor dx = empty(input_shape, any->options());  // [input_shape]; every window is written below
    Backend& backend = backend_for(any->device());
    for (uint32_t i = 0; i < num_outputs(); ++i) {
      Tensor window = geometry.part(dx, i);
      if (window.numel() == 0) continue;
      if (grads[i].defined()) {
        MINIDL_INTERNAL_ASSERT(grads[i].shape() == window.shape(), name(), ": gradient ", grads[i].shape(),
                               " for part ", i, " of shape ", window.shape());
        backend.strided_copy(grads[i], window);
      } else {
        window.zero_();
      }
    }
    return {dx};
  }
  std::string name() const override { return geometry.drop_dim ? "UnbindBackward" : "SplitBackward"; }
  // It saves only sizes, so each part may be backpropagated on its own, as with one narrow per part.
  bool single_use() const override { return false; }
};

// The parts of split (drop_dim false) and unbind as views of x, with one SplitBackward for all
// of them when x requires grad.
std::vector<Tensor> split_views(const Tensor& x, const SplitGeometry& geometry) {
  std::vector<Tensor> parts;
  parts.reserve(static_cast<size_t>(geometry.parts()));
  for (int64_t i = 0; i < geometry.parts(); ++i) parts.push_back(geometry.part(x, i));
  if (!parts.empty() && autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<SplitBackward>(static_cast<uint32_t>(parts.size()));
    node->input_shape = x.shape();
    node->geometry = geometry;
    autograd::attach_outputs(node, {&x}, parts);
  }
  return parts;
}

struct TransposeBackward final : Node {
  int dim0 = 0, dim1 = 0;
  std::vector<Tensor> apply(const Tensor& g) override { return {g.transpose(dim0, dim1)}; }
  std::string name() const override { return "TransposeBackward"; }
};

struct ExpandBackward final : Node {
  Shape input_shape;
  std::vector<Tensor> apply(const Tensor& g) override { return {sum_to(g, input_shape)}; }
  std::string name() const override { return "ExpandBackward"; }
};

struct CopyBackward final : Node {  // contiguous, clone
  std::vector<Tensor> apply(const Tensor& g) override { return {g}; }
  std::string name() const override { return "CopyBackward"; }
};

struct ToBackward final : Node {
  Device device;
  DType dtype = DType::Float32;
  std::vector<Tensor> apply(const Tensor& g) override { return {ops::to(g, device, dtype)}; }
  std::string name() const override { return "ToBackward"; }
};

struct CatBackward final : Node {
  std::vector<int64_t> sizes;
  int dim = 0;
  std::vector<Tensor> apply(const Tensor& g) override {
    std::vector<Tensor> grads;
    int64_t start = 0;
    for (int64_t s : sizes) {
      grads.push_back(g.narrow(dim, start, s));
      start += s;
    }
    return grads;
  }
  std::string name() const override { return "CatBackward"; }
};

// A view of x with new geometry, recorded in autograd by `node` when x requires grad.
template <typename NodeT>
Tensor view_with_node(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset,
                      std::shared_ptr<NodeT> node) {
  Tensor out = make_view(x, shape, strides, offset);
  if (node && autograd::any_requires_grad({&x})) autograd::attach(node, {&x}, out);
  return out;
}

Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape out = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.rank(); ++i) {
    if (out[i] == -1) {
      MINIDL_CHECK(infer < 0, op, ": only one dimension can be -1, got ", requested);
      infer = i;
    } else {
      MINIDL_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", requested);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MINIDL_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested, " is invalid for input of shape ", from,
                 " (", numel, " elements)");
    out[infer] = numel / known;
  }
  MINIDL_CHECK(out.numel() == numel, op, ": shape ", requested, " is invalid for input of shape ", from, " (", numel,
               " elements)");
  return out;
}

template <typename NodeT>
std::shared_ptr<NodeT> node_if_needed(const Tensor& x) {
  return autograd::any_requires_grad({&x}) ? std::make_shared<NodeT>() : nullptr;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  profiler::RecordScope profile_scope("view", profiler::Kind::Op, {&x});
  check_defined(x, "view", "self");
  const Shape out_shape = infer_shape(shape, x.numel(), "view", x.shape());
  MINIDL_CHECK(x.is_contiguous(), "view: input of shape ", x.shape(), " with strides ", x.strides(),
               " is not contiguous; use reshape() (which copies) or contiguous() first");
  auto node = node_if_needed<ReshapeBackward>(x);
  if (node) node->input_shape = x.shape();
  return view_with_node(x, out_shape, contiguous_strides(out_shape), x.offset(), node);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  profiler::RecordScope profile_scope("reshape", profiler::Kind::Op, {&x});
  check_defined(x, "reshape", "self");
  if (x.is_contiguous()) {
    const Shape out_shape = infer_shape(shape, x.numel(), "reshape", x.shape());
    if (out_shape == x.shape()) return x;
    return view(x, out_shape);
  }
  return view(contiguous(x), shape);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  profiler::RecordScope profile_scope("narrow", profiler::Kind::Op, {&x});
  check_defined(x, "narrow", "self");
  const int d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[d];
  MINIDL_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: window [", start, ", ", start + length,
               ") is outside dim ", d, " of size ", size, " (shape ", x.shape(), ")");
  Shape out_shape = x.shape();
  out_shape[d] = length;
  auto node = node_if_needed<NarrowBackward>(x);
  if (node) {
    node->input_shape = x.shape();
    node->dim = d;
    node->start = start;
  }
  return view_with_node(x, out_shape, x.strides(), x.offset() + start * x.strides()[d], node);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  profiler::RecordScope profile_scope("split", profiler::Kind::Op, {&x});
  check_defined(x, "split", "self");
  const int d = wrap_dim(dim, x.dim(), "split");
  MINIDL_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int64_t size = x.shape()[d];
  if (size == 0) return {x};  // torch gives the one empty part
  return split_views(x, SplitGeometry{d, size, split_size, /*drop_dim=*/false});
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  profiler::RecordScope profile_scope("chunk", profiler::Kind::Op, {&x});
  check_defined(x, "chunk", "self");
  MINIDL_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  const int d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t size = x.shape()[d];
  const int64_t per = std::max<int64_t>(1, (size + chunks - 1) / chunks);  // like torch.chunk
  return split(x, per, d);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  profiler::RecordScope profile_scope("unbind", profiler::Kind::Op, {&x});
  check_defined(x, "unbind", "self");
  const int d = wrap_dim(dim, x.dim(), "unbind");
  return split_views(x, SplitGeometry{d, x.shape()[d], /*split_size=*/1, /*drop_dim=*/true});
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  profiler::RecordScope profile_scope("transpose", profiler::Kind::Op, {&x});
  check_defined(x, "transpose", "self");
  const int a = wrap_dim(dim0, x.dim(), "transpose"), b = wrap_dim(dim1, x.dim(), "transpose");
  Shape shape = x.shape(), strides = x.strides();
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  auto node = node_if_needed<TransposeBackward>(x);
  if (node) {
    node->dim0 = a;
    node->dim1 = b;
  }
  return view_with_node(x, shape, strides, x.offset(), node);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  profiler::RecordScope profile_scope("unsqueeze", profiler::Kind::Op, {&x});
  check_defined(x, "unsqueeze", "self");
  const int d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  shape.insert(d, 1);
  strides.insert(d, d < x.dim() ? x.strides()[d] * x.shape()[d] : 1);
  auto node = node_if_needed<ReshapeBackward>(x);
  if (node) node->input_shape = x.shape();
  return view_with_node(x, shape, strides, x.offset(), node);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  profiler::RecordScope profile_scope("squeeze", profiler::Kind::Op, {&x});
  check_defined(x, "squeeze", "self");
  const int d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(d);
  strides.erase(d);
  auto node = node_if_needed<ReshapeBackward>(x);
  if (node) node->input_shape = x.shape();
  return view_with_node(x, shape, strides, x.offset(), node);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  profiler::RecordScope profile_scope("expand", profiler::Kind::Op, {&x});
  check_defined(x, "expand", "self");
  MINIDL_CHECK(shape.rank() >= x.dim(), "expand: cannot expand shape ", x.shape(), " to fewer dims ", shape);
  if (shape == x.shape()) return x;
  Shape strides = Shape::filled(shape.rank(), 0);
  const int lead = shape.rank() - x.dim();
  for (int i = 0; i < x.dim(); ++i) {
    const int64_t have = x.shape()[i], want = shape[lead + i];
    MINIDL_CHECK(have == want || have == 1, "expand: size ", have, " at dim ", i, " of ", x.shape(),
                 " cannot expand to ", want, " (target ", shape, ")");
    strides[lead + i] = have == want ? x.strides()[i] : 0;
  }
  auto node = node_if_needed<ExpandBackward>(x);
  if (node) node->input_shape = x.shape();
  return view_with_node(x, shape, strides, x.offset(), node);
}

Tensor clone(const Tensor& x) {
  profiler::RecordScope profile_scope("clone", profiler::Kind::Op, {&x});
  check_defined(x, "clone", "self");
  Tensor out = empty(x.shape(), x.options());
  if (x.numel() > 0) {
    if (x.is_contiguous()) {
      backend_for(x.device()).copy(x, out);
    } else {
      backend_for(x.device()).strided_copy(x, out);
    }
  }
  if (autograd::any_requires_grad({&x})) autograd::attach(std::make_shared<CopyBackward>(), {&x}, out);
  return out;
}

Tensor contiguous(const Tensor& x) {
  profiler::RecordScope profile_scope("contiguous", profiler::Kind::Op, {&x});
  check_defined(x, "contiguous", "self");
  if (x.is_contiguous()) return x;
  return clone(x);
}

Tensor to(const Tensor& x, Device device, DType dtype) {
  profiler::RecordScope profile_scope("to", profiler::Kind::Op, {&x});
  check_defined(x, "to", "self");
  if (x.device() == device && x.dtype() == dtype) return x;
  MINIDL_CHECK(!x.requires_grad() || is_floating(dtype), "to: cannot convert a tensor that requires grad to ", dtype);
  Tensor src = contiguous(x.detach());
  Tensor out = empty(x.shape(), TensorOptions(dtype, device));
  if (x.numel() > 0) {
    // The cast runs where both dtypes can live: on the CPU whenever one side is the CPU (a CUDA
    // device holds no float64), else on the source device. A copy is driven by its non-CPU side.
    const bool cast = dtype != x.dtype();
    if (x.device() == device) {
      backend_for(device).cast(src, out);
    } else if (device.is_cpu()) {  // device -> CPU: move the bytes, then cast on the CPU
      Tensor moved = cast ? empty(x.shape(), TensorOptions(x.dtype(), device)) : out;
      backend_for(x.device()).copy(src, moved);
      if (cast) backend_for(device).cast(moved, out);
    } else {  // -> a CUDA device: cast on the source (the CPU or another device), then move
      Tensor converted = cast ? empty(x.shape(), TensorOptions(dtype, x.device())) : src;
      if (cast) backend_for(x.device()).cast(src, converted);
      backend_for(device).copy(converted, out);
    }
  }
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<ToBackward>();
    node->device = x.device();
    node->dtype = x.dtype();
    autograd::attach(node, {&x}, out);
  }
  return out;
}

Tensor cat(const std::vector<Tensor>& parts, int64_t dim) {
  profiler::RecordScope profile_scope("cat", profiler::Kind::Op, {});
  MINIDL_CHECK(!parts.empty(), "cat: expected at least one tensor");
  const Tensor& first = parts.front();
  check_defined(first, "cat", "tensors[0]");
  const int d = wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    check_defined(p, "cat", "tensors[i] (an element of parts)");
    bool same_rest = p.dim() == first.dim();
    for (int k = 0; same_rest && k < p.dim(); ++k) same_rest = k == d || p.shape()[k] == first.shape()[k];
    MINIDL_CHECK(same_rest && p.dtype() == first.dtype() && p.device() == first.device(), "cat: tensor ", i, " is ",
                 p.shape(), " ", p.dtype(), " on ", p.device(), ", expected ", first.shape(), " (except dim ", d, ") ",
                 first.dtype(), " on ", first.device());
    out_shape[d] += p.shape()[d];
  }
  Tensor out = empty(out_shape, first.options());
  int64_t start = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& p : parts) {
    Tensor window = out.narrow(d, start, p.shape()[d]);
    if (p.numel() > 0) backend_for(out.device()).strided_copy(p, window);
    sizes.push_back(p.shape()[d]);
    start += p.shape()[d];
  }
  bool needs_grad = false;
  for (const Tensor& p : parts) needs_grad = needs_grad || autograd::any_requires_grad({&p});
  if (needs_grad) {
    auto node = std::make_shared<CatBackward>();
    node->sizes = sizes;
    node->dim = d;
    for (const Tensor& p : parts) node->next_edges.push_back(autograd::gradient_edge(p));
    out.impl()->grad_fn = node;
  }
  return out;
}

Tensor index_rows(const Tensor& x, const std::vector<int64_t>& indices) {
  profiler::RecordScope profile_scope("index_rows", profiler::Kind::Op, {&x});
  check_defined(x, "index_rows", "self");
  MINIDL_CHECK(x.dim() >= 1, "index_rows: expected a tensor with at least one dim, got a scalar");
  const int64_t rows = x.shape()[0];
  for (int64_t i : indices)
    MINIDL_CHECK(i >= 0 && i < rows, "index_rows: index ", i, " is out of range for ", rows, " rows (shape ",
                 x.shape(), ")");
  Shape out_shape = x.shape();
  out_shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = empty(out_shape, x.options());
  if (out.numel() == 0) return out;
  Tensor idx = from_vector(indices, Shape{out_shape[0]}, TensorOptions(DType::Int64, Device::cpu()));
  if (!x.device().is_cpu()) idx = idx.to(x.device());
  backend_for(x.device()).gather_rows(contiguous(x.detach()), idx, out);
  return out;
}

}  // namespace minidl::ops
