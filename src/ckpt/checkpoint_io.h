// Helpers the checkpoint files share (checkpoint.cpp, checkpoint_shards.cpp):
// checksums, durable writes, room checks and the HDF5 attributes they carry.
// Internal to src/ckpt/.
#pragma once
#include <hdf5.h>

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet::ckpt_io {

extern const char* kStateFile;         // "state.h5"
extern const char* kTensorNames[3];    // "params", "adam_m", "adam_v"
extern const char* kMoeBiasDataset;    // "moe_selection_bias" (CheckpointMeta::moe_bias)

// zlib crc32 of `count` floats; crc_update continues a running one (start 0).
uint32_t crc_of(const float* data, size_t count);
uint32_t crc_update(uint32_t crc, const void* data, size_t count_floats);
uint32_t crc_bytes(uint32_t crc, const void* data, size_t bytes);
// crc32 of a whole file, read in 64 KB blocks (an Error naming it if unreadable).
uint32_t file_crc(const std::string& path);

void fsync_path(const std::string& path);
// Fails (naming the free space or the ulimit -f) before anything is written
// when `need` bytes cannot fit in `dir`.
void check_room(const std::string& dir, uint64_t need);

void put_i64(hid_t o, const char* n, int64_t v, const std::string& ctx);
void put_u64(hid_t o, const char* n, uint64_t v, const std::string& ctx);
void put_str(hid_t o, const char* n, const std::string& v, const std::string& ctx);
// Required attributes: absent is an Error naming the attribute.
int64_t get_i64(hid_t o, const char* n, const std::string& ctx);
uint64_t get_u64(hid_t o, const char* n, const std::string& ctx);
std::string get_str(hid_t o, const char* n, const std::string& ctx);

// Member `key` of a manifest object as a whole number in [0, max]; anything
// else (absent, negative, fractional, 1e300, a string) is an Error naming
// `ctx` and the key. nlohmann's get<uint64_t>() would convert a huge float
// with undefined behaviour (found by tests/fuzz/fuzz_ckpt_manifest.cpp).
uint64_t json_uint(const nlohmann::json& j, const char* key, uint64_t max, const std::string& ctx);

}  // namespace ratchet::ckpt_io
