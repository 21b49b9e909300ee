// HDF5 helpers for the data layer: the H5_CHECK macro, an owning handle, and
// the file-access settings every reader uses.
//
// A failing HDF5 call on a user's file (a shard that is truncated, not HDF5,
// missing a dataset) is a user-facing error, not a bug: H5_CHECK throws
// ratchet::Error whose message is the caller's context (which names the file
// and the object) followed by HDF5's own innermost error description:
//   hid_t d = H5_CHECK(H5Dopen2(f, "/tokens", H5P_DEFAULT),
//                      "cannot read /tokens from ", path);
//   -> "cannot read /tokens from data/x.h5: object 'tokens' doesn't exist (...)"
// HDF5's automatic error printing to stderr is switched off (h5_init), so the
// message above is the only thing the user sees.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/error.h"

namespace ratchet {

// Idempotent; call before the first HDF5 call (every function here does).
// Silences HDF5's stderr error printing and, on HDF5 < 1.10.7, disables file
// locking through HDF5_USE_FILE_LOCKING=FALSE. In a thread-safe HDF5 build
// the error-printing setting is per thread: call it in every thread that
// uses HDF5 (the loader's prefetch thread does).
void h5_init();

// The innermost entry of the current thread's HDF5 error stack as one line,
// e.g. "file signature not found (Not an HDF5 file)"; clears the stack.
std::string h5_error_message();

// Throws Error(context..., ": ", h5_error_message()) when `result` < 0
// (every HDF5 id and herr_t signals failure by a negative value); returns
// `result` otherwise so that ids can be checked inline.
template <typename R, typename... Ctx>
R h5_check(R result, const Ctx&... context) {
  if (result < 0) fail(context..., ": ", h5_error_message());
  return result;
}
#define H5_CHECK(call, ...) ::ratchet::h5_check((call), __VA_ARGS__)

// Owns one HDF5 id (file, dataset, dataspace, type, attribute, plist) and
// closes it with the matching H5?close. Move-only.
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  // Closes now and returns the closer's result (negative on failure: for a
  // file, data that could not be written at close).
  herr_t close() {
    herr_t r = (id_ >= 0 && close_) ? close_(id_) : 0;
    id_ = -1;
    return r;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// A file-access property list for shard files: default driver, file
// locking off (shared/parallel file systems often lack working locks).
H5Handle h5_fapl_no_locking();

// Scalar attributes of `obj` (a file, group or dataset). nullopt when there is
// no attribute `name`: whether that is an error, and how to say so, is the
// caller's business. One that is there but is not a single value of the kind
// asked for fails with
//   <where>: attribute '<name>' is not a single <string|integer|number><hint>
// and one HDF5 cannot read, with "<where>: attribute <name>: <HDF5's message>".
// `where` names the file ("shard data/x.h5"); `hint` tells the user what to
// do, e.g. ": re-shard it".
// Fixed-length (any padding) and variable-length strings; a fixed-length
// string ends at its first NUL.
std::optional<std::string> h5_string_attr(hid_t obj, const char* name, const std::string& where,
                                          const std::string& hint);
// Any integer type, converted by HDF5 to int64_t / uint64_t.
std::optional<int64_t> h5_int_attr(hid_t obj, const char* name, const std::string& where,
                                   const std::string& hint);
std::optional<uint64_t> h5_uint_attr(hid_t obj, const char* name, const std::string& where,
                                     const std::string& hint);
// Any integer or floating-point type, converted to double.
std::optional<double> h5_double_attr(hid_t obj, const char* name, const std::string& where,
                                     const std::string& hint);

}  // namespace ratchet
