// One-off host work on large buffers, spread over the machine's cores: model
// initialisation and the cast before an upload are tens of seconds on one
// core at 7B parameters (olmoe-1b-7b's start-up on an H200,
// bench/gpu/results/2026-11-30-h200/window4/moe-train.log).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace ratchet {

// Calls f(i) once for every i in [0, n), on up to max_threads threads (the
// calling one included; never more than the hardware's, and fewer when the
// system will not start more), in no set order.
// f must not throw. Each f(i) should be worth a thread's start: a few
// million elements.
template <class F>
void parallel_pieces(size_t n, F&& f, size_t max_threads = 64) {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t nthreads = std::min({hw, n, max_threads});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
  };
  std::vector<std::thread> threads;
  try {
    for (size_t t = 1; t < nthreads; t++) threads.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads to be had (a job's process limit): the ones started and
    // this one take every piece all the same.
  }
  work();
  for (auto& t : threads) t.join();
}

// parallel_pieces over [0, total) cut into ranges of at most `piece`:
// f(lo, hi) once per range.
template <class F>
void parallel_ranges(size_t total, size_t piece, F&& f, size_t max_threads = 64) {
  const size_t n = (total + piece - 1) / piece;
  parallel_pieces(n, [&](size_t i) { f(i * piece, std::min(total, (i + 1) * piece)); },
                  max_threads);
}

}  // namespace ratchet
