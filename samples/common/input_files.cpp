// The samples' checks of the files their flags name (input_files.h): stat() before any open, so
// a FIFO, a folder or a device is described instead of read.
#include "samples/common/input_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace minidl::samples {

namespace {

// What a non-regular file is, for "... is <this>; expected a regular file".
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The normalised absolute form of a path that may not exist (yet).
std::filesystem::path normalised(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) p = std::filesystem::absolute(path, ec).lexically_normal();
  return p;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return normalised(a) == normalised(b);
}

}  // namespace

void check_input_file(const std::string& path, const std::string& flag, uint64_t max_bytes,
                      const std::string& limit_reason) {
  MINIDL_CHECK(!path.empty(), flag, ": the path is empty; expected a file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    MINIDL_CHECK(err != ENOENT, flag, " ", path, " does not exist; expected a readable file");
    throw Error(detail::make_message(flag, " ", path, " cannot be examined: ", std::strerror(err),
                                     "; expected a readable file"));
  }
  MINIDL_CHECK(S_ISREG(st.st_mode), flag, " ", path, " is ", kind_of(st.st_mode), "; expected a regular file");
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open returns at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(detail::make_message(flag, " ", path, " cannot be opened for reading: ", std::strerror(err)));
  }
  struct stat opened {};
  const bool ok = ::fstat(fd, &opened) == 0;
  ::close(fd);
  MINIDL_CHECK(ok && S_ISREG(opened.st_mode), flag, " ", path, " is ", ok ? kind_of(opened.st_mode) : "unreadable",
               "; expected a regular file");
  const auto size = static_cast<uint64_t>(opened.st_size);
  MINIDL_CHECK(size <= max_bytes, flag, " ", path, " is ", format_bytes(static_cast<double>(size)), " (", size,
               " bytes); expected at most ", format_bytes(static_cast<double>(max_bytes)),
               limit_reason.empty() ? "" : " (", limit_reason, limit_reason.empty() ? "" : ")");
}

void check_output_file(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return;  // missing: written afresh
  MINIDL_CHECK(S_ISREG(st.st_mode), flag, " ", path, " is ", kind_of(st.st_mode),
               "; expected a regular file to replace or a new path");
}

void check_output_folder(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  MINIDL_CHECK(!p.filename().empty() && !std::filesystem::is_directory(p, ec), flag, " ", path,
               " names a folder; expected a file path");
  MINIDL_CHECK(std::filesystem::is_directory(dir, ec), flag, " ", path, ": the folder ", dir.string(),
               " does not exist (create it first)");
  MINIDL_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, flag, " ", path, ": the folder ", dir.string(),
               " is not writable: ", std::strerror(errno));
}

void check_no_alias(const std::vector<PathFlag>& outputs, const std::vector<PathFlag>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const PathFlag& out = outputs[i];
    if (out.path.empty()) continue;
    for (const PathFlag& in : inputs) {
      if (in.path.empty()) continue;
      MINIDL_CHECK(!same_file(out.path, in.path), out.flag, " ", out.path, " names the same file as ", in.flag, " ",
                   in.path, "; an output must not overwrite an input (give ", out.flag, " another path)");
    }
    for (size_t j = 0; j < i; ++j) {
      const PathFlag& other = outputs[j];
      if (other.path.empty()) continue;
      MINIDL_CHECK(!same_file(out.path, other.path), out.flag, " ", out.path, " names the same file as ", other.flag,
                   " ", other.path, "; each output needs a file of its own (give ", out.flag, " another path)");
    }
  }
}

uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return value * 1024;  // the kernel reports kB (KiB)
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string format_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (bytes >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  else if (bytes >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  return buf;
}

}  // namespace minidl::samples
