// IDX reader: header validation, exact payload length, gunzip with a bomb guard, and the
// big-endian -> host conversion into a tensor. See data/idx.h for the format.
#include "data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

namespace minidl::data {

size_t idx_element_size(uint8_t type_code) {
  switch (type_code) {
    case kIdxUint8: return 1;
    case kIdxInt8: return 1;
    case kIdxInt16: return 2;
    case kIdxInt32: return 4;
    case kIdxFloat32: return 4;
    case kIdxFloat64: return 8;
    default: return 0;
  }
}

const char* idx_type_name(uint8_t type_code) {
  switch (type_code) {
    case kIdxUint8: return "ubyte";
    case kIdxInt8: return "int8";
    case kIdxInt16: return "int16";
    case kIdxInt32: return "int32";
    case kIdxFloat32: return "float32";
    case kIdxFloat64: return "float64";
    default: return "unknown";
  }
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

// What the header promises: the payload that must follow it.
struct IdxHeader {
  uint8_t type_code = 0;
  std::vector<int64_t> dims;
  size_t header_bytes = 0;   // 4 + 4 * rank
  size_t payload_bytes = 0;  // product of dims x element size
};

uint32_t load_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "x" : "") << dims[i];
  return os.str();
}

// "60000x28x28 (47040000 bytes of ubyte)"
std::string promise_text(const IdxHeader& h) {
  return detail::make_message(dims_text(h.dims), " (", h.payload_bytes, " bytes of ", idx_type_name(h.type_code), ")");
}

// Parses and checks the header at the front of `data` (which may hold more than the header).
// `where` is "op: file" for messages.
IdxHeader parse_header(const unsigned char* data, size_t size, const std::string& where) {
  MINIDL_CHECK(size >= 4, where, ": truncated: ", size, " bytes, an IDX file starts with a 4-byte magic");
  MINIDL_CHECK(data[0] == 0 && data[1] == 0, where, ": not an IDX file: the magic must start with two zero bytes, got ",
               "0x", std::hex, int{data[0]}, " 0x", int{data[1]});
  IdxHeader h;
  h.type_code = data[2];
  MINIDL_CHECK(idx_element_size(h.type_code) != 0, where, ": unknown IDX type code 0x", std::hex, int{h.type_code},
               std::dec, " (expected 0x08 ubyte, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32 or 0x0E float64)");
  const int rank = data[3];
  MINIDL_CHECK(rank >= 1 && rank <= kIdxMaxRank, where, ": rank ", rank, " in the magic; minidl reads IDX ranks 1..",
               kIdxMaxRank);
  h.header_bytes = 4 + 4 * static_cast<size_t>(rank);
  MINIDL_CHECK(size >= h.header_bytes, where, ": truncated header: rank ", rank, " needs ", h.header_bytes,
               " header bytes, the file holds ", size);
  const size_t esize = idx_element_size(h.type_code);
  size_t bytes = esize;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = load_be32(data + 4 + 4 * i);
    h.dims.push_back(d);
    MINIDL_CHECK(d > 0, where, ": dimension ", i, " is 0 (dims ", dims_text(h.dims), "...); every size must be > 0");
    // The byte count must fit in size_t and in int64 (tensor sizes are int64).
    MINIDL_CHECK(!__builtin_mul_overflow(bytes, size_t{d}, &bytes) && bytes <= size_t{INT64_MAX}, where,
                 ": element count overflows: dims ", dims_text(h.dims), "... of ", idx_type_name(h.type_code));
  }
  h.payload_bytes = bytes;
  return h;
}

// Throws unless `held` (the payload bytes after the header) is exactly what h promises.
void check_payload_length(const IdxHeader& h, size_t held, const std::string& where, const char* qualifier) {
  MINIDL_CHECK(held >= h.payload_bytes, where, ": truncated: header says ", promise_text(h), ", the file holds ", held,
               qualifier, " after the ", h.header_bytes, "-byte header");
  MINIDL_CHECK(held <= h.payload_bytes, where, ": trailing garbage: header says ", promise_text(h),
               ", the file holds ", held, qualifier, " after the ", h.header_bytes, "-byte header");
}

std::string errno_text() { return std::strerror(errno); }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// A decompressing reader over a gzip file (one or more concatenated members, as gzip allows).
class GzipReader {
 public:
  GzipReader(std::FILE* f, std::string where) : file_(f), where_(std::move(where)) {
    std::memset(&zs_, 0, sizeof zs_);
    // 15 + 16: a gzip wrapper (not zlib, not raw deflate), largest window.
    MINIDL_CHECK(inflateInit2(&zs_, 15 + 16) == Z_OK, where_, ": zlib inflateInit2 failed");
  }
  ~GzipReader() { inflateEnd(&zs_); }
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  // Fills up to n bytes; fewer only at the end of the data.
  size_t read(unsigned char* dst, size_t n) {
    size_t produced = 0;
    while (produced < n && !finished_) {
      if (zs_.avail_in == 0) refill();
      if (zs_.avail_in == 0) {
        // Input ended inside a member.
        MINIDL_CHECK(!in_member_, where_, ": truncated gzip stream: the file ends inside compressed data");
        finished_ = true;
        break;
      }
      const size_t chunk = std::min<size_t>(n - produced, 1u << 30);
      zs_.next_out = dst + produced;
      zs_.avail_out = static_cast<uInt>(chunk);
      in_member_ = true;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      produced += chunk - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
        // Another member may follow; anything else after the stream is garbage.
        if (zs_.avail_in == 0) refill();
        if (zs_.avail_in == 0) {
          finished_ = true;
        } else {
          // (zlib checks the rest of the next member's header.)
          MINIDL_CHECK(zs_.next_in[0] == 0x1f, where_,
                       ": trailing bytes after the gzip stream that are not another gzip member");
          MINIDL_CHECK(inflateReset(&zs_) == Z_OK, where_, ": zlib inflateReset failed");
        }
      } else if (rc == Z_BUF_ERROR) {
        // No progress possible with the current input: need more (handled by the refill above).
        continue;
      } else {
        MINIDL_CHECK(rc == Z_OK, where_, ": corrupt gzip data (zlib: ", zs_.msg ? zs_.msg : zError(rc), ")");
      }
    }
    return produced;
  }

 private:
  void refill() {
    const size_t got = std::fread(in_, 1, sizeof in_, file_);
    MINIDL_CHECK(got > 0 || !std::ferror(file_), where_, ": read error: ", errno_text());
    zs_.next_in = in_;
    zs_.avail_in = static_cast<uInt>(got);
  }

  std::FILE* file_;
  std::string where_;
  z_stream zs_;
  unsigned char in_[1 << 16];
  bool in_member_ = false;
  bool finished_ = false;
};

// Reads what the header promises through `read` (a function like GzipReader::read), checking
// that exactly that much comes out. `max_reserve` bounds the up-front allocation, so a header
// that lies about its size cannot make us allocate more than the input can deliver.
template <typename Read>
IdxArray read_payload(const IdxHeader& h, Read&& read, size_t max_reserve, const std::string& where,
                      const char* qualifier) {
  IdxArray a;
  a.type_code = h.type_code;
  a.dims = h.dims;
  a.payload.reserve(std::min(h.payload_bytes, max_reserve));
  size_t chunk = 1u << 20;
  while (a.payload.size() < h.payload_bytes) {
    const size_t want = std::min(chunk, h.payload_bytes - a.payload.size());
    const size_t old = a.payload.size();
    a.payload.resize(old + want);
    const size_t got = read(a.payload.data() + old, want);
    a.payload.resize(old + got);
    if (got < want) check_payload_length(h, a.payload.size(), where, qualifier);  // throws: truncated
    chunk = std::min<size_t>(chunk * 2, 64u << 20);
  }
  // One more byte means the data goes on past the promise; stop there (the bomb guard).
  unsigned char extra;
  if (read(&extra, 1) != 0) {
    MINIDL_CHECK(false, where, ": trailing garbage: header says ", promise_text(h), ", the file holds more than ",
                 h.payload_bytes, qualifier, " after the ", h.header_bytes, "-byte header");
  }
  return a;
}

}  // namespace

IdxArray parse_idx(const unsigned char* data, size_t size, const std::string& name) {
  const std::string where = "parse_idx: " + name;
  MINIDL_CHECK(data != nullptr || size == 0, where, ": null data");
  const IdxHeader h = parse_header(data, size, where);
  check_payload_length(h, size - h.header_bytes, where, " bytes");
  IdxArray a;
  a.type_code = h.type_code;
  a.dims = h.dims;
  a.payload.assign(data + h.header_bytes, data + size);
  return a;
}

IdxArray read_idx(const std::string& path) {
  const std::string where = "read_idx: " + path;
  File f(std::fopen(path.c_str(), "rb"));
  MINIDL_CHECK(f != nullptr, where, ": cannot open: ", errno_text());
  struct stat st;
  MINIDL_CHECK(::fstat(fileno(f.get()), &st) == 0, where, ": cannot stat: ", errno_text());
  MINIDL_CHECK(S_ISREG(st.st_mode), where, ": not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);

  unsigned char magic[2] = {0, 0};
  const size_t got_magic = std::fread(magic, 1, 2, f.get());
  MINIDL_CHECK(!std::ferror(f.get()), where, ": read error: ", errno_text());
  std::rewind(f.get());
  const bool gzipped = got_magic == 2 && magic[0] == 0x1f && magic[1] == 0x8b;

  if (!gzipped) {
    auto read = [&](unsigned char* dst, size_t n) {
      const size_t got = std::fread(dst, 1, n, f.get());
      MINIDL_CHECK(got == n || !std::ferror(f.get()), where, ": read error: ", errno_text());
      return got;
    };
    unsigned char head[4 + 4 * kIdxMaxRank];
    size_t head_size = read(head, 4);
    if (head_size == 4 && head[3] >= 1 && head[3] <= kIdxMaxRank) head_size += read(head + 4, 4 * size_t{head[3]});
    const IdxHeader h = parse_header(head, head_size, where);
    check_payload_length(h, static_cast<size_t>(file_size - h.header_bytes), where, " bytes");
    return read_payload(h, read, h.payload_bytes, where, " bytes");
  }

  GzipReader gz(f.get(), where);
  auto read = [&](unsigned char* dst, size_t n) { return gz.read(dst, n); };
  unsigned char head[4 + 4 * kIdxMaxRank];
  size_t head_size = read(head, 4);
  if (head_size == 4 && head[3] >= 1 && head[3] <= kIdxMaxRank) head_size += read(head + 4, 4 * size_t{head[3]});
  const IdxHeader h = parse_header(head, head_size, where + " (decompressed)");
  // Deflate expands at most ~1032:1, so no honest file yields more than this.
  const size_t max_out = static_cast<size_t>(std::min<uint64_t>(file_size, SIZE_MAX / 2048) * 1032 + 4096);
  return read_payload(h, read, max_out, where, " bytes (decompressed)");
}

namespace {

template <typename Src>
Src load_be(const unsigned char* p) {
  using U = std::conditional_t<sizeof(Src) == 1, uint8_t,
            std::conditional_t<sizeof(Src) == 2, uint16_t, std::conditional_t<sizeof(Src) == 4, uint32_t, uint64_t>>>;
  U u = 0;
  for (size_t i = 0; i < sizeof(Src); ++i) u = static_cast<U>((u << 8) | p[i]);
  Src v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// Converts one value; float -> int64 is checked (a NaN or out-of-range value would be UB).
template <typename Dst, typename Src>
Dst convert_value(Src v, const IdxArray& a, int64_t index) {
  if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<Src>) {
    // 2^63 is exactly representable; int64 holds [-2^63, 2^63).
    MINIDL_CHECK(std::isfinite(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0,
                 "idx_to_tensor: element ", index, " of a ", idx_type_name(a.type_code), " array is ", v,
                 ", which int64 cannot hold");
    return static_cast<Dst>(v);
  } else if constexpr (std::is_same_v<Dst, float> && std::is_same_v<Src, double>) {
    // A finite double beyond float's range becomes +-inf (IEEE rounding), said explicitly.
    if (std::isfinite(v) && std::fabs(v) > static_cast<double>(FLT_MAX))
      return v > 0 ? INFINITY : -INFINITY;
    return static_cast<float>(v);
  } else {
    (void)a;
    (void)index;
    return static_cast<Dst>(v);
  }
}

template <typename Dst, typename Src>
void convert_all(const IdxArray& a, Dst* out, int64_t n) {
  const unsigned char* p = a.payload.data();
  if constexpr (std::is_same_v<Src, uint8_t>) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(p[i]);  // the MNIST path: one pass
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = convert_value<Dst>(load_be<Src>(p + i * sizeof(Src)), a, i);
  }
}

template <typename Dst>
void convert_from_code(const IdxArray& a, Dst* out, int64_t n) {
  switch (a.type_code) {
    case kIdxUint8: return convert_all<Dst, uint8_t>(a, out, n);
    case kIdxInt8: return convert_all<Dst, int8_t>(a, out, n);
    case kIdxInt16: return convert_all<Dst, int16_t>(a, out, n);
    case kIdxInt32: return convert_all<Dst, int32_t>(a, out, n);
    case kIdxFloat32: return convert_all<Dst, float>(a, out, n);
    case kIdxFloat64: return convert_all<Dst, double>(a, out, n);
  }
}

}  // namespace

Tensor idx_to_tensor(const IdxArray& a, DType dtype) {
  const size_t esize = idx_element_size(a.type_code);
  MINIDL_CHECK(esize != 0, "idx_to_tensor: unknown IDX type code 0x", std::hex, int{a.type_code});
  MINIDL_CHECK(!a.dims.empty() && a.dims.size() <= static_cast<size_t>(kIdxMaxRank),
               "idx_to_tensor: rank ", a.dims.size(), ", expected 1..", kIdxMaxRank);
  int64_t n = 1;
  for (int64_t d : a.dims) {
    MINIDL_CHECK(d > 0 && !__builtin_mul_overflow(n, d, &n), "idx_to_tensor: bad dims ", dims_text(a.dims));
  }
  MINIDL_CHECK(a.payload.size() / esize == static_cast<size_t>(n) && a.payload.size() % esize == 0,
               "idx_to_tensor: dims ", dims_text(a.dims), " of ", idx_type_name(a.type_code), " need ", n, " x ", esize,
               " bytes, the payload holds ", a.payload.size());
  // A 16-bit tensor: read into float32, then rounded by the dtype cast (one rounding per value).
  if (is_half(dtype)) return idx_to_tensor(a, DType::Float32).to(dtype);
  Tensor t = empty(Shape(a.dims), TensorOptions(dtype, Device::cpu()));
  switch (dtype) {
    case DType::Float32: convert_from_code(a, t.data<float>(), n); break;
    case DType::Float64: convert_from_code(a, t.data<double>(), n); break;
    case DType::Int64: convert_from_code(a, t.data<int64_t>(), n); break;
    case DType::BFloat16:
    case DType::Float16: break;  // converted above
  }
  return t;
}

}  // namespace minidl::data
