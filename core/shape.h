// Shape: the sizes (or strides) of a tensor, stored inline (rank <= 8) so that making a
// tensor does not allocate for its shape — small-tensor training steps are dominated by
// such overheads. Also the helpers for contiguous strides and broadcasting.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace minidl {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  static Shape filled(int rank, int64_t value);

  int rank() const { return rank_; }
  size_t size() const { return static_cast<size_t>(rank_); }
  bool empty() const { return rank_ == 0; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  int64_t back() const { return dims_[static_cast<size_t>(rank_ - 1)]; }

  void push_back(int64_t d);
  void insert(int pos, int64_t d);
  void erase(int pos);

  // Product of the sizes (1 for rank 0).
  int64_t numel() const;
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  std::string str() const;  // "[2, 3]"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major strides for a shape: the last dim has stride 1.
Shape contiguous_strides(const Shape& shape);

// The NumPy/PyTorch broadcast of two shapes (aligned at the trailing dim); throws
// minidl::Error naming `op` when a pair of sizes is neither equal nor 1.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative dim into [0, rank); throws naming `op` when out of range.
int wrap_dim(int64_t dim, int rank, const char* op);

}  // namespace minidl
