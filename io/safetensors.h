// safetensors (https://github.com/huggingface/safetensors), the tensor file format that
// Hugging Face and PyTorch users already read and write:
//   [8 bytes: little-endian u64 N][N bytes: JSON header][data section]
// The header is a JSON object: name -> {"dtype": "F32", "shape": [2, 3], "data_offsets":
// [begin, end]} with offsets relative to the start of the data section, plus an optional
// "__metadata__": {string: string}. Data is little-endian and row-major; the tensors must
// cover the data section exactly (no holes, no overlaps). minidl reads and writes F32, F64
// and I64. Files come from outside, so the parser checks everything and refuses a bad file
// with a minidl::Error naming the file and the problem — never a crash, never an allocation
// larger than the file.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "io/atomic_file.h"  // write_file_atomically

namespace minidl::io {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  TensorMap tensors;  // contiguous CPU tensors
  Metadata metadata;  // the "__metadata__" object, empty when absent
};

// A header longer than this is refused, before anything is allocated for it. (Hugging Face's
// reader draws its line a little lower, at 10^8 bytes; either describes millions of tensors.)
inline constexpr size_t kSafetensorsMaxHeaderBytes = 100u << 20;

// The bytes of a whole file. Tensors on any device, with any strides, are copied to
// contiguous CPU first. Throws for an undefined tensor, the reserved name "__metadata__", or a
// name or metadata string that is not valid UTF-8 (JSON text must be).
std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata = {});

// Parses a whole file held in memory; `name` is used in error messages.
SafetensorsFile parse_safetensors(const unsigned char* data, size_t size, const std::string& name);

// serialize_safetensors + write_file_atomically (io/atomic_file.h): a failed save leaves any
// old file intact.
void save_safetensors(const TensorMap& tensors, const std::string& path, const Metadata& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace minidl::io
