#include "data/chunk_reader.h"

#include <libdeflate.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace ratchet {
namespace {

constexpr size_t kDefaultCacheBytes = size_t(1) << 20;  // HDF5's default chunk cache

// HDF5's shuffle filter stores byte j of element i at j*n + i (n elements of
// `size` bytes; bytes past n*size are copied as they are): this undoes it.
void unshuffle(const uint8_t* in, size_t bytes, int size, uint8_t* out) {
  const size_t n = bytes / (size_t)size;
  for (int j = 0; j < size; j++)
    for (size_t i = 0; i < n; i++) out[i * size + j] = in[j * n + i];
  std::memcpy(out + n * size, in + n * size, bytes - n * size);
}

}  // namespace

std::unique_ptr<ChunkReader> ChunkReader::open(hid_t tokens, const std::string& path) {
  H5Handle dcpl(H5Dget_create_plist(tokens), H5Pclose);
  H5Handle type(H5Dget_type(tokens), H5Tclose);
  H5Handle space(H5Dget_space(tokens), H5Sclose);
  if (dcpl < 0 || type < 0 || space < 0 || H5Pget_layout(dcpl) != H5D_CHUNKED ||
      H5Sget_simple_extent_ndims(space) != 1)
    return nullptr;
  // Native little-endian unsigned 16 or 32 bits: the stored bytes are the values.
  int token_bytes = 0;
  if (H5Tequal(type, H5T_STD_U16LE) > 0 && H5Tequal(H5T_NATIVE_UINT16, H5T_STD_U16LE) > 0)
    token_bytes = 2;
  else if (H5Tequal(type, H5T_STD_U32LE) > 0 && H5Tequal(H5T_NATIVE_UINT32, H5T_STD_U32LE) > 0)
    token_bytes = 4;
  if (token_bytes == 0) return nullptr;
  hsize_t dims[1] = {0}, cdims[1] = {0};
  if (H5Sget_simple_extent_dims(space, dims, nullptr) < 0 || H5Pget_chunk(dcpl, 1, cdims) != 1 ||
      cdims[0] == 0)
    return nullptr;
  // Filters: shuffle then deflate, each optional, nothing else.
  int shuffle = -1, deflate = -1;
  const int n = H5Pget_nfilters(dcpl);
  if (n < 0 || n > 2) return nullptr;
  for (int i = 0; i < n; i++) {
    unsigned flags = 0, cd[4] = {0, 0, 0, 0};
    size_t ncd = 4;
    const H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, 0, nullptr, nullptr);
    if (f == H5Z_FILTER_SHUFFLE && i == 0 && (ncd == 0 || cd[0] == (unsigned)token_bytes))
      shuffle = i;
    else if (f == H5Z_FILTER_DEFLATE && deflate < 0)
      deflate = i;
    else
      return nullptr;
  }
  return std::unique_ptr<ChunkReader>(
      new ChunkReader(tokens, path, cdims[0], dims[0], token_bytes, shuffle, deflate));
}

ChunkReader::ChunkReader(hid_t tokens, std::string path, uint64_t chunk_tokens,
                         uint64_t num_tokens, int token_bytes, int shuffle_index,
                         int deflate_index)
    : tokens_(tokens),
      path_(std::move(path)),
      chunk_tokens_(chunk_tokens),
      num_tokens_(num_tokens),
      token_bytes_(token_bytes),
      shuffle_index_(shuffle_index),
      deflate_index_(deflate_index) {
  set_cache_bytes(0);
}

ChunkReader::~ChunkReader() {
  if (inflater_) libdeflate_free_decompressor(inflater_);
}

void ChunkReader::set_cache_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  const size_t chunk_bytes = (size_t)chunk_tokens_ * (size_t)token_bytes_;
  capacity_ = std::max<size_t>(1, (bytes ? bytes : kDefaultCacheBytes) / chunk_bytes);
  while (lru_.size() > capacity_) {
    where_.erase(lru_.back().index);
    lru_.pop_back();
  }
}

const std::vector<uint8_t>& ChunkReader::chunk(uint64_t index) const {
  auto it = where_.find(index);
  if (it != where_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // now the most recent
    return lru_.front().bytes;
  }
  std::vector<uint8_t> bytes;
  if (lru_.size() >= capacity_) {  // reuse the least recent chunk's buffer
    bytes = std::move(lru_.back().bytes);
    where_.erase(lru_.back().index);
    lru_.pop_back();
  }
  decode(index, &bytes);
  decoded_++;
  lru_.push_front(Entry{index, std::move(bytes)});
  where_[index] = lru_.begin();
  return lru_.front().bytes;
}

void ChunkReader::decode(uint64_t index, std::vector<uint8_t>* bytes) const {
  const size_t chunk_bytes = (size_t)chunk_tokens_ * (size_t)token_bytes_;
  bytes->resize(chunk_bytes);
  const uint64_t first = index * chunk_tokens_;
  const std::string where = "chunk " + std::to_string(index) + " (tokens [" +
                            std::to_string(first) + ", " +
                            std::to_string(std::min(first + chunk_tokens_, num_tokens_)) +
                            ")) of /tokens in shard " + path_;
  hsize_t offset[1] = {first};
  hsize_t stored = 0;
  H5_CHECK(H5Dget_chunk_storage_size(tokens_, offset, &stored), "cannot read ", where);
  if (stored == 0) {  // never written: what H5Dread returns for it (fill values)
    const uint64_t n = std::min(chunk_tokens_, num_tokens_ - first);
    H5Handle fspace(H5_CHECK(H5Dget_space(tokens_), "cannot read ", where), H5Sclose);
    hsize_t off[1] = {first}, cnt[1] = {n};
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, nullptr, cnt, nullptr),
             "cannot read ", where);
    H5Handle mspace(H5_CHECK(H5Screate_simple(1, cnt, nullptr), "cannot read ", where), H5Sclose);
    H5_CHECK(H5Dread(tokens_, token_bytes_ == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32, mspace,
                     fspace, H5P_DEFAULT, bytes->data()),
             "cannot read ", where);
    return;
  }
  raw_.resize(stored);
  uint32_t skipped = 0;  // bit i set: filter i was not applied to this chunk
  H5_CHECK(H5Dread_chunk(tokens_, H5P_DEFAULT, offset, &skipped, raw_.data()), "cannot read ",
           where);
  const bool inflate = deflate_index_ >= 0 && !(skipped & (1u << deflate_index_));
  const bool shuffled = shuffle_index_ >= 0 && !(skipped & (1u << shuffle_index_));
  const uint8_t* data = raw_.data();
  if (inflate) {
    if (!inflater_) inflater_ = libdeflate_alloc_decompressor();
    if (!inflater_) fail("cannot allocate a decompressor to read ", where);
    uint8_t* dst = shuffled ? (inflated_.resize(chunk_bytes), inflated_.data()) : bytes->data();
    size_t got = 0;
    // Checks the stream's Adler-32 as zlib does: a damaged chunk is an error.
    const libdeflate_result r =
        libdeflate_zlib_decompress(inflater_, raw_.data(), raw_.size(), dst, chunk_bytes, &got);
    if (r != LIBDEFLATE_SUCCESS || got != chunk_bytes)
      fail("cannot read ", where, ": ",
           r == LIBDEFLATE_SUCCESS ? "it inflates to " + std::to_string(got) + " bytes, not " +
                                         std::to_string(chunk_bytes)
           : r == LIBDEFLATE_INSUFFICIENT_SPACE ? std::string("it inflates to more than the chunk size")
                                                : std::string("its compressed data are damaged (inflate failed)"),
           "; the shard is corrupt: re-shard it");
    data = dst;
  } else if (stored != chunk_bytes) {
    fail("cannot read ", where, ": it holds ", stored, " bytes, not ", chunk_bytes,
         "; the shard is corrupt: re-shard it");
  } else if (!shuffled) {
    std::memcpy(bytes->data(), data, chunk_bytes);
  }
  if (shuffled) unshuffle(data, chunk_bytes, token_bytes_, bytes->data());
}

template <typename Out>
void ChunkReader::read_as(uint64_t start, uint64_t count, Out* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  while (count > 0) {
    const uint64_t index = start / chunk_tokens_, off = start % chunk_tokens_;
    const size_t n = (size_t)std::min<uint64_t>(count, chunk_tokens_ - off);
    const uint8_t* p = chunk(index).data() + off * token_bytes_;
    if (token_bytes_ == 2) {
      for (size_t i = 0; i < n; i++) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = (Out)v;
      }
    } else {
      for (size_t i = 0; i < n; i++) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        // H5Dread's uint32 -> int32 conversion clamps to INT32_MAX.
        if (sizeof(Out) == 4 && (Out)-1 < 0 && v > (uint32_t)INT32_MAX) v = (uint32_t)INT32_MAX;
        out[i] = (Out)v;
      }
    }
    out += n;
    start += n;
    count -= n;
  }
}

void ChunkReader::read(uint64_t start, uint64_t count, uint32_t* out) const {
  read_as(start, count, out);
}
void ChunkReader::read(uint64_t start, uint64_t count, int32_t* out) const {
  read_as(start, count, out);
}

}  // namespace ratchet
