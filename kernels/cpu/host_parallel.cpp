// minidl::host_parallel_for and host_threads (declared in core/host_parallel.h) on the CPU
// kernels' ThreadPool: the layers above core get a parallel loop without including kernels/.
#include "core/host_parallel.h"

#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"

namespace minidl {

int host_threads() { return cpu::ThreadPool::instance().max_threads(); }

void host_parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  // n / grain parts at most, so that every slice holds at least `grain` items.
  const int parts = static_cast<int>(std::clamp<int64_t>(n / grain, 1, pool.max_threads()));
  if (parts == 1) {
    body(0, n);
    return;
  }
  pool.run(parts, [&](int part, int count) {
    const auto [begin, end] = cpu::slice_of(n, part, count);
    body(begin, end);
  });
}

}  // namespace minidl
