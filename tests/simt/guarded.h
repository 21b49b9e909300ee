// Host buffers with guard regions on both sides, for kernels run under simt:
// a kernel that writes out of bounds changes a guard byte and check() says so.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ratchet::testing {

template <class T>
class Guarded {
 public:
  static constexpr size_t kGuardBytes = 256;
  static constexpr unsigned char kPattern = 0xA5;

  explicit Guarded(size_t n = 0) { resize(n); }
  void resize(size_t n) {
    n_ = n;
    buf_.assign(2 * kGuardBytes + n * sizeof(T) + 16, kPattern);
    // kGuardBytes before the data, 16-byte aligned data.
    uintptr_t base = reinterpret_cast<uintptr_t>(buf_.data()) + kGuardBytes;
    off_ = ((base + 15) & ~uintptr_t(15)) - reinterpret_cast<uintptr_t>(buf_.data());
    std::memset(data(), 0, n * sizeof(T));
  }
  T* data() { return reinterpret_cast<T*>(buf_.data() + off_); }
  const T* data() const { return reinterpret_cast<const T*>(buf_.data() + off_); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }

  // "" if both guards are intact, else which side and offset changed first.
  std::string check() const {
    const unsigned char* lo = buf_.data();
    for (size_t i = 0; i < off_; i++)
      if (lo[i] != kPattern)
        return "guard before the buffer overwritten at byte -" + std::to_string(off_ - i);
    size_t end = off_ + n_ * sizeof(T);
    for (size_t i = end; i < buf_.size(); i++)
      if (buf_[i] != kPattern)
        return "guard after the buffer overwritten at byte +" + std::to_string(i - end) +
               " past the end";
    return "";
  }

 private:
  size_t n_ = 0, off_ = 0;
  std::vector<unsigned char> buf_;
};

}  // namespace ratchet::testing
