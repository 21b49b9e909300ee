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
#include "data/mixture.h"

namespace ratchet {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The pure part: batch k's contents as a function of its cursor. Used by one
// thread at a time (the prefetch thread, or the caller when not prefetching).
struct BatchMaker {
  // One source's stream and its order of windows.
  struct Source {
    const TokenDataset* data = nullptr;
    uint64_t N = 0, nwin = 0;  // tokens; windows per epoch, (N-1)/T
    uint64_t seed = 0;         // of its permutations
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
    // First token of this source's k-th window (k counts from its start).
    uint64_t window(uint64_t k, bool shuffle, int T) {
      if (shuffle) return permutation(k / nwin)[k % nwin] * (uint64_t)T;
      return (uint64_t)((unsigned __int128)k * (uint64_t)T % N);
    }
  };

  std::vector<Source> src;            // one, or a mixture's sources
  std::unique_ptr<MixtureDraw> draw;  // a mixture's draw; null for one source
  int B, T;
  bool shuffle;
  uint64_t seed;
  int rank, world;
  uint64_t N, nwin;          // of source 0
  std::vector<int32_t> buf;  // (T+1)

  // First token of global row g of the batch at cursor c (one source).
  uint64_t window_start(const LoaderCursor& c, uint64_t g) {
    if (!shuffle) return (c.position + g * (uint64_t)T) % N;
    uint64_t idx = c.position + g;
    return src[0].permutation(c.epoch + idx / nwin)[idx % nwin] * (uint64_t)T;
  }

  void read_row(const TokenDataset& d, uint64_t start, int b, int32_t* inputs, int32_t* targets) {
    const size_t t = (size_t)T;
    d.read(start, t + 1, buf.data());
    std::copy_n(buf.begin(), t, inputs + b * t);
    std::copy_n(buf.begin() + 1, t, targets + b * t);
  }

  // Fills this rank's rows of the batch at `c`; returns the next cursor.
  LoaderCursor make(const LoaderCursor& c, int32_t* inputs, int32_t* targets) {
    if (draw) return make_mixed(c, inputs, targets);
    for (int b = 0; b < B; b++) {
      uint64_t g = (uint64_t)rank * B + b;
      read_row(*src[0].data, window_start(c, g), b, inputs, targets);
    }
    return advance(c);
  }

  // A mixture: every rank draws the sources of all B·W rows (cheap hashes),
  // so that it knows each source's count before its own rows and after the
  // batch; it reads only its own rows.
  LoaderCursor make_mixed(const LoaderCursor& c, int32_t* inputs, int32_t* targets) {
    LoaderCursor next = c;
    const uint64_t rows = (uint64_t)B * world, first = (uint64_t)rank * B;
    for (uint64_t g = 0; g < rows; g++) {
      const size_t s = draw->source_of(c.position + g);
      const uint64_t k = next.source_rows[s]++;
      if (g >= first && g < first + (uint64_t)B)
        read_row(*src[s].data, src[s].window(k, shuffle, T), (int)(g - first), inputs, targets);
    }
    next.position = c.position + rows;
    return next;
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

  // Rows drawn from source s before cursor c.
  uint64_t rows_drawn(const LoaderCursor& c, size_t s) const {
    if (draw) return c.source_rows.at(s);
    if (shuffle) return c.epoch * nwin + c.position;
    // Sequential: the cursor is at token R·T of the unwrapped stream.
    return (uint64_t)(((unsigned __int128)c.epoch * N + c.position) / (uint64_t)T);
  }

  int running_out(const LoaderCursor& c, uint64_t rows) const {
    // The end of the epoch each source's last drawn window belongs to.
    std::vector<uint64_t> k(src.size()), end(src.size());
    for (size_t s = 0; s < src.size(); s++) {
      k[s] = rows_drawn(c, s);
      end[s] = k[s] == 0 ? src[s].nwin : ((k[s] - 1) / src[s].nwin + 1) * src[s].nwin;
    }
    if (!draw) return k[0] + rows > end[0] ? 0 : -1;
    for (uint64_t g = 0; g < rows; g++) {
      const size_t s = draw->source_of(c.position + g);
      if (++k[s] > end[s]) return (int)s;
    }
    return -1;
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

namespace {

void check_geometry(const TokenDataset& data, int B, int T, int rank, int world,
                    const LoaderOptions& options) {
  if (B <= 0) fail("batch size B = ", B, " must be at least 1");
  if (T <= 0) fail("sequence length T = ", T, " must be at least 1");
  if (world <= 0 || rank < 0 || rank >= world)
    fail("rank ", rank, " is not inside a world of ", world, " ranks");
  const uint64_t N = data.num_tokens();
  if (N < (uint64_t)T + 1)
    fail(data.flag(), " '", data.pattern(), "' has ", N, " tokens, fewer than the T+1 = ",
         (uint64_t)T + 1, " one window needs: use a smaller --seq-len or more data");
  if (options.prefetch < 0) fail("loader prefetch depth ", options.prefetch, " is negative");
}

}  // namespace

DataLoader::DataLoader(const TokenDataset& data, int B, int T, bool shuffle, uint64_t seed,
                       int rank, int world, const LoaderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  check_geometry(data, B, T, rank, world, options);
  BatchMaker& m = impl_->maker;
  m.src.resize(1);
  m.src[0].data = &data;
  m.src[0].N = data.num_tokens();
  m.src[0].nwin = (m.src[0].N - 1) / (uint64_t)T;
  m.src[0].seed = seed;
  m.B = B;
  m.T = T;
  m.shuffle = shuffle;
  m.seed = seed;
  m.rank = rank;
  m.world = world;
  m.N = m.src[0].N;
  m.nwin = m.src[0].nwin;
  m.buf.resize((size_t)T + 1);
  impl_->opts = options;
  impl_->batch_elems = (size_t)B * (size_t)T;
}

DataLoader::DataLoader(const DataMixture& mix, int B, int T, bool shuffle, uint64_t seed,
                       int rank, int world, const LoaderOptions& options)
    : DataLoader(mix.source(0), B, T, shuffle, seed, rank, world, options) {
  if (mix.size() == 1) return;  // one source: the loader above, bit for bit
  BatchMaker& m = impl_->maker;
  m.src.resize(mix.size());
  for (size_t s = 0; s < mix.size(); s++) {
    const TokenDataset& d = mix.source(s);
    check_geometry(d, B, T, rank, world, options);
    m.src[s].data = &d;
    m.src[s].N = d.num_tokens();
    m.src[s].nwin = (m.src[s].N - 1) / (uint64_t)T;
    m.src[s].seed = mix64(seed ^ mix64(0x736F757263650000ull + s));  // its own shuffle stream
    m.src[s].perm[0] = m.src[s].perm[1] = {};
  }
  m.draw = std::make_unique<MixtureDraw>(mix.weights(), seed);
  impl_->cursor.source_rows.assign(mix.size(), 0);
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
  LoaderCursor first;
  if (impl_->maker.draw) first.source_rows.assign(impl_->maker.src.size(), 0);
  // Already at the first batch (nothing handed out since the last reset, or
  // ever): batches prefetched from there are the ones wanted; keep them.
  if (impl_->cursor == first && !impl_->held) return;
  impl_->stop_worker();
  impl_->cursor = first;
}

int DataLoader::source_running_out(uint64_t rows) const {
  return impl_->maker.running_out(impl_->cursor, rows);
}

uint64_t DataLoader::rows_drawn(const LoaderCursor& c, size_t s) const {
  return impl_->maker.rows_drawn(c, s);
}

size_t DataLoader::num_sources() const { return impl_->maker.src.size(); }

void DataLoader::set_cursor(const LoaderCursor& c) {
  const BatchMaker& m = impl_->maker;
  if (m.draw || !c.source_rows.empty()) {
    // A mixture's cursor: a count per source, summing to the rows drawn.
    uint64_t sum = 0;
    for (uint64_t k : c.source_rows) sum += k;
    if (c.source_rows.size() != m.src.size() || c.epoch != 0 || sum != c.position)
      fail("the data cursor (", c.source_rows.size(), " source(s), ", sum, " of ", c.position,
           " rows) does not fit --train-data's ", m.src.size(),
           " source(s): resume with the --train-data the checkpoint was made with");
    impl_->stop_worker();
    impl_->cursor = c;
    return;
  }
  uint64_t limit = m.shuffle ? m.nwin : m.N;
  if (c.position >= limit)
    fail("loader position ", c.position, " is past the end (", limit,
         m.shuffle ? " windows" : " tokens", ") of ", m.src[0].data->describe(),
         ": resume with the data and sequence length the checkpoint was made with");
  impl_->stop_worker();
  impl_->cursor = c;
}

}  // namespace ratchet
