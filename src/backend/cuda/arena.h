// The bookkeeping of the cuda backend's arena (Backend::use_arena): a
// first-fit allocator over the offsets [0, size) of one device block, with
// every block rounded to `align` bytes and free neighbours merged on release.
//
// Why an arena: with one cudaMalloc sized by the memory accounting, a run
// that needs more memory than the accounting says fails at once, naming the
// request, instead of succeeding on a large device and running out on a
// smaller one (or, with the caching of a growing allocator, late in a run).
// The model's allocations are few and long-lived (parameters, gradients,
// moments, master copies, activations, scratch), so first fit over a map of
// free ranges costs nothing that matters.
//
// Pure host code on offsets (the backend adds the base pointer), so that it
// can be tested without a device.
#pragma once
#include <cstddef>
#include <iterator>
#include <map>

namespace ratchet::cuda {

class Arena {
 public:
  static constexpr size_t npos = ~size_t(0);

  Arena() = default;
  Arena(size_t bytes, size_t align) : size_(bytes / align * align), align_(align) {
    if (size_) free_[0] = size_;
  }

  size_t size() const { return size_; }
  size_t used() const { return used_; }
  size_t round(size_t bytes) const { return (bytes + align_ - 1) / align_ * align_; }

  // Offset of a free block of round(bytes) bytes, the lowest that fits; npos
  // when no free range is large enough.
  size_t take(size_t bytes) {
    const size_t want = round(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < want) continue;
      const size_t off = it->first, left = it->second - want;
      free_.erase(it);
      if (left) free_[off + want] = left;
      used_ += want;
      return off;
    }
    return npos;
  }

  // Returns the block [off, off + round(bytes)) taken by take(); merges it
  // with the free ranges that touch it, so that freed neighbours form one
  // range again.
  void give(size_t off, size_t bytes) {
    size_t len = round(bytes);
    used_ -= len;
    auto next = free_.lower_bound(off);
    if (next != free_.end() && off + len == next->first) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += len;
        return;
      }
    }
    free_[off] = len;
  }

  size_t largest_free() const {
    size_t m = 0;
    for (auto& [off, len] : free_) m = len > m ? len : m;
    return m;
  }
  size_t free_ranges() const { return free_.size(); }

 private:
  size_t size_ = 0, align_ = 256, used_ = 0;
  std::map<size_t, size_t> free_;  // offset -> length, disjoint, never adjacent
};

}  // namespace ratchet::cuda
