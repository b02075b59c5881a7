// Checks of the files a sample's command line names, made before any work starts: an input
// must be a regular, readable file of a sane size (a FIFO would block the first read forever,
// a folder or /dev/zero fails or never ends deep inside a reader), an existing output must be
// a regular file too, and no output may name the same file as an input (--checkpoint equal to --data would overwrite the training text). Each
// failure is a minidl::Error naming the flag, the path, what it is and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidl::samples {

// A flag and the path it was given ("--data", "input.txt"); an empty path is "not given".
struct PathFlag {
  std::string flag;
  std::string path;
};

// The path must name a regular file (symbolic links followed) that this process can open for
// reading, of at most max_bytes bytes; `limit_reason` says where the limit comes from ("the
// text and its tokens are held in memory"). A FIFO is never opened: its type is read with
// stat() first, and the test open uses O_NONBLOCK.
void check_input_file(const std::string& path, const std::string& flag, uint64_t max_bytes = UINT64_MAX,
                      const std::string& limit_reason = "");

// An output that already exists must be a regular file, which the write replaces: a FIFO
// would block the write forever, and a folder or a device (/dev/null included: an atomic
// write renames its new file over the path) cannot take a file's place. A path that does not
// exist yet is fine here (the trainers check its folder). An empty path is skipped.
void check_output_file(const std::string& path, const std::string& flag);

// The folder an output goes to must exist and be writable, and the path must name a file in
// it, not a folder: checked before training, not found out at the first save. Empty: skipped.
void check_output_folder(const std::string& path, const std::string& flag);

// No output may name the same file as an input, nor as another output. Two paths name the
// same file when both exist with the same device and inode (hard links, symbolic links), or,
// when either is missing, when their normalised absolute paths (weakly_canonical: "./a.txt"
// and "a.txt", a link in a folder above) are equal. Entries with an empty path are skipped.
void check_no_alias(const std::vector<PathFlag>& outputs, const std::vector<PathFlag>& inputs);

// The memory this process may still allocate, in bytes: Linux's MemAvailable (/proc/meminfo),
// else free pages times the page size (sysconf); 0 when neither can be read (unknown).
uint64_t available_memory_bytes();

// "1.5 GiB", "512.0 MiB", "4.0 KiB", "12 bytes": a size for a message.
std::string format_bytes(double bytes);

}  // namespace minidl::samples
