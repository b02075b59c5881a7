// IDX: the file format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/).
// A file is a 4-byte magic {0, 0, type code, rank}, then `rank` big-endian uint32 sizes,
// then the elements, big-endian, row-major. Files are often gzipped (magic 1f 8b).
// Files come from outside, so everything is checked: the magic, the type code, the rank
// (1..8, minidl's Shape limit), each size (> 0), the element count (no overflow) and that
// the payload holds exactly sizes x element size bytes (short = truncated, long = trailing
// garbage). Every error is a minidl::Error naming the file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl::data {

// IDX type codes (the third byte of the magic).
inline constexpr uint8_t kIdxUint8 = 0x08;    // unsigned byte: what MNIST uses
inline constexpr uint8_t kIdxInt8 = 0x09;     // signed byte
inline constexpr uint8_t kIdxInt16 = 0x0B;    // big-endian int16
inline constexpr uint8_t kIdxInt32 = 0x0C;    // big-endian int32
inline constexpr uint8_t kIdxFloat32 = 0x0D;  // big-endian IEEE float32
inline constexpr uint8_t kIdxFloat64 = 0x0E;  // big-endian IEEE float64
inline constexpr int kIdxMaxRank = 8;

// Bytes per element of a valid type code, 0 for an unknown one.
size_t idx_element_size(uint8_t type_code);
// "ubyte", "int8", "int16", "int32", "float32", "float64", or "unknown".
const char* idx_type_name(uint8_t type_code);

struct IdxArray {
  uint8_t type_code = kIdxUint8;
  std::vector<int64_t> dims;
  std::vector<unsigned char> payload;  // raw big-endian bytes after the header

  int64_t numel() const;  // product of dims
};

// Parses a whole, already decompressed IDX file held in memory; `name` is used in messages.
IdxArray parse_idx(const unsigned char* data, size_t size, const std::string& name);

// Reads `path`, gunzips it when it starts with 1f 8b (stopping as soon as more bytes come
// out than the header allows, so a decompression bomb costs nothing), and parses it.
IdxArray read_idx(const std::string& path);

// A contiguous CPU tensor of `dtype` (Float32, Float64 or Int64) with a's dims, each element
// converted from its big-endian IDX value.
Tensor idx_to_tensor(const IdxArray& a, DType dtype);

}  // namespace minidl::data
