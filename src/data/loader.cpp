#include "data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace ratchet {
namespace {

// splitmix64's finalizer: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

DataLoader::DataLoader(const TokenDataset& data, int B, int T, bool shuffle, uint64_t seed,
                       int rank, int world)
    : data_(data), B_(B), T_(T), shuffle_(shuffle), seed_(seed), rank_(rank), world_(world),
      N_(data.num_tokens()) {
  if (B <= 0) fail("batch size B = ", B, " must be at least 1");
  if (T <= 0) fail("sequence length T = ", T, " must be at least 1");
  if (world <= 0 || rank < 0 || rank >= world)
    fail("rank ", rank, " is not inside a world of ", world, " ranks");
  if (N_ < (uint64_t)T + 1)
    fail(data.flag(), " '", data.pattern(), "' has ", N_, " tokens, fewer than the T+1 = ",
         (uint64_t)T + 1, " one window needs: use a smaller --seq-len or more data");
  nwin_ = (N_ - 1) / (uint64_t)T;
  buf_.resize((size_t)T + 1);
}

uint64_t DataLoader::windows_per_epoch() const { return shuffle_ ? nwin_ : N_ / (uint64_t)T_; }

const std::vector<uint64_t>& DataLoader::permutation(uint64_t epoch) const {
  for (auto& p : perm_)
    if (p.epoch == epoch) return p.order;
  // Refill an empty slot, else the one holding the older epoch.
  auto age = [](const PermCache& c) { return c.epoch == UINT64_MAX ? 0 : c.epoch + 1; };
  PermCache& p = age(perm_[0]) <= age(perm_[1]) ? perm_[0] : perm_[1];
  p.epoch = epoch;
  p.order.resize(nwin_);
  std::iota(p.order.begin(), p.order.end(), uint64_t(0));
  Rng rng(mix64(seed_ ^ mix64(epoch + 0x5851F42D4C957F2Dull)));
  for (uint64_t i = nwin_ - 1; i > 0; i--) std::swap(p.order[i], p.order[rng.below(i + 1)]);
  return p.order;
}

uint64_t DataLoader::window_start(uint64_t g) const {
  if (!shuffle_) return (cursor_.position + g * (uint64_t)T_) % N_;
  uint64_t idx = cursor_.position + g;
  return permutation(cursor_.epoch + idx / nwin_)[idx % nwin_] * (uint64_t)T_;
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  const size_t T = (size_t)T_;
  for (int b = 0; b < B_; b++) {
    uint64_t g = (uint64_t)rank_ * B_ + b;
    data_.read(window_start(g), T + 1, buf_.data());
    std::copy_n(buf_.begin(), T, inputs + b * T);
    std::copy_n(buf_.begin() + 1, T, targets + b * T);
  }
  const uint64_t rows = (uint64_t)B_ * world_;
  if (shuffle_) {
    uint64_t next = cursor_.position + rows;
    cursor_.epoch += next / nwin_;
    cursor_.position = next % nwin_;
  } else {
    // rows·T may exceed N several times over on a tiny stream.
    uint64_t step = rows * (uint64_t)T_;
    uint64_t next = cursor_.position + step % N_;
    cursor_.epoch += step / N_ + next / N_;
    cursor_.position = next % N_;
  }
}

void DataLoader::set_cursor(const LoaderCursor& c) {
  uint64_t limit = shuffle_ ? nwin_ : N_;
  if (c.position >= limit)
    fail("loader position ", c.position, " is past the end (", limit,
         shuffle_ ? " windows" : " tokens", ") of ", data_.describe(),
         ": resume with the data and sequence length the checkpoint was made with");
  cursor_ = c;
}

}  // namespace ratchet
