// safetensors writer and (untrusting) reader. The header is read with a SAX handler rather
// than nlohmann's DOM parser because the DOM parser silently keeps the last of two equal keys
// — a file naming one tensor twice must be refused — and because the handler can cap the
// nesting depth (a valid header nests 3 deep), so no input can recurse deeply anywhere.
// Nothing is allocated for tensor data until the whole header has been checked against the
// size of the data section, so a file can never make us allocate more than its own size.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

namespace minidl::io {

// The data section is little-endian, copied to and from tensor memory as is.
static_assert(std::endian::native == std::endian::little,
              "io/safetensors supports little-endian hosts only (a big-endian port must byte-swap the data)");

using Json = nlohmann::json;

namespace {

constexpr const char* kMetadataKey = "__metadata__";

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
  }
  return "?";
}

// Every dtype the safetensors format defines; minidl reads five of them.
bool is_safetensors_dtype(const std::string& s) {
  static const char* const kAll[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16",
                                     "U16",  "F16", "BF16", "I32",    "U32",     "F32",     "F64",
                                     "I64",  "U64", "C64", "F4",      "F6_E2M3", "F6_E3M2"};
  return std::any_of(std::begin(kAll), std::end(kAll), [&](const char* d) { return s == d; });
}

bool minidl_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::Float32;
  else if (s == "F64") *out = DType::Float64;
  else if (s == "I64") *out = DType::Int64;
  else if (s == "BF16") *out = DType::BFloat16;
  else if (s == "F16") *out = DType::Float16;
  else return false;
  return true;
}

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- the header parser ----

// Builds a Json DOM from SAX events, refusing duplicate keys and nesting deeper than kMaxDepth.
// Note [why a SAX handler]: see the top of this file.
class HeaderSax : public nlohmann::json_sax<Json> {
 public:
  static constexpr size_t kMaxDepth = 8;

  Json root;
  std::string error;  // set when the parse stopped

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }
  bool start_object(size_t) override { return open(Json::object()); }
  bool start_array(size_t) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (stack_.back()->contains(k)) {
      return fail(stack_.size() == 1 ? "duplicate name '" + k + "'"
                                     : "duplicate key '" + k + "' inside '" + names_.back() + "'");
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    return fail(std::string("not valid JSON: ") + ex.what());
  }

 private:
  bool fail(std::string why) {
    if (error.empty()) error = std::move(why);
    return false;
  }
  // Places v in the current container (or as the root); returns where it went.
  Json* place(Json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    Json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool add(Json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    if (stack_.size() >= kMaxDepth) return fail("nested more than 8 levels deep (a safetensors header nests 3)");
    names_.push_back(stack_.empty() ? "" : stack_.back()->is_array() ? names_.back() + "[]" : key_);
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    names_.pop_back();
    return true;
  }

  // Open containers, innermost last. Pointers stay valid: only the innermost one grows.
  std::vector<Json*> stack_;
  std::vector<std::string> names_;  // the key each open container sits under, for messages
  std::string key_;
};

// One tensor's entry after its checks: where its bytes are.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

std::string offsets_text(uint64_t b, uint64_t e) { return detail::make_message("[", b, ", ", e, "]"); }

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Entry check_entry(const std::string& name, const Json& v, uint64_t data_size, const std::string& where) {
  const std::string at = where + ": tensor '" + name + "'";
  MINIDL_CHECK(v.is_object(), at, ": the entry is not a JSON object (expected {\"dtype\", \"shape\", \"data_offsets\"})");

  // dtype
  auto dt = v.find("dtype");
  MINIDL_CHECK(dt != v.end(), at, ": missing \"dtype\"");
  MINIDL_CHECK(dt->is_string(), at, ": \"dtype\" must be a string, got ", dt->dump());
  const std::string& dtype_str = dt->get_ref<const std::string&>();
  Entry e;
  e.name = name;
  if (!minidl_dtype(dtype_str, &e.dtype)) {
    MINIDL_CHECK(!is_safetensors_dtype(dtype_str), at, ": unsupported dtype ", dtype_str,
                 "; minidl reads F32, F64, I64, BF16, F16");
    MINIDL_CHECK(false, at, ": unknown dtype \"", dtype_str, "\" (not a safetensors dtype)");
  }

  // shape
  auto sh = v.find("shape");
  MINIDL_CHECK(sh != v.end(), at, ": missing \"shape\"");
  MINIDL_CHECK(sh->is_array(), at, ": \"shape\" must be an array of non-negative integers, got ", sh->dump());
  std::vector<uint64_t> dims;
  for (const Json& d : *sh) {
    MINIDL_CHECK(d.is_number_unsigned(), at, ": \"shape\" must be an array of non-negative integers, got ",
                 sh->dump());
    dims.push_back(d.get<uint64_t>());
  }
  MINIDL_CHECK(dims.size() <= static_cast<size_t>(Shape::kMaxRank), at, ": shape ", shape_text(dims), " has rank ",
               dims.size(), "; minidl tensors have at most ", Shape::kMaxRank, " dims");
  // The product of the non-zero dims must fit too: Shape::numel() multiplies them all in int64,
  // and [2^62, 2^62, 0] would overflow there before reaching the 0.
  uint64_t bytes = dtype_size(e.dtype);
  bool has_zero = false;
  for (uint64_t d : dims) {
    has_zero = has_zero || d == 0;
    MINIDL_CHECK(d == 0 || (!__builtin_mul_overflow(bytes, d, &bytes) && bytes <= static_cast<uint64_t>(INT64_MAX)),
                 at, ": element count overflows: shape ", shape_text(dims), " of ", dtype_str);
  }
  if (has_zero) bytes = 0;
  std::vector<int64_t> sdims(dims.begin(), dims.end());
  e.shape = Shape(sdims);

  // data_offsets
  auto off = v.find("data_offsets");
  MINIDL_CHECK(off != v.end(), at, ": missing \"data_offsets\"");
  MINIDL_CHECK(off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
                   (*off)[1].is_number_unsigned(),
               at, ": \"data_offsets\" must be two non-negative integers [begin, end], got ", off->dump());
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  MINIDL_CHECK(e.begin <= e.end, at, ": data_offsets ", offsets_text(e.begin, e.end), ": begin > end");
  MINIDL_CHECK(e.end <= data_size, at, ": data_offsets ", offsets_text(e.begin, e.end),
               " run past the end of the data section, which holds ", data_size,
               " bytes (out of bounds, or the file is truncated)");
  MINIDL_CHECK(e.end - e.begin == bytes, at, ": data_offsets ", offsets_text(e.begin, e.end), " cover ",
               e.end - e.begin, " bytes, but dtype ", dtype_str, " x shape ", shape_text(dims), " needs ", bytes);
  return e;
}

Metadata check_metadata(const Json& v, const std::string& where) {
  MINIDL_CHECK(v.is_object(), where, ": \"", kMetadataKey, "\" must be an object of strings, got ", v.dump());
  Metadata m;
  for (const auto& [k, s] : v.items()) {
    MINIDL_CHECK(s.is_string(), where, ": \"", kMetadataKey, "\" value for key '", k, "' is not a string (got ",
                 s.dump(), "); safetensors metadata maps strings to strings");
    m.emplace(k, s.get<std::string>());
  }
  return m;
}

// The tensors must tile the data section exactly: sorted by offset, each starts where the
// previous one ended, and the last ends at the end of the section.
void check_coverage(std::vector<Entry>& entries, uint64_t data_size, const std::string& where) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    MINIDL_CHECK(e.begin >= covered, where, ": tensors '", prev ? prev->name : "", "' ",
                 prev ? offsets_text(prev->begin, prev->end) : "", " and '", e.name, "' ",
                 offsets_text(e.begin, e.end), " overlap in the data section");
    MINIDL_CHECK(e.begin == covered, where, ": hole in the data section: bytes [", covered, ", ", e.begin,
                 ") belong to no tensor (before '", e.name, "')");
    covered = e.end;
    prev = &e;
  }
  MINIDL_CHECK(covered == data_size, where, ": bytes [", covered, ", ", data_size,
               ") at the end of the data section belong to no tensor (a hole, or trailing garbage)");
}

SafetensorsFile parse(const unsigned char* data, size_t size, const std::string& where) {
  MINIDL_CHECK(data != nullptr || size == 0, where, ": null data");
  MINIDL_CHECK(size >= 8, where, ": truncated: the file holds ", size,
               " bytes, a safetensors file starts with an 8-byte header length");
  const uint64_t header_len = load_le64(data);
  MINIDL_CHECK(header_len <= kSafetensorsMaxHeaderBytes, where, ": header length ", header_len,
               " is above the 100 MiB limit (", kSafetensorsMaxHeaderBytes, " bytes)");
  MINIDL_CHECK(header_len <= size - 8, where, ": header length ", header_len, " is larger than the file (", size,
               " bytes, ", size - 8, " after the length)");
  const unsigned char* header = data + 8;
  const unsigned char* body = header + header_len;
  const uint64_t data_size = size - 8 - header_len;

  HeaderSax sax;
  bool ok = false;
  try {
    ok = Json::sax_parse(header, body, &sax, nlohmann::detail::input_format_t::json, /*strict=*/true);
  } catch (const Json::exception& ex) {
    sax.error = std::string("not valid JSON: ") + ex.what();
  }
  MINIDL_CHECK(ok && sax.error.empty(), where, ": bad header: ", sax.error.empty() ? "not valid JSON" : sax.error);
  MINIDL_CHECK(sax.root.is_object(), where, ": bad header: not a JSON object (got ", sax.root.type_name(), ")");

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, v] : sax.root.items()) {
    if (name == kMetadataKey) {
      file.metadata = check_metadata(v, where);
    } else {
      entries.push_back(check_entry(name, v, data_size, where));
    }
  }
  check_coverage(entries, data_size, where);

  // Only now, with every byte accounted for, allocate and copy.
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype, Device::cpu()));
    if (e.end > e.begin) std::memcpy(t.raw_data(), body + e.begin, e.end - e.begin);
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

}  // namespace

std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata) {
  const char* op = "serialize_safetensors: ";
  // Contiguous CPU copies first, so the offsets below are the exact byte counts.
  std::vector<std::pair<const std::string*, Tensor>> host;
  for (const auto& [name, t] : tensors) {
    MINIDL_CHECK(name != kMetadataKey, op, "'", kMetadataKey, "' is reserved for the metadata, not a tensor name");
    MINIDL_CHECK(t.defined(), op, "tensor '", name, "' is undefined");
    host.emplace_back(&name, t.detach().cpu().contiguous());
  }

  // ordered_json keeps insertion order: metadata first, then tensors by name, each entry
  // as dtype, shape, data_offsets (the order Python's safetensors writes).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header[kMetadataKey] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : host) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype(t.dtype());
    entry["shape"] = t.shape().vec();
    entry["data_offsets"] = {offset, offset + bytes};
    header[*name] = std::move(entry);
    offset += bytes;
  }
  std::string json;
  try {
    json = header.dump();  // strict: throws on a name or metadata string that is not UTF-8
  } catch (const nlohmann::ordered_json::exception& ex) {
    throw Error(detail::make_message(op, "cannot write the header: ", ex.what()));
  }
  // Pad with spaces so the data section starts 8-byte aligned (as the reference writer does).
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  for (const auto& [name, t] : host) {
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    if (bytes > 0) out.append(static_cast<const char*>(t.raw_data()), bytes);
  }
  return out;
}

SafetensorsFile parse_safetensors(const unsigned char* data, size_t size, const std::string& name) {
  return parse(data, size, "parse_safetensors: " + name);
}

void save_safetensors(const TensorMap& tensors, const std::string& path, const Metadata& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string where = "load_safetensors: " + path;
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  // Opened without blocking: open(2) of a FIFO with no writer would wait forever. Anything but
  // a regular file (a FIFO, a folder, a device such as /dev/zero) is refused before any read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  MINIDL_CHECK(fd >= 0, where, ": cannot open: ", std::strerror(errno));
  std::unique_ptr<std::FILE, FileCloser> f(::fdopen(fd, "rb"));
  if (f == nullptr) ::close(fd);
  MINIDL_CHECK(f != nullptr, where, ": cannot open: ", std::strerror(errno));
  struct stat st;
  MINIDL_CHECK(::fstat(fd, &st) == 0, where, ": cannot stat: ", std::strerror(errno));
  const char* kind = S_ISDIR(st.st_mode)                          ? "a folder"
                     : S_ISFIFO(st.st_mode)                         ? "a FIFO"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "a special file";
  MINIDL_CHECK(S_ISREG(st.st_mode), where, ": not a regular file (", kind, "); expected a safetensors file");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a regular file reads the same either way
  std::vector<unsigned char> bytes(static_cast<size_t>(st.st_size));
  const size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f.get());
  MINIDL_CHECK(!std::ferror(f.get()), where, ": read error: ", std::strerror(errno));
  MINIDL_CHECK(got == bytes.size(), where, ": read ", got, " of ", bytes.size(), " bytes (the file shrank)");
  return parse(bytes.data(), bytes.size(), where);
}

}  // namespace minidl::io
