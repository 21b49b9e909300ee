#include "data/h5_util.h"

#include <cstdlib>
#include <mutex>
#include <optional>

namespace ratchet {

void h5_init() {
  static std::once_flag once;
  thread_local bool this_thread = false;
  if (!this_thread) {
    this_thread = true;
    std::call_once(once, [] {
#if !H5_VERSION_GE(1, 10, 7)
      // No H5Pset_file_locking before 1.10.7; the library reads this variable
      // when it opens a file. Respect a value the user set explicitly.
      setenv("HDF5_USE_FILE_LOCKING", "FALSE", /*overwrite=*/0);
#endif
      // No library teardown at exit: a file whose close failed (disk full
      // mid-write) stays in HDF5's id table, and H5_term_library crashes on
      // it. Every file ratchet writes is closed (and fsynced) explicitly.
      H5dont_atexit();
      H5open();
    });
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
}

namespace {
herr_t keep_innermost(unsigned, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<std::string*>(out);
  char minor[256] = "";
  H5Eget_msg(e->min_num, nullptr, minor, sizeof minor);
  *s = e->desc ? e->desc : "";
  if (minor[0]) *s += std::string(" (") + minor + ")";
  return 0;  // keep walking: the last entry seen (walking downward) is the innermost
}
}  // namespace

std::string h5_error_message() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  return msg.empty() ? std::string("unknown HDF5 error") : msg;
}

H5Handle h5_fapl_no_locking() {
  h5_init();
  H5Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "cannot create an HDF5 file-access list"),
                H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  H5_CHECK(H5Pset_file_locking(fapl, /*use_file_locking=*/false,
                               /*ignore_when_disabled=*/true),
           "cannot disable HDF5 file locking");
#endif
  return fapl;
}

namespace {

// An open attribute and its file type.
struct ScalarAttr {
  H5Handle attr, type;
};

// nullopt when the attribute is absent; Error when it is there but not a
// single value of class `cls` (or `alt`; `what` names them in the message).
std::optional<ScalarAttr> open_scalar_attr(hid_t obj, const char* name, const std::string& where,
                                           const std::string& hint, const char* what,
                                           H5T_class_t cls, H5T_class_t alt = H5T_NO_CLASS) {
  h5_init();
  if (H5_CHECK(H5Aexists(obj, name), where, ": attribute ", name) <= 0) return std::nullopt;
  H5Handle attr(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT), where, ": attribute ", name),
                H5Aclose);
  H5Handle type(H5_CHECK(H5Aget_type(attr), where, ": attribute ", name), H5Tclose);
  H5Handle space(H5_CHECK(H5Aget_space(attr), where, ": attribute ", name), H5Sclose);
  const H5T_class_t c = H5Tget_class(type);
  if ((c != cls && c != alt) || H5Sget_simple_extent_npoints(space) != 1)
    fail(where, ": attribute '", name, "' is not a single ", what, hint);
  return ScalarAttr{std::move(attr), std::move(type)};
}

// The attribute as `mem_type` (HDF5 converts) into a T.
template <typename T>
std::optional<T> read_number(hid_t obj, const char* name, const std::string& where,
                             const std::string& hint, hid_t mem_type, bool integer_only) {
  auto a = integer_only
               ? open_scalar_attr(obj, name, where, hint, "integer", H5T_INTEGER)
               : open_scalar_attr(obj, name, where, hint, "number", H5T_FLOAT, H5T_INTEGER);
  if (!a) return std::nullopt;
  T v{};
  H5_CHECK(H5Aread(a->attr, mem_type, &v), where, ": attribute ", name);
  return v;
}

}  // namespace

std::optional<std::string> h5_string_attr(hid_t obj, const char* name, const std::string& where,
                                          const std::string& hint) {
  auto a = open_scalar_attr(obj, name, where, hint, "string", H5T_STRING);
  if (!a) return std::nullopt;
  H5Handle mem(H5_CHECK(H5Tcopy(H5T_C_S1), where, ": attribute ", name), H5Tclose);
  H5_CHECK(H5Tset_cset(mem, H5Tget_cset(a->type)), where, ": attribute ", name);
  std::string value;
  if (H5Tis_variable_str(a->type) > 0) {
    H5_CHECK(H5Tset_size(mem, H5T_VARIABLE), where, ": attribute ", name);
    char* s = nullptr;
    H5_CHECK(H5Aread(a->attr, mem, &s), where, ": attribute ", name);
    if (s) value = s;
    H5free_memory(s);
  } else {
    // NULLPAD: a NULLTERM memory type of the file's size would drop the last
    // character of a string that fills it (h5py's and the checkpoint's do).
    size_t n = H5Tget_size(a->type);
    H5_CHECK(H5Tset_size(mem, n), where, ": attribute ", name);
    H5_CHECK(H5Tset_strpad(mem, H5T_STR_NULLPAD), where, ": attribute ", name);
    std::string buf(n, '\0');
    H5_CHECK(H5Aread(a->attr, mem, buf.data()), where, ": attribute ", name);
    value = buf.substr(0, buf.find('\0'));
  }
  return value;
}

std::optional<int64_t> h5_int_attr(hid_t obj, const char* name, const std::string& where,
                                   const std::string& hint) {
  return read_number<int64_t>(obj, name, where, hint, H5T_NATIVE_INT64, true);
}
std::optional<uint64_t> h5_uint_attr(hid_t obj, const char* name, const std::string& where,
                                     const std::string& hint) {
  return read_number<uint64_t>(obj, name, where, hint, H5T_NATIVE_UINT64, true);
}
std::optional<double> h5_double_attr(hid_t obj, const char* name, const std::string& where,
                                     const std::string& hint) {
  return read_number<double>(obj, name, where, hint, H5T_NATIVE_DOUBLE, false);
}

}  // namespace ratchet
