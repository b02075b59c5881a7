// CPU allocator and Storage construction.
#include "core/storage.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace minidl {
namespace {

class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;

  void* allocate(size_t bytes) override {
    // aligned_alloc wants a size that is a multiple of the alignment (and > 0 for a unique pointer).
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (p == nullptr) throw OutOfMemory(detail::make_message("cpu allocator: failed to allocate ", bytes, " bytes"));
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

Storage::Storage(size_t bytes, Device device, Allocator& allocator) : bytes_(bytes), device_(device) {
  void* p = allocator.allocate(bytes);
  Allocator* a = &allocator;
  data_ = std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
}

}  // namespace minidl
