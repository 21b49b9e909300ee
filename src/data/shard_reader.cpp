#include "data/shard_reader.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <optional>

#include "core/error.h"

namespace ratchet {
namespace sf = shard_format;
namespace {

constexpr const char* kRemake = "make shards with `ratchet shard`";

// What the attribute readers (h5_util.h) append when a header attribute has
// the wrong type.
const std::string kNotAShard =
    std::string(": the file is not a valid ratchet shard (") + kRemake + ")";

template <typename T>
T require(const std::optional<T>& v, const char* name, const std::string& path) {
  if (!v)
    fail("shard ", path, " has no '", name, "' attribute: it is not a valid ratchet shard (",
         kRemake, ")");
  return *v;
}

}  // namespace

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& values,
                                            const std::string& what) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    struct stat st;
    if (::stat(v.c_str(), &st) == 0 || v.find_first_of("*?[") == std::string::npos) {
      out.push_back(v);
      continue;
    }
    glob_t g{};
    std::vector<std::string> m;
    if (::glob(v.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; i++) m.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (m.empty()) fail(what, " '", v, "' matches no file: check the path");
    std::sort(m.begin(), m.end());
    out.insert(out.end(), m.begin(), m.end());
  }
  if (out.empty()) fail("no ", what, " given");
  return out;
}

ShardFile::ShardFile(const std::string& path, size_t cache_bytes) : path_(path) {
  h5_init();
  // Plain file-system problems first: HDF5's messages for them are long.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail("cannot open shard ", path, ": ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("shard ", path, " is a directory, not a shard file");
  if (::access(path.c_str(), R_OK) != 0)
    fail("cannot read shard ", path, ": ", std::strerror(errno));
  if (H5_CHECK(H5Fis_hdf5(path.c_str()), "cannot open shard ", path) <= 0)
    fail(path, " is not an HDF5 file: ", kRemake);

  H5Handle fapl = h5_fapl_no_locking();
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (file < 0)
    fail("cannot open shard ", path, ": ", h5_error_message(),
         "; the file is damaged or incomplete: re-shard it");
  file_ = H5Handle(file, H5Fclose);

  // The format attribute first: it tells a foreign HDF5 file from a damaged shard.
  auto format = string_attr(sf::kAttrFormat);
  if (!format)
    fail(path, " has no '", sf::kAttrFormat, "' attribute: it is not a ratchet token shard (",
         kRemake, ")");
  if (*format != sf::kFormat)
    fail(path, " has format '", *format, "', expected '", sf::kFormat,
         "': it is not a ratchet token shard (", kRemake, ")");
  int64_t version = require(int_attr(sf::kAttrVersion), sf::kAttrVersion, path);
  if (version > sf::kVersion)
    fail("shard ", path, " has format_version ", version, " but this ratchet reads version ",
         sf::kVersion, ": upgrade ratchet or re-shard with this version");
  if (version != sf::kVersion)
    fail("shard ", path, " has format_version ", version, ", which no ratchet wrote: re-shard it");
  version_ = version;
  meta_.tokenizer = require(string_attr(sf::kAttrTokenizer), sf::kAttrTokenizer, path);
  int64_t vocab = require(int_attr(sf::kAttrVocab), sf::kAttrVocab, path);
  int64_t eot = require(int_attr(sf::kAttrEot), sf::kAttrEot, path);
  if (vocab <= 0 || vocab > (int64_t(1) << 31) - 1)
    fail("shard ", path, " has vocab_size ", vocab, ": the shard is corrupt, re-shard it");
  if (eot < 0 || eot >= vocab)
    fail("shard ", path, " has eot_token ", eot, " outside its vocab_size ", vocab,
         ": the shard is corrupt, re-shard it");
  meta_.vocab_size = (int)vocab;
  meta_.eot_token = (int)eot;
  // Document framing (optional; shard_format.h): checked like the header.
  const auto add_bos = int_attr(sf::kAttrAddBos), add_eos = int_attr(sf::kAttrAddEos),
             bos = int_attr(sf::kAttrBos);
  if (add_bos || add_eos) {
    meta_.framed = true;
    meta_.add_bos = add_bos.value_or(0) != 0;
    meta_.add_eos = add_eos.value_or(0) != 0;
  }
  if (bos) {
    if (*bos < 0 || *bos >= vocab)
      fail("shard ", path, " has bos_token ", *bos, " outside its vocab_size ", vocab,
           ": the shard is corrupt, re-shard it");
    meta_.bos_token = (int)*bos;
  }
  if (meta_.add_bos && meta_.bos_token < 0)
    fail("shard ", path, " says add_bos but has no bos_token: the shard is corrupt, re-shard it");
  meta_.tokenizer_sha256 = string_attr(sf::kAttrTokenizerJsonSha256).value_or("");

  if (H5_CHECK(H5Lexists(file_, sf::kTokens, H5P_DEFAULT), "cannot read /tokens from ", path) <= 0)
    fail(path, " has no /tokens dataset: it is not a ratchet token shard (", kRemake, ")");
  set_chunk_cache(cache_bytes);
  H5Handle type(H5_CHECK(H5Dget_type(tokens_), "cannot read /tokens from ", path), H5Tclose);
  H5Handle space(H5_CHECK(H5Dget_space(tokens_), "cannot read /tokens from ", path), H5Sclose);
  size_t size = H5Tget_size(type);
  if (H5Tget_class(type) != H5T_INTEGER || H5Tget_sign(type) != H5T_SGN_NONE ||
      (size != 2 && size != 4) || H5Sget_simple_extent_ndims(space) != 1)
    fail("shard ", path, ": /tokens is not a 1-D uint16 or uint32 dataset: re-shard it");
  token_bytes_ = (int)size;
  hsize_t dims[1];
  H5_CHECK(H5Sget_simple_extent_dims(space, dims, nullptr), "cannot read /tokens from ", path);
  num_tokens_ = dims[0];
  if (auto n = int_attr(sf::kAttrNumTokens); n && (uint64_t)*n != num_tokens_)
    fail("shard ", path, " says num_tokens = ", *n, " but /tokens holds ", num_tokens_,
         ": the shard is corrupt, re-shard it");
  H5Handle dcpl(H5_CHECK(H5Dget_create_plist(tokens_), "cannot read /tokens from ", path),
                H5Pclose);
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hsize_t cdims[1] = {0};
    H5_CHECK(H5Pget_chunk(dcpl, 1, cdims), "cannot read /tokens from ", path);
    chunk_tokens_ = cdims[0];
  }
  chunks_ = ChunkReader::open(tokens_, path_);
  if (chunks_) chunks_->set_cache_bytes(cache_bytes);
}

void ShardFile::set_chunk_cache(size_t bytes) {
  H5Handle dapl(H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), "cannot read /tokens from ", path_),
                H5Pclose);
  if (bytes > 0) {
    // Slots: a prime well above the chunks that fit, so hashing rarely evicts;
    // w0 = 1: a chunk read whole is evicted first (sequential reads).
    H5_CHECK(H5Pset_chunk_cache(dapl, 12421, bytes, 1.0), "cannot read /tokens from ", path_);
  }
  tokens_.reset();
  tokens_ = H5Handle(H5_CHECK(H5Dopen2(file_, sf::kTokens, dapl), "cannot read /tokens from ",
                              path_),
                     H5Dclose);
  if (chunks_) {
    chunks_->set_dataset(tokens_);
    chunks_->set_cache_bytes(bytes);
  }
}

std::optional<std::string> ShardFile::string_attr(const char* name) const {
  return h5_string_attr(file_, name, "shard " + path_, kNotAShard);
}
std::optional<int64_t> ShardFile::int_attr(const char* name) const {
  return h5_int_attr(file_, name, "shard " + path_, kNotAShard);
}
std::optional<double> ShardFile::double_attr(const char* name) const {
  return h5_double_attr(file_, name, "shard " + path_, ": re-shard it");
}

std::vector<std::string> ShardFile::string_array_attr(const char* name) const {
  std::vector<std::string> out;
  if (H5_CHECK(H5Aexists(file_, name), "cannot read attribute ", name, " of ", path_) <= 0)
    return out;
  H5Handle attr(H5_CHECK(H5Aopen(file_, name, H5P_DEFAULT), "cannot read attribute ", name,
                         " of ", path_),
                H5Aclose);
  H5Handle type(H5_CHECK(H5Aget_type(attr), "cannot read attribute ", name, " of ", path_),
                H5Tclose);
  H5Handle space(H5_CHECK(H5Aget_space(attr), "cannot read attribute ", name, " of ", path_),
                 H5Sclose);
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) <= 0)
    fail("shard ", path_, ": attribute '", name,
         "' is not an array of variable-length strings: re-shard it");
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n <= 0) return out;
  H5Handle mem(H5_CHECK(H5Tcopy(H5T_C_S1), "cannot read attribute ", name, " of ", path_),
               H5Tclose);
  H5_CHECK(H5Tset_size(mem, H5T_VARIABLE), "cannot read attribute ", name, " of ", path_);
  H5_CHECK(H5Tset_cset(mem, H5Tget_cset(type)), "cannot read attribute ", name, " of ", path_);
  std::vector<char*> ptrs((size_t)n, nullptr);
  H5_CHECK(H5Aread(attr, mem, ptrs.data()), "cannot read attribute ", name, " of ", path_);
  for (char* p : ptrs) {
    out.emplace_back(p ? p : "");
    H5free_memory(p);
  }
  return out;
}

namespace {
herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> ShardFile::attribute_names() const {
  std::vector<std::string> names;
  H5_CHECK(H5Aiterate2(file_, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr_name, &names),
           "cannot list the attributes of ", path_);
  return names;
}

uint64_t ShardFile::stored_bytes() const { return H5Dget_storage_size(tokens_); }

std::vector<std::string> ShardFile::filters() const {
  std::vector<std::string> out;
  H5Handle dcpl(H5_CHECK(H5Dget_create_plist(tokens_), "cannot read /tokens from ", path_),
                H5Pclose);
  int n = H5_CHECK(H5Pget_nfilters(dcpl), "cannot read /tokens from ", path_);
  for (int i = 0; i < n; i++) {
    unsigned flags = 0, cfg = 0;
    size_t nelem = 0;
    char name[64] = "";
    H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelem, nullptr, sizeof name, name,
                                    &cfg);
    out.emplace_back(f == H5Z_FILTER_DEFLATE ? "deflate"
                     : f == H5Z_FILTER_SHUFFLE ? "shuffle"
                     : name[0] ? name : "filter " + std::to_string((int)f));
  }
  return out;
}

void ShardFile::read_tokens_as(uint64_t start, uint64_t count, hid_t mem_type, void* out) const {
  check_range(start, count);
  if (count == 0) return;
  H5Handle fspace(H5_CHECK(H5Dget_space(tokens_), "cannot read /tokens from ", path_), H5Sclose);
  hsize_t off[1] = {start}, cnt[1] = {count};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, nullptr, cnt, nullptr),
           "cannot read /tokens from ", path_);
  H5Handle mspace(H5_CHECK(H5Screate_simple(1, cnt, nullptr), "cannot read /tokens from ", path_),
                  H5Sclose);
  H5_CHECK(H5Dread(tokens_, mem_type, mspace, fspace, H5P_DEFAULT, out),
           "cannot read /tokens from ", path_);
}

void ShardFile::read_tokens(uint64_t start, uint64_t count, uint16_t* out) const {
  read_tokens_as(start, count, H5T_NATIVE_UINT16, out);
}
void ShardFile::read_tokens(uint64_t start, uint64_t count, uint32_t* out) const {
  if (!chunks_) return read_tokens_as(start, count, H5T_NATIVE_UINT32, out);
  check_range(start, count);
  chunks_->read(start, count, out);
}
void ShardFile::read_tokens(uint64_t start, uint64_t count, int32_t* out) const {
  if (!chunks_) return read_tokens_as(start, count, H5T_NATIVE_INT32, out);
  check_range(start, count);
  chunks_->read(start, count, out);
}

void ShardFile::check_range(uint64_t start, uint64_t count) const {
  if (start > num_tokens_ || count > num_tokens_ - start)
    fail("cannot read tokens [", start, ", ", start + count, ") from ", path_, ": it has ",
         num_tokens_);
}

std::pair<uint64_t, uint64_t> ShardFile::file_id() const {
  void* handle = nullptr;  // the sec2 driver's: an int file descriptor
  H5_CHECK(H5Fget_vfd_handle(file_.get(), H5P_DEFAULT, &handle), "cannot get the file of shard ", path_);
  struct stat st {};
  if (!handle || ::fstat(*static_cast<int*>(handle), &st) != 0)
    fail("cannot stat the open shard ", path_, ": ", std::strerror(errno));
  return {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
}

uint64_t ShardFile::num_doc_offsets() const {
  if (H5_CHECK(H5Lexists(file_, sf::kDocOffsets, H5P_DEFAULT), "cannot read /doc_offsets from ",
               path_) <= 0)
    return 0;
  H5Handle dset(H5_CHECK(H5Dopen2(file_, sf::kDocOffsets, H5P_DEFAULT),
                         "cannot read /doc_offsets from ", path_),
                H5Dclose);
  H5Handle space(H5_CHECK(H5Dget_space(dset), "cannot read /doc_offsets from ", path_), H5Sclose);
  return (uint64_t)H5_CHECK(H5Sget_simple_extent_npoints(space), "cannot read /doc_offsets from ",
                            path_);
}

std::vector<uint64_t> ShardFile::read_doc_offsets(uint64_t start, uint64_t count) const {
  std::vector<uint64_t> out;
  const uint64_t n = num_doc_offsets();
  if (start > n || count > n - start)
    fail("cannot read /doc_offsets [", start, ", ", start + count, ") from ", path_, ": it has ",
         n);
  if (count == 0) return out;
  H5Handle dset(H5_CHECK(H5Dopen2(file_, sf::kDocOffsets, H5P_DEFAULT),
                         "cannot read /doc_offsets from ", path_),
                H5Dclose);
  H5Handle fspace(H5_CHECK(H5Dget_space(dset), "cannot read /doc_offsets from ", path_), H5Sclose);
  hsize_t off[1] = {start}, cnt[1] = {count};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, nullptr, cnt, nullptr),
           "cannot read /doc_offsets from ", path_);
  H5Handle mspace(H5_CHECK(H5Screate_simple(1, cnt, nullptr), "cannot read /doc_offsets from ",
                           path_),
                  H5Sclose);
  out.resize(count);
  H5_CHECK(H5Dread(dset, H5T_NATIVE_UINT64, mspace, fspace, H5P_DEFAULT, out.data()),
           "cannot read /doc_offsets from ", path_);
  return out;
}

std::vector<uint64_t> ShardFile::read_doc_offsets() const {
  std::vector<uint64_t> offsets;
  if (H5_CHECK(H5Lexists(file_, sf::kDocOffsets, H5P_DEFAULT), "cannot read /doc_offsets from ",
               path_) <= 0)
    return offsets;
  H5Handle dset(H5_CHECK(H5Dopen2(file_, sf::kDocOffsets, H5P_DEFAULT),
                         "cannot read /doc_offsets from ", path_),
                H5Dclose);
  H5Handle space(H5_CHECK(H5Dget_space(dset), "cannot read /doc_offsets from ", path_), H5Sclose);
  hssize_t n = H5_CHECK(H5Sget_simple_extent_npoints(space), "cannot read /doc_offsets from ",
                        path_);
  offsets.resize((size_t)n);
  if (n > 0)
    H5_CHECK(H5Dread(dset, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets.data()),
             "cannot read /doc_offsets from ", path_);
  return offsets;
}

}  // namespace ratchet
