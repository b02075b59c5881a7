// Tensor: a cheap shared handle to a TensorImpl {storage, shape, strides, offset, dtype,
// device, requires_grad, grad, grad_fn}. Copying a Tensor copies the handle, not the data.
// Views (reshape, narrow, split, unbind, transpose, expand) share storage with their base;
// kernels take contiguous inputs and ops call contiguous() first. Differentiable math lives in
// core/ops/*; the methods here are sugar that forward to those ops.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/shape.h"
#include "core/storage.h"

namespace minidl {

class Node;
class Tensor;
struct TensorImpl;

// Called with the accumulated gradient each time backward() finishes accumulating into a
// leaf's grad (parallel/ starts its gradient all-reduces from these hooks).
using GradHook = std::function<void(const Tensor& grad)>;

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = Device::cpu();
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}
  TensorOptions(Device d) : device(d) {}
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
  TensorOptions with_dtype(DType t) const { auto o = *this; o.dtype = t; return o; }
  TensorOptions with_device(Device d) const { auto o = *this; o.device = d; return o; }
  TensorOptions with_requires_grad(bool r = true) const { auto o = *this; o.requires_grad = r; return o; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& shape() const;
  const Shape& strides() const;
  int dim() const;
  int64_t size(int64_t dim) const;
  int64_t numel() const;
  int64_t offset() const;  // in elements, into the storage
  DType dtype() const;
  Device device() const;
  TensorOptions options() const;  // dtype + device (requires_grad false)
  bool is_contiguous() const;
  const Storage& storage() const;

  // Pointer to the first element (device memory for CUDA tensors). Checks the dtype.
  template <typename T> T* data() const;
  void* raw_data() const;

  // ---- conversion and copies ----
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor contiguous() const;  // differentiable; returns *this when already contiguous
  Tensor clone() const;       // differentiable copy into fresh contiguous storage

  // ---- views (share storage, differentiable) ----
  Tensor reshape(const Shape& shape) const;  // one size may be -1; copies only when it must
  Tensor view(const Shape& shape) const;     // like reshape, but a clear error instead of a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;  // the slices along dim, dim removed
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;

  // ---- element access (tests, printing; copies CUDA tensors to the CPU) ----
  double at(std::initializer_list<int64_t> index) const;
  double item() const;  // a one-element tensor as double
  template <typename T> T item() const;
  template <typename T> std::vector<T> to_vector() const;  // row-major copy, dtype must match

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  Tensor grad() const;               // undefined until a backward reaches this leaf
  void set_grad(const Tensor& grad);  // undefined clears it
  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const;  // no grad_fn
  // grad may be omitted only for a one-element tensor (it is then 1).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no history
  void register_hook(GradHook hook) const;

  // ---- in place, outside autograd ----
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // same shape; dtype and device may differ
  // Makes this tensor hold src's data, PyTorch's `t.data = src`: src's storage, strides and
  // offset replace this tensor's, while its TensorImpl stays, and with it every handle to it
  // (an optimizer's, a module's), requires_grad, grad and hooks. The device may change (that
  // is what nn::Module::to does with it); the grad does not follow, it is a tensor of its own.
  // Views taken of this tensor earlier keep the old storage. Outside autograd: nothing
  // records it. Throws, changing nothing, unless src is defined and has this tensor's shape
  // and dtype (a tensor's dtype and shape are what its users rely on: an optimizer's state, a
  // saved checkpoint), and unless this tensor is a leaf (an op's result is part of a graph
  // whose nodes may have saved it).
  Tensor& set_data_(const Tensor& src);

  // ---- math sugar over core/ops ----
  Tensor sum() const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim = -1) const;
  Tensor relu() const;
  Tensor matmul(const Tensor& other) const;
  Tensor eq(const Tensor& other) const;
  Tensor log_softmax(int64_t dim = -1) const;
  Tensor softmax(int64_t dim = -1) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  Storage storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  bool requires_grad = false;  // for leaves; results of ops on such tensors get a grad_fn
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;  // which output of grad_fn this is (split's parts: 0, 1, ...)
  std::weak_ptr<Node> grad_accumulator;  // the AccumulateGrad node of a leaf, made on demand
  std::vector<GradHook> hooks;
};

// ---- factories ----
Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor arange(int64_t end, const TensorOptions& options = {});
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// Uniform in [low, high), standard-normal scaled, and integers in [low, high) (int64 default).
Tensor rand(const Shape& shape, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options = DType::Int64,
               Generator* gen = nullptr);
// From host values, row-major; shape defaults to [values.size()]. T must match options.dtype
// unless T is double or int64_t, which convert to any dtype.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options = dtype_v<T>);
template <typename T>
Tensor from_vector(const std::vector<T>& values) { return from_vector(values, Shape{static_cast<int64_t>(values.size())}, dtype_v<T>); }
// A 0-dim tensor holding one value.
Tensor scalar_tensor(double value, const TensorOptions& options = {});

// Builds a view of `base` with new geometry (no autograd; ops use it to make views).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

// Prints like PyTorch: tensor([[ 0.1000, -2.0000]], requires_grad=True)
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- operators (core/ops/elementwise) ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// Throws naming `op` unless t is defined and has dtype `expected`.
void check_dtype(const Tensor& t, DType expected, const char* op, const char* arg);
void check_defined(const Tensor& t, const char* op, const char* arg);
// Throws naming `op` unless every tensor lives on the same device as the first.
void check_same_device(std::initializer_list<const Tensor*> tensors, const char* op);

}  // namespace minidl
