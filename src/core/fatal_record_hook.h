// One hook of check_failed() (core/error.h), apart so that error.h, which
// nearly every file includes, stays as it is.
#pragma once

namespace ratchet {

// Run by check_failed() first, with the library ("cuda", "mpi", "assert", ...)
// and its message: the hang watchdog's fatal record (train/fatal_record.h),
// which tells the Slurm wrapper which rank died and of what.
void set_fatal_record_hook(void (*hook)(const char* lib, const char* detail));

}  // namespace ratchet
