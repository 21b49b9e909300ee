#include "data/h5_util.h"

#include <cstdlib>
#include <mutex>

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

}  // namespace ratchet
