// Tensor: metadata accessors, factories, element access, in-place fills and copies.
// Views and math live in core/ops/*; printing in core/print.cpp; autograd in core/autograd.cpp.
#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"

namespace minidl {

namespace {
const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  MINIDL_CHECK(impl, "Tensor: use of an undefined tensor (default-constructed or moved from)");
  return *impl;
}
}  // namespace

const Shape& Tensor::shape() const { return checked(impl_).shape; }
const Shape& Tensor::strides() const { return checked(impl_).strides; }
int Tensor::dim() const { return checked(impl_).shape.rank(); }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::numel() const { return checked(impl_).shape.numel(); }
int64_t Tensor::offset() const { return checked(impl_).offset; }
DType Tensor::dtype() const { return checked(impl_).dtype; }
Device Tensor::device() const { return checked(impl_).storage.device(); }
TensorOptions Tensor::options() const { return TensorOptions(dtype(), device()); }
const Storage& Tensor::storage() const { return checked(impl_).storage; }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked(impl_);
  // No element: any strides lay it out contiguously (PyTorch's rule). The loop below would want
  // stride 0 after a zero-size dim, which contiguous_strides never gives (it steps over a 0 as
  // over a 1), so a fresh [5, 0] would be "not contiguous" and view()/reshape() of it throw.
  if (t.shape.numel() == 0) return true;
  int64_t expected = 1;
  for (int i = t.shape.rank() - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked(impl_);
  return static_cast<char*>(t.storage.data()) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

template <typename T>
T* Tensor::data() const {
  MINIDL_CHECK(dtype() == dtype_v<T>, "Tensor::data: tensor has dtype ", dtype(), ", requested ", dtype_v<T>);
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bfloat16* Tensor::data<bfloat16>() const;
template float16* Tensor::data<float16>() const;

// ---- conversion ----
Tensor Tensor::to(Device d) const { return ops::to(*this, d, dtype()); }
Tensor Tensor::to(DType t) const { return ops::to(*this, device(), t); }
Tensor Tensor::to(Device d, DType t) const { return ops::to(*this, d, t); }
Tensor Tensor::contiguous() const { return ops::contiguous(*this); }
Tensor Tensor::clone() const { return ops::clone(*this); }

// ---- views ----
Tensor Tensor::reshape(const Shape& s) const { return ops::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return ops::view(*this, s); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape(Shape{1});
  const int s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  MINIDL_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim, " for shape ", shape());
  Shape out;
  for (int i = 0; i < s; ++i) out.push_back(shape()[i]);
  int64_t merged = 1;
  for (int i = s; i <= e; ++i) merged *= shape()[i];
  out.push_back(merged);
  for (int i = e + 1; i < dim(); ++i) out.push_back(shape()[i]);
  return reshape(out);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const { return ops::narrow(*this, d, start, length); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const { return ops::split(*this, split_size, d); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const { return ops::chunk(*this, chunks, d); }
std::vector<Tensor> Tensor::unbind(int64_t d) const { return ops::unbind(*this, d); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return ops::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  MINIDL_CHECK(dim() == 2, "t: expected a 2-D tensor, got shape ", shape());
  return ops::transpose(*this, 0, 1);
}
Tensor Tensor::unsqueeze(int64_t d) const { return ops::unsqueeze(*this, d); }
Tensor Tensor::squeeze(int64_t d) const { return ops::squeeze(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return ops::expand(*this, s); }

// ---- element access ----
namespace {
double read_element(const Tensor& cpu_tensor, int64_t element_offset) {
  const char* base = static_cast<const char*>(cpu_tensor.storage().data());
  const int64_t i = cpu_tensor.offset() + element_offset;
  switch (cpu_tensor.dtype()) {
    case DType::Float32: return reinterpret_cast<const float*>(base)[i];
    case DType::Float64: return reinterpret_cast<const double*>(base)[i];
    case DType::Int64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
    case DType::BFloat16: return reinterpret_cast<const bfloat16*>(base)[i];
    case DType::Float16: return reinterpret_cast<const float16*>(base)[i];
  }
  return 0;
}
}  // namespace

double Tensor::at(std::initializer_list<int64_t> index) const {
  MINIDL_CHECK(static_cast<int>(index.size()) == dim(), "Tensor::at: ", index.size(), " indices for a tensor of shape ",
               shape());
  const Tensor host = device().is_cpu() ? *this : this->to(Device::cpu());
  int64_t off = 0;
  int i = 0;
  for (int64_t idx : index) {
    MINIDL_CHECK(idx >= 0 && idx < shape()[i], "Tensor::at: index ", idx, " out of range for dim ", i, " of shape ",
                 shape());
    off += idx * host.strides()[i];
    ++i;
  }
  return read_element(host, off);
}

double Tensor::item() const {
  MINIDL_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
  const Tensor host = device().is_cpu() ? *this : this->to(Device::cpu());
  return read_element(host, 0);
}

template <typename T>
T Tensor::item() const {
  MINIDL_CHECK(dtype() == dtype_v<T>, "item<", dtype_v<T>, ">: tensor has dtype ", dtype());
  return static_cast<T>(item());
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bfloat16 Tensor::item<bfloat16>() const;  // exact: the double holds the 16-bit value
template float16 Tensor::item<float16>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  MINIDL_CHECK(dtype() == dtype_v<T>, "to_vector<", dtype_v<T>, ">: tensor has dtype ", dtype());
  NoGradGuard no_grad;
  const Tensor host = ops::to(*this, Device::cpu(), dtype()).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;
template std::vector<float16> Tensor::to_vector<float16>() const;

// ---- autograd accessors ----
bool Tensor::requires_grad() const {
  const TensorImpl& t = checked(impl_);
  return t.requires_grad || t.grad_fn != nullptr;
}

Tensor& Tensor::requires_grad_(bool on) {
  TensorImpl& t = const_cast<TensorImpl&>(checked(impl_));
  MINIDL_CHECK(t.grad_fn == nullptr || on, "requires_grad_: cannot turn off gradients of a non-leaf tensor (",
               t.grad_fn ? t.grad_fn->name() : "", "); use detach()");
  MINIDL_CHECK(!on || is_floating(t.dtype), "requires_grad_: only floating-point tensors can require gradients, got ",
               t.dtype);
  t.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return checked(impl_).grad; }
void Tensor::set_grad(const Tensor& g) {
  checked(impl_);  // an undefined tensor has no grad slot: a clear error, not a null dereference
  if (g.defined()) {
    MINIDL_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), "set_grad: gradient ",
                 g.shape(), " ", g.dtype(), " on ", g.device(), " does not match the tensor ", shape(), " ", dtype(),
                 " on ", device());
  }
  impl_->grad = g;
}
const std::shared_ptr<Node>& Tensor::grad_fn() const { return checked(impl_).grad_fn; }
bool Tensor::is_leaf() const { return checked(impl_).grad_fn == nullptr; }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::run_backward(*this, grad, retain_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked(impl_);
  return make_view(*this, t.shape, t.strides, t.offset);
}

void Tensor::register_hook(GradHook hook) const {
  MINIDL_CHECK(is_leaf() && requires_grad(), "register_hook: gradient-ready hooks attach to leaf tensors that require grad");
  impl_->hooks.push_back(std::move(hook));
}

// ---- in place ----
Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  if (numel() == 0) return *this;
  if (is_contiguous()) {
    backend_for(device()).fill(*this, value);
  } else {
    Tensor tmp = full(shape(), value, options());
    backend_for(device()).strided_copy(tmp, *this);
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined(src, "copy_", "src");
  MINIDL_CHECK(src.shape() == shape(), "copy_: source shape ", src.shape(), " differs from destination shape ", shape());
  if (numel() == 0) return *this;
  NoGradGuard no_grad;
  Tensor converted = ops::to(src.detach(), device(), dtype());  // may alias src when nothing changes
  backend_for(device()).strided_copy(converted, *this);
  return *this;
}

Tensor& Tensor::set_data_(const Tensor& src) {
  TensorImpl& t = const_cast<TensorImpl&>(checked(impl_));
  check_defined(src, "set_data_", "src");
  MINIDL_CHECK(src.dtype() == t.dtype && src.shape() == t.shape, "set_data_: the new data is ", src.dtype(), " ",
               src.shape(), " on ", src.device(), ", the tensor is ", t.dtype, " ", t.shape, " on ", device(),
               "; set_data_ keeps a tensor's dtype and shape (make a new tensor to change them)");
  MINIDL_CHECK(t.grad_fn == nullptr, "set_data_: cannot replace the data of a non-leaf tensor (made by ",
               t.grad_fn->name(), ", ", t.dtype, " ", t.shape, "); replace the data of a leaf, or use detach()");
  if (src.impl() == &t) return *this;
  t.storage = src.storage();
  t.strides = src.strides();
  t.offset = src.offset();
  return *this;
}

// ---- math sugar ----
Tensor Tensor::sum() const { return ops::sum(*this); }
Tensor Tensor::sum(int64_t d, bool keepdim) const { return ops::sum(*this, d, keepdim); }
Tensor Tensor::mean() const { return ops::mean(*this); }
Tensor Tensor::mean(int64_t d, bool keepdim) const { return ops::mean(*this, d, keepdim); }
Tensor Tensor::argmax(int64_t d) const { return ops::argmax(*this, d); }
Tensor Tensor::relu() const { return ops::relu(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return ops::matmul(*this, other); }
Tensor Tensor::eq(const Tensor& other) const { return ops::eq(*this, other); }
Tensor Tensor::log_softmax(int64_t d) const { return ops::log_softmax(*this, d); }
Tensor Tensor::softmax(int64_t d) const { return ops::softmax(*this, d); }

// ---- factories ----
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, const TensorOptions& options) {
  for (int i = 0; i < shape.rank(); ++i)
    MINIDL_CHECK(shape[i] >= 0, "empty: negative size ", shape[i], " in shape ", shape);
  MINIDL_CHECK(!options.requires_grad || is_floating(options.dtype),
               "empty: only floating-point tensors can require gradients, got ", options.dtype);
  MINIDL_CHECK(!(options.device.is_cuda() && options.dtype == DType::Float64), "empty: a float64 tensor of shape ",
               shape, " on ", options.device,
               "; CUDA tensors are float32, bfloat16, float16 or int64 (float64 lives on the CPU)");
  // The byte count, refused before it can wrap: {2^31, 2^31} float32 would otherwise ask for 0.
  int64_t bytes = static_cast<int64_t>(dtype_size(options.dtype));
  for (int i = 0; i < shape.rank(); ++i)
    MINIDL_CHECK(!__builtin_mul_overflow(bytes, shape[i], &bytes), "empty: a ", options.dtype, " tensor of shape ",
                 shape, " holds more than 2^63 bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage(static_cast<size_t>(bytes), options.device, backend_for(options.device).allocator());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  impl->requires_grad = options.requires_grad;
  return Tensor(std::move(impl));
}

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  Tensor t = empty(shape, options);
  if (t.numel() > 0) backend_for(options.device).fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, const TensorOptions& options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1.0, options); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor scalar_tensor(double value, const TensorOptions& options) { return full(Shape{}, value, options); }

Tensor arange(int64_t end, const TensorOptions& options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  MINIDL_CHECK(step != 0.0, "arange: step must be non-zero");
  MINIDL_CHECK((end - start) * step >= 0, "arange: step ", step, " does not lead from ", start, " to ", end);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty(Shape{n}, options);
  if (n > 0) backend_for(options.device).arange(t, start, step);
  return t;
}

namespace {
Generator& pick(Generator* gen) { return gen ? *gen : default_generator(); }
}  // namespace

Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options, Generator* gen) {
  MINIDL_CHECK(is_floating(options.dtype), "uniform: expected a floating dtype, got ", options.dtype);
  MINIDL_CHECK(low <= high, "uniform: low ", low, " is above high ", high);
  Tensor t = empty(shape, options);
  if (t.numel() == 0) return t;
  Generator& g = pick(gen);
  const uint64_t seed = g.seed(), offset = g.reserve(static_cast<uint64_t>(t.numel()));
  backend_for(options.device).uniform(t, low, high, seed, offset);
  return t;
}

Tensor rand(const Shape& shape, const TensorOptions& options, Generator* gen) {
  return uniform(shape, 0.0, 1.0, options, gen);
}

Tensor randn(const Shape& shape, const TensorOptions& options, Generator* gen) {
  MINIDL_CHECK(is_floating(options.dtype), "randn: expected a floating dtype, got ", options.dtype);
  Tensor t = empty(shape, options);
  if (t.numel() == 0) return t;
  Generator& g = pick(gen);
  const uint64_t seed = g.seed(), offset = g.reserve(static_cast<uint64_t>(t.numel()));
  backend_for(options.device).normal(t, 0.0, 1.0, seed, offset);
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options, Generator* gen) {
  MINIDL_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  Tensor t = empty(shape, options.with_requires_grad(false));
  if (t.numel() == 0) return t;
  Generator& g = pick(gen);
  const uint64_t seed = g.seed(), offset = g.reserve(static_cast<uint64_t>(t.numel()));
  if (options.dtype == DType::Int64) {
    backend_for(options.device).randint(t, low, high, seed, offset);
  } else {
    Tensor ints = empty(shape, TensorOptions(DType::Int64, options.device));
    backend_for(options.device).randint(ints, low, high, seed, offset);
    backend_for(options.device).cast(ints, t);
  }
  return t;
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options) {
  MINIDL_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
               " values do not fill shape ", shape, " (", shape.numel(), " elements)");
  constexpr bool converts = std::is_same_v<T, double> || std::is_same_v<T, int64_t>;
  MINIDL_CHECK(converts || options.dtype == dtype_v<T>, "from_vector: values of type ", dtype_v<T>,
               " cannot fill a tensor of dtype ", options.dtype);
  Tensor host = empty(shape, TensorOptions(dtype_v<T>, Device::cpu()));
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  Tensor out = ops::to(host, options.device, options.dtype);
  if (options.requires_grad) out.requires_grad_(true);
  return out;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, const TensorOptions&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, const TensorOptions&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, const TensorOptions&);

// ---- checks shared by the ops ----
void check_defined(const Tensor& t, const char* op, const char* arg) {
  MINIDL_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

void check_dtype(const Tensor& t, DType expected, const char* op, const char* arg) {
  check_defined(t, op, arg);
  MINIDL_CHECK(t.dtype() == expected, op, ": argument '", arg, "' has dtype ", t.dtype(), " and shape ", t.shape(),
               ", expected dtype ", expected);
}

void check_same_device(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    MINIDL_CHECK(t->device() == first->device(), op, ": tensors are on different devices (", first->device(), " with shape ",
                 first->shape(), " and ", t->device(), " with shape ", t->shape(), "); move them to one device with .to()");
  }
}

}  // namespace minidl
