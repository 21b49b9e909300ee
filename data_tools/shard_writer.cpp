#include "data_tools/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include <libdeflate.h>

#include "core/error.h"
#include "data/h5_util.h"

namespace ratchet {
namespace fs = std::filesystem;
namespace {

constexpr int kDeflateLevel = 4;
// Threads per ShardStreamWriter compressing chunks (in background mode): two
// keep up with two tokenizing threads even for byte (one token per byte).
constexpr int kWriterThreads = 2;  // H5Pset_deflate's level for every shard dataset

// HDF5 (Debian's build is not thread-safe) is entered by one thread at a time:
// the shard streams' background threads hold this around every HDF5 call.
std::mutex g_h5;

// fsync a file or directory by path. Returns errno of a failed fsync (0 on
// success, or when the file system does not support it).
int sync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return (rc == EINVAL || rc == EROFS) ? 0 : rc;
}

void write_string_array_attr(hid_t obj, const char* name, const std::vector<std::string>& values,
                             const std::string& path) {
  H5Handle type(H5_CHECK(H5Tcopy(H5T_C_S1), "cannot write attribute ", name, " to ", path),
                H5Tclose);
  H5_CHECK(H5Tset_size(type, H5T_VARIABLE), "cannot write attribute ", name, " to ", path);
  H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8), "cannot write attribute ", name, " to ", path);
  hsize_t dims[1] = {values.size()};
  H5Handle space(H5_CHECK(H5Screate_simple(1, dims, nullptr), "cannot write attribute ", name,
                          " to ", path),
                 H5Sclose);
  H5Handle attr(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT),
                         "cannot write attribute ", name, " to ", path),
                H5Aclose);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (!ptrs.empty())
    H5_CHECK(H5Awrite(attr, type, ptrs.data()), "cannot write attribute ", name, " to ", path);
}

// A chunked, shuffled, deflated 1-D dataset of n elements (chunks of
// min(n, chunk), at least 1), as every shard dataset is.
H5Handle create_1d(hid_t file, const char* name, hid_t file_type, uint64_t n, size_t chunk,
                   const std::string& path) {
  hsize_t dims[1] = {n};
  hsize_t maxdims[1] = {H5S_UNLIMITED};  // lets a chunk exceed a short dataset (and n == 0)
  hsize_t chunk_dims[1] = {std::max<hsize_t>(1, std::min<hsize_t>(n, chunk))};
  H5Handle space(H5_CHECK(H5Screate_simple(1, dims, maxdims), "cannot write /", name, " to ", path),
                 H5Sclose);
  H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "cannot write /", name, " to ", path),
                H5Pclose);
  H5_CHECK(H5Pset_chunk(dcpl, 1, chunk_dims), "cannot write /", name, " to ", path);
  // No modification times in object headers: the same tokens give the same bytes.
  H5_CHECK(H5Pset_obj_track_times(dcpl, false), "cannot write /", name, " to ", path);
  H5_CHECK(H5Pset_shuffle(dcpl), "cannot write /", name, " to ", path);
  H5_CHECK(H5Pset_deflate(dcpl, kDeflateLevel), "cannot write /", name, " to ", path);
  return H5Handle(H5_CHECK(H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                           "cannot write /", name, " to ", path),
                  H5Dclose);
}

void write_1d(hid_t file, const char* name, hid_t file_type, hid_t mem_type, const void* data,
              uint64_t n, size_t chunk, const std::string& path) {
  H5Handle dset = create_1d(file, name, file_type, n, chunk, path);
  if (n > 0)
    H5_CHECK(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "cannot write /",
             name, " to ", path);
}

void write_string_attr(hid_t obj, const char* name, const std::string& value,
                       const std::string& path) {
  H5Handle type(H5_CHECK(H5Tcopy(H5T_C_S1), "cannot write attribute ", name, " to ", path),
                H5Tclose);
  H5_CHECK(H5Tset_size(type, H5T_VARIABLE), "cannot write attribute ", name, " to ", path);
  H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8), "cannot write attribute ", name, " to ", path);
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR), "cannot write attribute ", name, " to ", path),
                 H5Sclose);
  H5Handle attr(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT),
                         "cannot write attribute ", name, " to ", path),
                H5Aclose);
  const char* s = value.c_str();
  H5_CHECK(H5Awrite(attr, type, &s), "cannot write attribute ", name, " to ", path);
}

void write_scalar_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type,
                       const void* value, const std::string& path) {
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR), "cannot write attribute ", name, " to ", path),
                 H5Sclose);
  H5Handle attr(H5_CHECK(H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                         "cannot write attribute ", name, " to ", path),
                H5Aclose);
  H5_CHECK(H5Awrite(attr, mem_type, value), "cannot write attribute ", name, " to ", path);
}

H5Handle create_file(const std::string& tmp, const std::string& path) {
  H5Handle fapl = h5_fapl_no_locking();
  return H5Handle(H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl),
                           "cannot create shard ", path, " (as ", tmp, ")"),
                  H5Fclose);
}

hid_t token_file_type(const ShardMeta& meta) {
  return meta.vocab_size > shard_format::kMaxVocab16 ? H5T_STD_U32LE : H5T_STD_U16LE;
}

// Everything after /tokens: /doc_offsets, the attributes, flush and close.
void finish_file(H5Handle& file, const std::string& path, const ShardMeta& meta,
                 uint64_t num_tokens, const std::vector<uint64_t>& doc_offsets, size_t chunk_tokens,
                 const ShardProvenance* prov, uint64_t max_token) {
  namespace sf = shard_format;
  write_1d(file, sf::kDocOffsets, H5T_STD_U64LE, H5T_NATIVE_UINT64, doc_offsets.data(),
           doc_offsets.size(), chunk_tokens, path);

  const int version = sf::kVersion;
  const uint64_t num_docs = doc_offsets.size();
  write_string_attr(file, sf::kAttrFormat, sf::kFormat, path);
  write_scalar_attr(file, sf::kAttrVersion, H5T_STD_I32LE, H5T_NATIVE_INT, &version, path);
  write_string_attr(file, sf::kAttrTokenizer, meta.tokenizer, path);
  write_scalar_attr(file, sf::kAttrVocab, H5T_STD_I32LE, H5T_NATIVE_INT, &meta.vocab_size, path);
  write_scalar_attr(file, sf::kAttrEot, H5T_STD_I32LE, H5T_NATIVE_INT, &meta.eot_token, path);
  write_scalar_attr(file, sf::kAttrNumTokens, H5T_STD_U64LE, H5T_NATIVE_UINT64, &num_tokens,
                    path);
  write_scalar_attr(file, sf::kAttrNumDocuments, H5T_STD_U64LE, H5T_NATIVE_UINT64, &num_docs,
                    path);
  if (num_tokens > 0)
    write_scalar_attr(file, sf::kAttrMaxToken, H5T_STD_U64LE, H5T_NATIVE_UINT64, &max_token, path);
  if (meta.framed) {
    const int add_bos = meta.add_bos, add_eos = meta.add_eos;
    write_scalar_attr(file, sf::kAttrAddBos, H5T_STD_I32LE, H5T_NATIVE_INT, &add_bos, path);
    write_scalar_attr(file, sf::kAttrAddEos, H5T_STD_I32LE, H5T_NATIVE_INT, &add_eos, path);
    if (meta.bos_token >= 0)
      write_scalar_attr(file, sf::kAttrBos, H5T_STD_I32LE, H5T_NATIVE_INT, &meta.bos_token, path);
  }
  if (!meta.tokenizer_sha256.empty())
    write_string_attr(file, sf::kAttrTokenizerJsonSha256, meta.tokenizer_sha256, path);
  if (prov) {
    if (!prov->tool_version.empty())
      write_string_attr(file, sf::kAttrToolVersion, prov->tool_version, path);
    if (!prov->source_files.empty()) {
      write_string_array_attr(file, sf::kAttrSourceFiles, prov->source_files, path);
      write_string_array_attr(file, sf::kAttrSourceSha256, prov->source_sha256, path);
    }
    if (!prov->tokenizer_files.empty()) {
      write_string_array_attr(file, sf::kAttrTokenizerFiles, prov->tokenizer_files, path);
      write_string_array_attr(file, sf::kAttrTokenizerSha256, prov->tokenizer_sha256, path);
    }
    if (prov->parse_special) {
      const int one = 1;
      write_scalar_attr(file, sf::kAttrParseSpecial, H5T_STD_I32LE, H5T_NATIVE_INT, &one, path);
    }
    if (prov->unk_bytes)
      write_scalar_attr(file, sf::kAttrUnkBytes, H5T_STD_U64LE, H5T_NATIVE_UINT64, &prov->unk_bytes, path);
    if (prov->dropped_chars)
      write_scalar_attr(file, sf::kAttrDroppedChars, H5T_STD_U64LE, H5T_NATIVE_UINT64,
                        &prov->dropped_chars, path);
    if (!prov->dedup.empty()) {
      write_string_attr(file, sf::kAttrDedup, prov->dedup, path);
      write_scalar_attr(file, sf::kAttrDedupIn, H5T_STD_U64LE, H5T_NATIVE_UINT64,
                        &prov->dedup_documents_in, path);
      write_scalar_attr(file, sf::kAttrDedupExact, H5T_STD_U64LE, H5T_NATIVE_UINT64,
                        &prov->dedup_exact_removed, path);
      write_scalar_attr(file, sf::kAttrDedupNear, H5T_STD_U64LE, H5T_NATIVE_UINT64,
                        &prov->dedup_near_removed, path);
      write_scalar_attr(file, sf::kAttrDedupThreshold, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                        &prov->dedup_near_threshold, path);
    }
  }
  H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot write shard ", path);
  H5_CHECK(file.close(), "cannot write shard ", path);
}

void write_file(const std::string& tmp, const std::string& path, const ShardMeta& meta,
                const std::vector<uint32_t>& tokens, const std::vector<uint64_t>& doc_offsets,
                size_t chunk_tokens, const ShardProvenance* prov, uint64_t max_token) {
  H5Handle file = create_file(tmp, path);
  write_1d(file, shard_format::kTokens, token_file_type(meta), H5T_NATIVE_UINT32, tokens.data(),
           tokens.size(), chunk_tokens, path);
  finish_file(file, path, meta, tokens.size(), doc_offsets, chunk_tokens, prov, max_token);
}

std::string temp_name(const std::string& path) {
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  return (dir / ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
}

// Flushes the written temporary file to disk and renames it over `path`.
void commit_file(const std::string& tmp, const std::string& path) {
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (int err = sync_path(tmp))
    fail("cannot write shard ", path, " (as ", tmp, "): ", std::strerror(err));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  sync_path(dir.string());
}

}  // namespace

void write_shard(const std::string& path, const ShardMeta& meta,
                 const std::vector<uint32_t>& tokens, const std::vector<uint64_t>& doc_offsets,
                 size_t chunk_tokens, const ShardProvenance* provenance) {
  if (meta.vocab_size <= 0 || meta.eot_token < 0 || meta.eot_token >= meta.vocab_size)
    fail("cannot write shard ", path, ": eot_token ", meta.eot_token,
         " is not inside vocab_size ", meta.vocab_size);
  if (meta.tokenizer.empty()) fail("cannot write shard ", path, ": the tokenizer name is empty");
  if (meta.bos_token >= meta.vocab_size || (meta.add_bos && meta.bos_token < 0))
    fail("cannot write shard ", path, ": bos_token ", meta.bos_token, " is not inside vocab_size ",
         meta.vocab_size);
  uint64_t max_token = 0;
  for (size_t i = 0; i < tokens.size(); i++) {
    if (tokens[i] >= (uint32_t)meta.vocab_size)
      fail("cannot write shard ", path, ": token ", i, " is ", tokens[i],
           ", outside the vocab of ", meta.vocab_size);
    max_token = std::max<uint64_t>(max_token, tokens[i]);
  }
  if (provenance && provenance->source_files.size() != provenance->source_sha256.size())
    fail("cannot write shard ", path, ": ", provenance->source_files.size(), " source files but ",
         provenance->source_sha256.size(), " checksums");
  for (size_t i = 0; i < doc_offsets.size(); i++)
    if (doc_offsets[i] >= tokens.size() || (i > 0 && doc_offsets[i] <= doc_offsets[i - 1]))
      fail("cannot write shard ", path, ": doc_offsets[", i, "] = ", doc_offsets[i],
           " is not increasing inside [0, ", tokens.size(), ")");
  if (chunk_tokens == 0) fail("cannot write shard ", path, ": chunk size is 0");

  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("cannot write shard ", path, ": directory ", dir.string(), " does not exist");
  std::string tmp = temp_name(path);
  try {
    write_file(tmp, path, meta, tokens, doc_offsets, chunk_tokens, provenance, max_token);
    commit_file(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

// ---- ShardStreamWriter ----------------------------------------------------------
//
// A shard of more than one chunk is written chunk by chunk as its tokens
// arrive: each full chunk (kChunkTokens) is filtered the way the dataset's
// pipeline would (shuffle, then deflate), and stored with H5Dwrite_chunk, on
// a background thread, so the compression runs beside the tokenizing and
// only a chunk or so of the shard is ever in memory. The values stored are
// those H5Dwrite would store; the layout (chunk size, filters) is the same.
// A shard of at most one chunk goes through write_shard(), also in the
// background.

namespace {

// The bytes the filter pipeline of create_1d stores for one chunk of
// `chunk` elements of `esize` bytes (little-endian): HDF5's shuffle (byte j of
// element i at j * chunk + i), then zlib at kDeflateLevel (libdeflate: the
// same zlib stream format, several times faster). Elements past the data
// (the last chunk) are 0, HDF5's fill value.
std::vector<unsigned char> filter_chunk(const std::vector<uint32_t>& v, size_t chunk, int esize,
                                        libdeflate_compressor* z) {
  std::vector<unsigned char> raw(chunk * (size_t)esize, 0);
  for (size_t i = 0; i < v.size(); i++)
    for (int j = 0; j < esize; j++) raw[(size_t)j * chunk + i] = (unsigned char)(v[i] >> (8 * j));
  std::vector<unsigned char> out(libdeflate_zlib_compress_bound(z, raw.size()));
  size_t n = libdeflate_zlib_compress(z, raw.data(), raw.size(), out.data(), out.size());
  if (n == 0) fail("cannot compress a shard chunk (libdeflate)");
  out.resize(n);
  return out;
}

}  // namespace

// The shard being written chunk by chunk. Only the background thread touches
// it after construction. Removes its temporary file unless committed.
struct ShardStreamWriter::OpenShard {
  std::string path, tmp;
  H5Handle file, dset;
  uint64_t written = 0, max_token = 0;
  bool committed = false;
  ~OpenShard() {
    if (committed) return;
    std::lock_guard<std::mutex> lock(g_h5);
    dset.reset();
    file.reset();
    if (!tmp.empty()) std::remove(tmp.c_str());
  }
};

// Threads running jobs: each job's `compute` (shuffle + deflate of a chunk,
// the costly part) runs on any thread as soon as one is free, its `commit`
// (the HDF5 write) in the order the jobs were posted. At most kMaxQueued
// wait (each holds a chunk: bounded memory, and the tokenizer waits when
// compression lags). The first job to throw stops the rest; its error
// reaches the caller at the next post() or drain(). With no threads every
// job runs in post(), on the caller's thread.
struct ShardStreamWriter::Background {
  static constexpr size_t kMaxQueued = 4;
  struct Job {
    std::function<void(libdeflate_compressor*)> compute;
    std::function<void()> commit;
    uint64_t ticket = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  size_t active = 0;
  bool stop = false;
  uint64_t next_ticket = 0, next_commit = 0;
  std::exception_ptr error;
  libdeflate_compressor* inline_z = nullptr;
  std::vector<std::thread> threads;

  explicit Background(int nthreads) {
    if (nthreads <= 0) {
      inline_z = libdeflate_alloc_compressor(kDeflateLevel);
      if (!inline_z) fail("cannot allocate a deflate compressor");
      return;
    }
    for (int i = 0; i < nthreads; i++) threads.emplace_back([this] { run(); });
  }
  ~Background() {
    if (threads.empty()) {
      libdeflate_free_compressor(inline_z);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      jobs.clear();
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
  }
  static void clear_h5_errors() {
    // A failed write leaves entries on this thread's HDF5 error stack (the
    // library keeps one per thread, e.g. from the H5Fclose of a file whose
    // flush failed with EFBIG); nobody reads them after this thread ends,
    // and they would leak with it.
    std::lock_guard<std::mutex> h5(g_h5);
    H5Eclear2(H5E_DEFAULT);
  }
  void run() {
    libdeflate_compressor* z = libdeflate_alloc_compressor(kDeflateLevel);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !jobs.empty(); });
      if (stop) break;
      Job job = std::move(jobs.front());
      jobs.pop_front();
      active++;
      cv.notify_all();  // room in the queue
      lock.unlock();
      std::exception_ptr err;
      try {
        if (!z) fail("cannot allocate a deflate compressor");
        if (job.compute) job.compute(z);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      cv.wait(lock, [&] { return stop || next_commit == job.ticket; });
      if (stop) {
        active--;
        break;
      }
      const bool skip = err || error;  // an earlier job failed: nothing more is written
      lock.unlock();
      if (!skip) {
        try {
          job.commit();
        } catch (...) {
          err = std::current_exception();
        }
      }
      job = Job{};  // its captures (an OpenShard) go now, not at the next job
      if (err) clear_h5_errors();
      lock.lock();
      if (err && !error) {
        error = err;
        jobs.clear();
      }
      next_commit++;
      active--;
      cv.notify_all();
    }
    lock.unlock();
    libdeflate_free_compressor(z);
  }
  void post(std::function<void(libdeflate_compressor*)> compute, std::function<void()> commit) {
    if (threads.empty()) {
      if (error) std::rethrow_exception(error);
      try {
        if (compute) compute(inline_z);
        commit();
      } catch (...) {
        clear_h5_errors();
        error = std::current_exception();
        throw;
      }
      return;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return error || jobs.size() < kMaxQueued; });
    if (error) std::rethrow_exception(error);
    jobs.push_back({std::move(compute), std::move(commit), next_ticket++});
    cv.notify_all();
  }
  void post(std::function<void()> job) { post(nullptr, std::move(job)); }
  void drain() {
    if (threads.empty()) {
      if (error) std::rethrow_exception(error);
      return;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return error || (jobs.empty() && active == 0); });
    if (error) std::rethrow_exception(error);
  }
};

ShardStreamWriter::ShardStreamWriter(std::string dir, std::string prefix, ShardMeta meta,
                                     uint64_t shard_tokens, Callback on_shard)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), meta_(std::move(meta)),
      shard_tokens_(shard_tokens), on_shard_(std::move(on_shard)) {
  if (shard_tokens_ == 0) fail("shard size must be at least 1 token");
  // write_shard()'s checks of the metadata, before anything is written.
  if (meta_.vocab_size <= 0 || meta_.eot_token < 0 || meta_.eot_token >= meta_.vocab_size)
    fail("cannot write shards ", prefix_, "_*.h5: eot_token ", meta_.eot_token,
         " is not inside vocab_size ", meta_.vocab_size);
  if (meta_.tokenizer.empty())
    fail("cannot write shards ", prefix_, "_*.h5: the tokenizer name is empty");
  if (meta_.bos_token >= meta_.vocab_size || (meta_.add_bos && meta_.bos_token < 0))
    fail("cannot write shards ", prefix_, "_*.h5: bos_token ", meta_.bos_token,
         " is not inside vocab_size ", meta_.vocab_size);
}

ShardStreamWriter::~ShardStreamWriter() = default;

std::string ShardStreamWriter::shard_name(const std::string& prefix, size_t index) {
  char num[32];
  std::snprintf(num, sizeof num, "_%06zu.h5", index);
  return prefix + num;
}

void ShardStreamWriter::add_document_part(const std::vector<uint32_t>& tokens, int source,
                                          bool first, bool last) {
  // [BOS] tokens [EOS], as meta_ says; a document with no token at all (no
  // text and no framing) leaves no trace, not an offset to nothing.
  const uint32_t bos = (uint32_t)meta_.bos_token, eot = (uint32_t)meta_.eot_token;
  if (first) doc_start_pending_ = true;
  if (first && meta_.add_bos && meta_.bos_token >= 0)
    append(&bos, 1, doc_start_pending_, source), doc_start_pending_ = false;
  if (!tokens.empty())
    append(tokens.data(), tokens.size(), doc_start_pending_, source), doc_start_pending_ = false;
  if (last && meta_.add_eos) append(&eot, 1, doc_start_pending_, source), doc_start_pending_ = false;
  if (last) doc_start_pending_ = false;
  report_done();
}

void ShardStreamWriter::append(const uint32_t* tokens, size_t n, bool starts_document,
                               int source) {
  const size_t chunk = shard_format::kChunkTokens;
  while (n > 0) {
    if (shard_count_ == shard_tokens_) flush();
    if (source >= 0) {
      auto it = std::lower_bound(shard_sources_.begin(), shard_sources_.end(), source);
      if (it == shard_sources_.end() || *it != source) shard_sources_.insert(it, source);
    }
    if (starts_document) doc_offsets_.push_back(shard_count_);
    starts_document = false;
    size_t k = (size_t)std::min<uint64_t>(n, shard_tokens_ - shard_count_);
    k = std::min(k, chunk - tokens_.size());
    tokens_.insert(tokens_.end(), tokens, tokens + k);
    tokens += k;
    n -= k;
    shard_count_ += k;
    total_tokens_ += k;
    // A full chunk of a shard that goes on: off to the background.
    if (tokens_.size() == chunk && shard_count_ < shard_tokens_) write_chunk();
  }
}

void ShardStreamWriter::write_chunk() {
  if (!bg_) bg_ = std::make_unique<Background>(background_ ? kWriterThreads : 0);
  if (!open_) {
    open_ = std::make_shared<OpenShard>();
    open_->path = (fs::path(dir_) / shard_name(prefix_, written_.size() + queued_)).string();
  }
  std::shared_ptr<OpenShard> sh = open_;
  const size_t chunk = shard_format::kChunkTokens;
  const uint64_t offset = shard_count_ - tokens_.size();  // chunk-aligned
  // The chunk's check and compression on any writer thread, its write in order.
  auto v = std::make_shared<std::vector<uint32_t>>(std::move(tokens_));
  auto z = std::make_shared<std::vector<unsigned char>>();
  auto max_token = std::make_shared<uint64_t>(0);
  const ShardMeta meta = meta_;
  bg_->post(
      [sh, v, z, max_token, chunk, offset, meta](libdeflate_compressor* zc) {
        for (size_t i = 0; i < v->size(); i++) {
          if ((*v)[i] >= (uint32_t)meta.vocab_size)
            fail("cannot write shard ", sh->path, ": token ", offset + i, " is ", (*v)[i],
                 ", outside the vocab of ", meta.vocab_size);
          *max_token = std::max<uint64_t>(*max_token, (*v)[i]);
        }
        // The element size without an HDF5 call (HDF5 is entered under g_h5 only).
        const int esize = meta.vocab_size > shard_format::kMaxVocab16 ? 4 : 2;
        *z = filter_chunk(*v, chunk, esize, zc);
      },
      [sh, v, z, max_token, chunk, offset, meta] {
        sh->max_token = std::max(sh->max_token, *max_token);
        std::lock_guard<std::mutex> lock(g_h5);
        const hid_t type = token_file_type(meta);
        if (sh->file.get() < 0) {
          fs::path dir = fs::path(sh->path).parent_path();
          std::error_code ec;
          if (!fs::is_directory(dir.empty() ? fs::path(".") : dir, ec))
            fail("cannot write shard ", sh->path, ": directory ", dir.string(), " does not exist");
          sh->tmp = temp_name(sh->path);
          sh->file = create_file(sh->tmp, sh->path);
          // Created one chunk long (so its chunks are `chunk` long); extended below.
          sh->dset = create_1d(sh->file, shard_format::kTokens, type, chunk, chunk, sh->path);
        }
        hsize_t dims[1] = {offset + v->size()}, off[1] = {offset};
        H5_CHECK(H5Dset_extent(sh->dset, dims), "cannot write shard ", sh->path);
        H5_CHECK(H5Dwrite_chunk(sh->dset, H5P_DEFAULT, 0, off, z->size(), z->data()),
                 "cannot write shard ", sh->path);
        sh->written = offset + v->size();
      });
  tokens_ = std::vector<uint32_t>();
  tokens_.clear();
  tokens_.reserve(chunk);
}

void ShardStreamWriter::flush() {
  if (shard_count_ == 0) return;
  ShardSummary s;
  s.path = (fs::path(dir_) / shard_name(prefix_, written_.size() + queued_)).string();
  s.tokens = shard_count_;
  s.documents = doc_offsets_.size();
  ShardProvenance prov = provenance_;
  prov.unk_bytes = pending_unknown_[0];
  prov.dropped_chars = pending_unknown_[1];
  pending_unknown_[0] = pending_unknown_[1] = 0;
  prov.source_files.clear();
  prov.source_sha256.clear();
  for (int src : shard_sources_) {
    if ((size_t)src >= provenance_.source_files.size()) continue;
    prov.source_files.push_back(provenance_.source_files[src]);
    prov.source_sha256.push_back(src < (int)provenance_.source_sha256.size()
                                     ? provenance_.source_sha256[src]
                                     : std::string());
  }
  if (!bg_) bg_ = std::make_unique<Background>(background_ ? kWriterThreads : 0);
  if (!open_) {
    // At most one chunk: written whole (chunk size = its length, as always).
    bg_->post([this, s, prov = std::move(prov), v = std::move(tokens_), d = std::move(doc_offsets_)] {
      {
        std::lock_guard<std::mutex> lock(g_h5);
        write_shard(s.path, meta_, v, d, shard_format::kChunkTokens, &prov);
      }
      std::lock_guard<std::mutex> lock(done_mu_);
      done_.push_back(s);
    });
  } else {
    write_chunk();  // the last, partial chunk (or a full one)
    std::shared_ptr<OpenShard> sh = std::move(open_);
    bg_->post([this, sh, s, prov = std::move(prov), d = std::move(doc_offsets_)] {
      {
        std::lock_guard<std::mutex> lock(g_h5);
        sh->dset.reset();
        finish_file(sh->file, sh->path, meta_, sh->written, d, shard_format::kChunkTokens, &prov,
                    sh->max_token);
      }
      commit_file(sh->tmp, sh->path);
      sh->committed = true;
      std::lock_guard<std::mutex> lock(done_mu_);
      done_.push_back(s);
    });
  }
  queued_++;
  tokens_.clear();
  doc_offsets_.clear();
  shard_sources_.clear();
  shard_count_ = 0;
}

void ShardStreamWriter::report_done() {
  std::vector<ShardSummary> done;
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done.swap(done_);
  }
  for (const ShardSummary& s : done) {
    queued_--;
    written_.push_back(s);
    if (on_shard_) on_shard_(s);
  }
}

void ShardStreamWriter::remove_written() {
  bg_.reset();  // joins its threads: done_ is final after this
  std::error_code ec;
  for (const ShardSummary& s : written_) std::filesystem::remove(s.path, ec);
  std::lock_guard<std::mutex> lock(done_mu_);
  for (const ShardSummary& s : done_) std::filesystem::remove(s.path, ec);
  done_.clear();
}

void ShardStreamWriter::finish() {
  flush();
  if (bg_) bg_->drain();
  report_done();
}

}  // namespace ratchet
