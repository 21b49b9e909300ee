// Reading any checkpoint (formats 1, 2 and 3) piece by piece: which file and
// dataset holds each element of the parameters and moments, a verification
// that reads every byte once with bounded memory, and the reads a resuming
// rank needs (all parameters, only its own ranges of the moments).
//
// Memory: the reader itself holds only the file map. verify() holds one block
// of kVerifyBlock floats (4 MB) at a time, whatever the checkpoint's size;
// read() writes straight into the caller's buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_shards.h"
#include "model/param_layout.h"

namespace ratchet {

constexpr size_t kVerifyBlock = 1 << 20;  // floats per read in verify()

class CheckpointReader {
 public:
  // Reads the metadata and checks the structure without reading tensor data:
  // format 3's manifest (files present with the sizes and checksums it lists,
  // a shard per entry, the ranges tiling [0, P) exactly, each shard's header
  // agreeing with it), format 2's optimizer shards tiling [0, P). Throws
  // Error naming the file and the first problem.
  explicit CheckpointReader(const std::string& dir);

  const CheckpointMeta& meta() const { return meta_; }
  const std::string& dir() const { return dir_; }
  size_t num_params() const { return P_; }
  int format_version() const { return version_; }
  const std::vector<ShardFileInfo>& shards() const { return shards_; }  // format 3
  // Bytes of tensor data in the files (all formats).
  uint64_t tensor_bytes() const;

  // Elements [lo, hi) of tensor t (0 params, 1 adam_m, 2 adam_v) into out
  // (hi - lo floats); opens only the files that hold them. No checksum
  // (a partial read cannot check one): verify() first, or trust a caller that did.
  void read(int t, uint64_t lo, uint64_t hi, float* out) const;

  // Reads every dataset once in blocks, checks its crc32 and that each value
  // is finite (naming the tensor, as first_non_finite() does). Throws Error.
  // verify(part, parts): only the datasets whose index % parts == part, so
  // that `parts` ranks verify a checkpoint together, each a share of it.
  void verify(int part = 0, int parts = 1) const;

 private:
  struct Segment {  // dataset elements [off, off + hi - lo) hold [lo, hi) of tensor t
    std::string path;
    int t = 0;
    uint64_t off = 0, lo = 0, hi = 0;
  };
  struct Dataset {  // one dataset verify() checks whole
    std::string path;
    int t = 0;
    uint64_t n = 0;
    uint32_t crc = 0;
  };
  void open_v1_v2();
  void open_v3();

  std::string dir_;
  CheckpointMeta meta_;
  size_t P_ = 0;
  int version_ = 1;
  std::vector<Segment> segs_;  // sorted by (t, lo)
  std::vector<Dataset> datasets_;
  std::vector<ShardFileInfo> shards_;
};

// first_non_finite()'s wording for element i (value v) of the flat parameter
// vector: "tensor 'wte' holds nan at element 5 (of 8192)".
std::string describe_param_value(const ParamLayout& layout, uint64_t i, float v);

// The parameters only (adam_m/adam_v left empty), after verify(): for
// export and evaluation, which never need the moments (2/3 of the bytes).
Checkpoint read_checkpoint_params(const std::string& dir);

// A rank's part: the parameters of `param_ranges` and the moments of
// `moment_ranges`, each back to back (empty: all of them). An expert slice
// reads only its own experts' weights (qwen3-30b-a3b's whole model is 122 GB
// of FP32 on every rank otherwise). Reads without checksums (see read()).
Checkpoint read_checkpoint_part(const CheckpointReader& r, const FlatRanges& moment_ranges,
                                const FlatRanges& param_ranges = {});

}  // namespace ratchet
