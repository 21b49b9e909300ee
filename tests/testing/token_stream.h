// The DataLoader tests' stream (test_loader.cpp, test_loader_prefetch.cpp):
// the token at position i is i % 1000 (vocab 1000, so position i is i for
// streams shorter than that), cut into two shards at `split`, so that reads
// cross a shard boundary; train_000.h5 holds one document starting at 0.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/token_dataset.h"
#include "data_tools/shard_writer.h"
#include "testing/test_util.h"

namespace ratchet::testing {

struct TokenStream {
  TempDir dir;
  std::unique_ptr<TokenDataset> data;
  TokenStream(uint32_t n, uint32_t split, size_t chunk_tokens = shard_format::kChunkTokens) {
    std::vector<uint32_t> a, b;
    for (uint32_t i = 0; i < n; i++) (i < split ? a : b).push_back(i % 1000);
    ShardMeta meta{"test", 1000, 999};
    write_shard(dir / "train_000.h5", meta, a, {0}, chunk_tokens);
    if (!b.empty()) write_shard(dir / "train_001.h5", meta, b, {}, chunk_tokens);
    data = std::make_unique<TokenDataset>(dir / "train_*.h5", "--train-data");
  }
};

}  // namespace ratchet::testing
