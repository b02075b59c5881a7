// Atomic file replacement, for checkpoints: a crash or an error at any moment leaves either
// the complete old file or the complete new one at `path`, never a torn mix.
#pragma once

#include <string>
#include <string_view>

namespace minidl::io {

// Replaces `path` with `bytes`: writes a temporary file in the same folder (mkstemp, so it
// is on the same filesystem and rename is atomic), fsyncs and closes it, renames it over
// `path`, then fsyncs the folder so the rename itself is durable. A new file gets mode 0644
// (mkstemp's 0600 would hide it from other users); an existing file keeps its mode. On any
// failure before the rename the temporary file is removed, the old file is untouched, and a
// minidl::Error naming the path, the step and the strerror text is thrown.
// The temporary is named ".<name>.tmp.<host>-<pid>.XXXXXX"; a writer that was killed before
// its rename leaves it behind, and the next write of `path` removes such files whose writer
// process is gone (only this machine's and this user's; never a live writer's).
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace minidl::io
