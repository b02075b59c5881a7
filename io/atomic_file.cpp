// write_file_atomically: temp file + fsync + rename + fsync of the folder (POSIX), and the
// removal of the temporaries that earlier, killed writers of the same file left behind.
#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace minidl::io {

namespace {

std::string errno_text() { return std::strerror(errno); }

// The folder holding `path` ("." for a bare file name) and the file name itself.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  if (slash == 0) return {"/", path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

// This machine's name as it goes into a temporary file's name: [A-Za-z0-9.-] kept, others '_'.
std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown-host";
  std::string host(buf);
  for (char& c : host)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) c = '_';
  return host;
}

// Note [temporaries of killed writers]: a writer killed between mkstemp and rename (kill -9,
// a power cut) leaves its temporary file behind, and nothing else would ever remove it. So a
// temporary is named ".<name>.tmp.<host>-<pid>.XXXXXX": it says which process on which machine
// wrote it. Before each write, the temporaries of the same target whose writer was this
// machine's, is gone (kill(pid, 0) fails with ESRCH), and which belong to this user are
// removed. Anything else stays: a live writer's (this process's included), one from another
// machine sharing the folder, a file of another user or of another name. A pid reused by a new
// process only keeps a dead writer's file a while longer.
void remove_temporaries_of_dead_writers(const std::string& dir, const std::string& base, const std::string& host) {
  const std::string prefix = "." + base + ".tmp." + host + "-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;  // the write that follows reports a folder it cannot use
  std::vector<std::string> dead;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    // <prefix><pid>.XXXXXX: digits, a dot, then mkstemp's six characters.
    if (name.size() < prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const std::string pid_text = rest.substr(0, rest.size() - 7);
    if (rest[rest.size() - 7] != '.' || pid_text.empty() || pid_text.size() > 9 ||
        pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const auto pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    dead.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& path : dead) {
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) ::unlink(path.c_str());
  }
}

// Owns the temporary file until it has been renamed: the destructor closes and removes it,
// so every early exit (an exception from any step) cleans up.
class TempFile {
 public:
  explicit TempFile(std::string name_template) : name_(name_template.begin(), name_template.end()) {
    name_.push_back('\0');
    fd_ = ::mkstemp(name_.data());
    exists_ = fd_ >= 0;
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (exists_ && !renamed_) ::unlink(name_.data());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  bool created() const { return exists_; }
  int fd() const { return fd_; }
  const char* name() const { return name_.data(); }
  // Closes the descriptor, reporting close's error (NFS reports write errors there).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void mark_renamed() { renamed_ = true; }

 private:
  std::vector<char> name_;
  int fd_ = -1;
  bool exists_ = false;   // mkstemp made the file
  bool renamed_ = false;  // it is at `path` now: nothing to remove
};

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const char* op = "write_file_atomically: ";
  MINIDL_CHECK(!path.empty(), op, "empty path");
  const auto [dir, base] = split_path(path);
  MINIDL_CHECK(!base.empty(), op, path, ": the path names a folder, not a file");

  // Note [temporaries of killed writers]. A name too long for the pid falls back to the bare
  // mkstemp form, which is never removed by a later write.
  const std::string host = host_name();
  remove_temporaries_of_dead_writers(dir, base, host);
  std::string tmp_name = "." + base + ".tmp." + host + "-" + std::to_string(::getpid()) + ".XXXXXX";
  if (tmp_name.size() > NAME_MAX) tmp_name = "." + base + ".tmp.XXXXXX";
  TempFile tmp(dir + "/" + tmp_name);
  MINIDL_CHECK(tmp.created(), op, path, ": cannot create a temporary file in ", dir, ": ", errno_text());

  // Keep an existing file's mode; a new one gets 0644 rather than mkstemp's 0600.
  struct stat old_stat;
  const mode_t mode = ::stat(path.c_str(), &old_stat) == 0 ? (old_stat.st_mode & 07777) : 0644;
  MINIDL_CHECK(::fchmod(tmp.fd(), mode) == 0, op, path, ": cannot set the mode of ", tmp.name(), ": ", errno_text());

  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(tmp.fd(), p, left);
    if (n < 0 && errno == EINTR) continue;
    MINIDL_CHECK(n > 0, op, path, ": writing ", bytes.size(), " bytes to ", tmp.name(), " failed after ",
                 bytes.size() - left, ": ", n < 0 ? errno_text() : std::string("write returned 0"));
    p += n;
    left -= static_cast<size_t>(n);
  }
  MINIDL_CHECK(::fsync(tmp.fd()) == 0, op, path, ": fsync of ", tmp.name(), " failed: ", errno_text());
  MINIDL_CHECK(tmp.close() == 0, op, path, ": closing ", tmp.name(), " failed: ", errno_text());
  MINIDL_CHECK(::rename(tmp.name(), path.c_str()) == 0, op, "cannot rename ", tmp.name(), " to ", path, ": ",
               errno_text());
  tmp.mark_renamed();

  // Make the rename durable. The new file is in place by now, so the message says so.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  MINIDL_CHECK(dir_fd >= 0, op, path, " was written, but opening its folder ", dir, " to fsync it failed: ",
               errno_text());
  const int rc = ::fsync(dir_fd);
  const std::string why = rc == 0 ? "" : errno_text();
  ::close(dir_fd);
  MINIDL_CHECK(rc == 0, op, path, " was written, but fsync of its folder ", dir, " failed: ", why);
}

}  // namespace minidl::io
