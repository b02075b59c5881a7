// Bytes of handcrafted IDX files for the data tests (test_idx, test_mnist): big-endian
// headers, byte strings, and gzip files written with zlib as the gzip tool would.
#pragma once

#include <catch2/catch.hpp>
#include <zlib.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace minidl::testing {

inline std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// An IDX file: magic {0, 0, type, rank}, the dims big-endian, then `payload` as given.
inline std::string idx_file(uint8_t type, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) s += be32(d);
  return s + payload;
}

// Writes `bytes` gzipped with zlib's gz* API; mode "ab" appends a member.
inline void write_gzip(const std::string& path, const std::string& bytes, const char* mode = "wb") {
  gzFile f = gzopen(path.c_str(), mode);
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// The bytes 0..255 given, as a string.
inline std::string ubytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

}  // namespace minidl::testing
