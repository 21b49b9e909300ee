// Hugging Face safetensors files: reader and writer, with validation.
//
// Format (https://huggingface.co/docs/safetensors):
//   u64 little-endian N | N bytes of JSON header | data section
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (byte offsets into the data section, end exclusive) and may
// hold "__metadata__": {string: string}. Tensors are raw little-endian,
// row-major. As in the reference implementation, the tensors must tile the
// data section exactly: sorted by offset, no overlap, no gap, nothing after.
//
// A sharded checkpoint is a directory with model.safetensors.index.json
// ({"metadata": {...}, "weight_map": {tensor: shard file}}) next to the shards.
//
// dtypes: F32 and BF16 are read and written; F16 is read. Everything is
// returned as FP32. Every error is a ratchet::Error naming the file and, where
// there is one, the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"

namespace ratchet {

enum class StDtype { F32, BF16, F16 };

const char* st_dtype_name(StDtype d);   // "F32", "BF16", "F16"
size_t st_dtype_bytes(StDtype d);       // 4, 2, 2

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
};

// One validated .safetensors file (the header only is kept in memory).
class SafetensorsFile {
 public:
  // Reads and validates the header against the file's size. Throws Error.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }  // by offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StTensor* find(const std::string& name) const;  // nullptr when absent
  // Reads `t` (one of tensors()) converted to FP32 into out (t.numel() floats).
  void read_f32(const StTensor& t, float* out) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint: one .safetensors file, or a directory holding either
// model.safetensors.index.json and its shards or a single model.safetensors.
// Throws Error when `path` is a symbolic link whose target does not exist,
// saying where it points (not "missing": the file is there, its target is not).
void check_not_dangling(const std::string& path);

class SafetensorsCheckpoint {
 public:
  // Throws Error naming the index, a missing shard, a tensor the index and
  // its shard disagree on, or a tensor found in two files.
  explicit SafetensorsCheckpoint(const std::string& path);

  const std::string& path() const { return path_; }
  // What a reader should be told about the choice of files ("" when there
  // was none): a directory with both model.safetensors and an index is read
  // as transformers reads it, from model.safetensors alone.
  const std::string& note() const { return note_; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  // The tensor and the file that holds it; nullptr when absent.
  const StTensor* find(const std::string& name, const SafetensorsFile** file = nullptr) const;

 private:
  std::string path_, note_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const StTensor*>> where_;
};

// A tensor to write: FP32 data, converted to the file's dtype on the way out.
struct StWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // prod(shape) floats
};

// Writes one .safetensors file atomically (temp file, fsync, rename), in the
// given order with contiguous offsets; the header is padded with spaces to a
// multiple of 8 bytes (as the reference writer does). dtype F32 or BF16
// (round to nearest even). Throws Error naming the file.
void write_safetensors(const std::string& path, const std::vector<StWrite>& tensors,
                       StDtype dtype, const std::map<std::string, std::string>& metadata);

// Writes `tensors` into directory `dir` (which must exist): one
// model.safetensors when they fit in max_shard_bytes, else
// model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json.
// Every file is written as NAME.partial first and renamed into place only when
// all are written (so an error such as a full disk leaves an earlier export in
// dir as it was). Returns the file names written.
std::vector<std::string> write_safetensors_checkpoint(
    const std::string& dir, const std::vector<StWrite>& tensors, StDtype dtype,
    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes);

// A JSON file of a checkpoint (the index, config.json), refused when larger
// than a safetensors header may be (100 MB): a damaged or foreign file must
// not be parsed into many GB of memory. Throws Error naming the file.
nlohmann::json read_checkpoint_json(const std::string& path);

// FP32 <-> 16-bit conversions (exposed for tests).
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even; NaN stays NaN
float f16_to_f32(uint16_t h);

}  // namespace ratchet
