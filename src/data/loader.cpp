#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "data/h5_util.h"

namespace ratchet {
namespace {

// splitmix64's finalizer: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The pure part: batch k's contents as a function of its cursor. Used by one
// thread at a time (the prefetch thread, or the caller when not prefetching).
struct BatchMaker {
  const TokenDataset* data;
  int B, T;
  bool shuffle;
  uint64_t seed;
  int rank, world;
  uint64_t N, nwin;
  std::vector<int32_t> buf;  // (T+1)
  // The permutations of the last two epochs used (a batch may span two).
  struct PermCache {
    uint64_t epoch = UINT64_MAX;
    std::vector<uint64_t> order;
  };
  PermCache perm[2];

  const std::vector<uint64_t>& permutation(uint64_t epoch) {
    for (auto& p : perm)
      if (p.epoch == epoch) return p.order;
    // Refill an empty slot, else the one holding the older epoch.
    auto age = [](const PermCache& c) { return c.epoch == UINT64_MAX ? 0 : c.epoch + 1; };
    PermCache& p = age(perm[0]) <= age(perm[1]) ? perm[0] : perm[1];
    p.epoch = epoch;
    p.order.resize(nwin);
    std::iota(p.order.begin(), p.order.end(), uint64_t(0));
    Rng rng(mix64(seed ^ mix64(epoch + 0x5851F42D4C957F2Dull)));
    for (uint64_t i = nwin - 1; i > 0; i--) std::swap(p.order[i], p.order[rng.below(i + 1)]);
    return p.order;
  }

  // First token of global row g of the batch at cursor c.
  uint64_t window_start(const LoaderCursor& c, uint64_t g) {
    if (!shuffle) return (c.position + g * (uint64_t)T) % N;
    uint64_t idx = c.position + g;
    return permutation(c.epoch + idx / nwin)[idx % nwin] * (uint64_t)T;
  }

  // Fills this rank's rows of the batch at `c`; returns the next cursor.
  LoaderCursor make(const LoaderCursor& c, int32_t* inputs, int32_t* targets) {
    const size_t t = (size_t)T;
    for (int b = 0; b < B; b++) {
      uint64_t g = (uint64_t)rank * B + b;
      data->read(window_start(c, g), t + 1, buf.data());
      std::copy_n(buf.begin(), t, inputs + b * t);
      std::copy_n(buf.begin() + 1, t, targets + b * t);
    }
    return advance(c);
  }

  LoaderCursor advance(LoaderCursor c) const {
    const uint64_t rows = (uint64_t)B * world;
    if (shuffle) {
      uint64_t next = c.position + rows;
      c.epoch += next / nwin;
      c.position = next % nwin;
    } else {
      // rows·T may exceed N several times over on a tiny stream.
      uint64_t step = rows * (uint64_t)T;
      uint64_t next = c.position + step % N;
      c.epoch += step / N + next / N;
      c.position = next % N;
    }
    return c;
  }
};

struct DataLoader::Impl {
  BatchMaker maker;
  LoaderOptions opts;
  size_t batch_elems = 0;  // B·T
  LoaderCursor cursor;     // of the next batch handed out
  double wait = 0;
  uint64_t returned = 0;

  // ---- prefetch state (guarded by mu) ----
  struct Slot {
    int32_t* mem = nullptr;  // inputs (B·T) then targets (B·T)
    LoaderCursor after;
    std::exception_ptr error;
  };
  std::vector<Slot> slots;
  size_t head = 0, count = 0;  // ring: `count` ready slots from `head`
  bool held = false;           // the consumer holds slots[head] (a view)
  bool stop = false;
  LoaderCursor produce_at;
  std::mutex mu;
  std::condition_variable cv;
  std::thread worker;
  // Synchronous mode: the view buffer.
  int32_t* sync_mem = nullptr;

  int32_t* alloc(size_t elems) {
    size_t bytes = elems * sizeof(int32_t);
    if (opts.allocator.allocate) {
      void* p = opts.allocator.allocate(bytes);
      if (!p) fail("cannot allocate a ", bytes, "-byte loader buffer");
      return static_cast<int32_t*>(p);
    }
    return new int32_t[elems];
  }
  void free_mem(int32_t* p) {
    if (!p) return;
    if (opts.allocator.release)
      opts.allocator.release(p);
    else
      delete[] p;
  }

  ~Impl() {
    stop_worker();
    for (auto& s : slots) free_mem(s.mem);
    free_mem(sync_mem);
  }

  void stop_worker() {
    if (worker.joinable()) {
      {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
      }
      cv.notify_all();
      worker.join();
    }
    stop = false;
    head = count = 0;
    held = false;
  }

  void start_worker() {
    if (slots.empty()) {
      slots.resize((size_t)opts.prefetch);
      for (auto& s : slots) s.mem = alloc(2 * batch_elems);
    }
    head = count = 0;
    held = false;
    stop = false;
    produce_at = cursor;
    worker = std::thread([this] { run(); });
  }

  void run() {
    h5_init();  // HDF5's error printing is per thread
    std::unique_lock<std::mutex> lk(mu);
    while (true) {
      cv.wait(lk, [&] { return stop || count < slots.size(); });
      if (stop) return;
      Slot& s = slots[(head + count) % slots.size()];
      LoaderCursor at = produce_at;
      lk.unlock();
      std::exception_ptr err;
      LoaderCursor after = at;
      try {
        after = maker.make(at, s.mem, s.mem + batch_elems);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      if (stop) return;
      s.after = after;
      s.error = err;
      produce_at = after;
      count++;
      cv.notify_all();
      if (err) {  // stay parked: the consumer rethrows, then restarts us
        cv.wait(lk, [&] { return stop; });
        return;
      }
    }
  }

  void release_held() {
    if (!held) return;
    {
      std::lock_guard<std::mutex> lk(mu);
      head = (head + 1) % slots.size();
      count--;
      held = false;
    }
    cv.notify_all();
  }

  // The next batch's buffer; advances the cursor.
  int32_t* next() {
    if (opts.prefetch <= 0) {
      if (!sync_mem) sync_mem = alloc(2 * batch_elems);
      double t0 = now_seconds();
      LoaderCursor after = maker.make(cursor, sync_mem, sync_mem + batch_elems);
      wait += now_seconds() - t0;
      cursor = after;
      returned++;
      return sync_mem;
    }
    release_held();
    if (!worker.joinable()) start_worker();
    double t0 = now_seconds();
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return count > 0; });
    wait += now_seconds() - t0;
    Slot& s = slots[head];
    if (s.error) {
      std::exception_ptr err = s.error;
      lk.unlock();
      stop_worker();  // the next call starts over at the same cursor
      std::rethrow_exception(err);
    }
    held = true;
    cursor = s.after;
    returned++;
    return s.mem;
  }
};

DataLoader::DataLoader(const TokenDataset& data, int B, int T, bool shuffle, uint64_t seed,
                       int rank, int world, const LoaderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (B <= 0) fail("batch size B = ", B, " must be at least 1");
  if (T <= 0) fail("sequence length T = ", T, " must be at least 1");
  if (world <= 0 || rank < 0 || rank >= world)
    fail("rank ", rank, " is not inside a world of ", world, " ranks");
  const uint64_t N = data.num_tokens();
  if (N < (uint64_t)T + 1)
    fail(data.flag(), " '", data.pattern(), "' has ", N, " tokens, fewer than the T+1 = ",
         (uint64_t)T + 1, " one window needs: use a smaller --seq-len or more data");
  if (options.prefetch < 0) fail("loader prefetch depth ", options.prefetch, " is negative");
  BatchMaker& m = impl_->maker;
  m.data = &data;
  m.B = B;
  m.T = T;
  m.shuffle = shuffle;
  m.seed = seed;
  m.rank = rank;
  m.world = world;
  m.N = N;
  m.nwin = (N - 1) / (uint64_t)T;
  m.buf.resize((size_t)T + 1);
  impl_->opts = options;
  impl_->batch_elems = (size_t)B * (size_t)T;
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

int DataLoader::B() const { return impl_->maker.B; }
int DataLoader::T() const { return impl_->maker.T; }
bool DataLoader::shuffle() const { return impl_->maker.shuffle; }
LoaderCursor DataLoader::cursor() const { return impl_->cursor; }
double DataLoader::wait_seconds() const { return impl_->wait; }
uint64_t DataLoader::batches_returned() const { return impl_->returned; }

uint64_t DataLoader::windows_per_epoch() const {
  const BatchMaker& m = impl_->maker;
  return m.shuffle ? m.nwin : m.N / (uint64_t)m.T;
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  const int32_t* mem = impl_->next();
  std::memcpy(inputs, mem, impl_->batch_elems * sizeof(int32_t));
  std::memcpy(targets, mem + impl_->batch_elems, impl_->batch_elems * sizeof(int32_t));
  if (impl_->opts.prefetch > 0) impl_->release_held();  // the slot may refill now
}

BatchView DataLoader::next_batch_view() {
  const int32_t* mem = impl_->next();
  return BatchView{mem, mem + impl_->batch_elems};
}

void DataLoader::prefetch() {
  if (impl_->opts.prefetch > 0 && !impl_->worker.joinable()) impl_->start_worker();
}

void DataLoader::reset() {
  // Already at the first batch (nothing handed out since the last reset, or
  // ever): batches prefetched from there are the ones wanted; keep them.
  if (impl_->cursor == LoaderCursor{} && !impl_->held) return;
  impl_->stop_worker();
  impl_->cursor = LoaderCursor{};
}

void DataLoader::set_cursor(const LoaderCursor& c) {
  const BatchMaker& m = impl_->maker;
  uint64_t limit = m.shuffle ? m.nwin : m.N;
  if (c.position >= limit)
    fail("loader position ", c.position, " is past the end (", limit,
         m.shuffle ? " windows" : " tokens", ") of ", m.data->describe(),
         ": resume with the data and sequence length the checkpoint was made with");
  impl_->stop_worker();
  impl_->cursor = c;
}

}  // namespace ratchet
