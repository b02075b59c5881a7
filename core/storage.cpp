// CPU allocator and Storage construction.
#include "core/storage.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace minidl {
namespace {

constexpr size_t kAlignment = 64;

// Note [the CPU block cache]
// Small training steps allocate and free dozens of tiny tensors; aligned_alloc goes through
// glibc's memalign path, which costs more than the seed model's arithmetic. Blocks up to
// 1 MiB are rounded to a power of two and kept on a per-thread free list (at most
// kBlocksPerClass each), so steady-state steps do not call malloc at all. Larger blocks go
// straight to the system. A block freed on another thread joins that thread's lists.
// Under AddressSanitizer the cache is off, so that a use after free is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUseBlockCache = false;
#else
constexpr bool kUseBlockCache = true;
#endif
class BlockCache {
 public:
  static constexpr int kMinClass = 6;   // 64 bytes
  static constexpr int kMaxClass = 20;  // 1 MiB
  static constexpr size_t kBlocksPerClass = 32;

  static int size_class(size_t bytes) {
    int c = kMinClass;
    while ((size_t{1} << c) < bytes) ++c;
    return c;
  }

  void* take(int c) {
    auto& list = lists_[c - kMinClass];
    if (list.count == 0) return nullptr;
    return list.blocks[--list.count];
  }
  bool give(int c, void* p) {
    auto& list = lists_[c - kMinClass];
    if (list.count == kBlocksPerClass) return false;
    list.blocks[list.count++] = p;
    return true;
  }
  ~BlockCache() {
    alive = false;
    for (auto& list : lists_)
      for (size_t i = 0; i < list.count; ++i) std::free(list.blocks[i]);
  }

  static thread_local bool alive;  // false once this thread's cache is destroyed

 private:
  struct List {
    void* blocks[kBlocksPerClass];
    size_t count = 0;
  };
  List lists_[kMaxClass - kMinClass + 1];
};
thread_local bool BlockCache::alive = true;

BlockCache& block_cache() {
  static thread_local BlockCache cache;
  return cache;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    const bool cached = kUseBlockCache && bytes <= (size_t{1} << BlockCache::kMaxClass) && BlockCache::alive;
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;  // aligned_alloc wants a multiple
    if (cached) {
      const int c = BlockCache::size_class(bytes);
      if (void* p = block_cache().take(c)) return p;
      rounded = size_t{1} << c;
    }
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (p == nullptr) throw OutOfMemory(detail::make_message("cpu allocator: failed to allocate ", bytes, " bytes"));
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    if (kUseBlockCache && bytes <= (size_t{1} << BlockCache::kMaxClass) && BlockCache::alive &&
        block_cache().give(BlockCache::size_class(bytes), ptr))
      return;
    std::free(ptr);
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

Storage::Storage(size_t bytes, Device device, Allocator& allocator)
    : bytes_(bytes), device_(device), allocator_(&allocator) {
  void* p = allocator.allocate(bytes);
  Allocator* a = &allocator;
  data_ = std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
}

}  // namespace minidl
