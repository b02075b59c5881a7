// Shape helpers: inline storage, row-major strides, broadcasting, dim wrapping.
#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace minidl {

Shape::Shape(std::initializer_list<int64_t> dims) {
  MINIDL_CHECK(dims.size() <= kMaxRank, "Shape: rank ", dims.size(), " exceeds the maximum ", kMaxRank);
  for (int64_t d : dims) dims_[static_cast<size_t>(rank_++)] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  MINIDL_CHECK(dims.size() <= kMaxRank, "Shape: rank ", dims.size(), " exceeds the maximum ", kMaxRank);
  for (int64_t d : dims) dims_[static_cast<size_t>(rank_++)] = d;
}

Shape Shape::filled(int rank, int64_t value) {
  MINIDL_CHECK(rank >= 0 && rank <= kMaxRank, "Shape: rank ", rank, " is outside [0, ", kMaxRank, "]");
  Shape s;
  s.rank_ = rank;
  for (int i = 0; i < rank; ++i) s.dims_[static_cast<size_t>(i)] = value;
  return s;
}

void Shape::push_back(int64_t d) {
  MINIDL_CHECK(rank_ < kMaxRank, "Shape: cannot grow past rank ", kMaxRank);
  dims_[static_cast<size_t>(rank_++)] = d;
}

void Shape::insert(int pos, int64_t d) {
  MINIDL_CHECK(rank_ < kMaxRank, "Shape: cannot grow past rank ", kMaxRank);
  MINIDL_CHECK(pos >= 0 && pos <= rank_, "Shape: insert position ", pos, " outside [0, ", rank_, "]");
  for (int i = rank_; i > pos; --i) dims_[static_cast<size_t>(i)] = dims_[static_cast<size_t>(i - 1)];
  dims_[static_cast<size_t>(pos)] = d;
  ++rank_;
}

void Shape::erase(int pos) {
  MINIDL_CHECK(pos >= 0 && pos < rank_, "Shape: erase position ", pos, " outside [0, ", rank_, ")");
  for (int i = pos; i + 1 < rank_; ++i) dims_[static_cast<size_t>(i)] = dims_[static_cast<size_t>(i + 1)];
  --rank_;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << dims_[static_cast<size_t>(i)];
  os << ']';
  return os.str();
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[static_cast<size_t>(i)] != b.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides = Shape::filled(shape.rank(), 1);
  int64_t running = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = running;
    running *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int rank = a.rank() > b.rank() ? a.rank() : b.rank();
  Shape out = Shape::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    MINIDL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                 " cannot be broadcast (dim ", i, ": ", da, " vs ", db, "; expected equal sizes or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int wrap_dim(int64_t dim, int rank, const char* op) {
  const int64_t r = rank;
  MINIDL_CHECK(dim >= -r && dim < r, op, ": dim ", dim, " is out of range for a tensor of rank ", rank,
               " (expected in [", -r, ", ", r - 1, "])");
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

}  // namespace minidl
