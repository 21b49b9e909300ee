#include "data_tools/text_stream.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "data_tools/interrupt.h"

namespace ratchet {
namespace {

bool blank(std::string_view s) {
  for (char c : s)
    if (!std::strchr(" \t\r\n\v\f", c)) return false;  // (NUL counts as blank, as in text_source.cpp)
  return true;
}

int seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Splits one input's bytes into documents as text_source.h's rules say.
class Splitter {
 public:
  Splitter(const TextSourceOptions& o, const std::regex* sep, const std::string& name,
           DocumentEvents& ev)
      : o_(o), sep_(sep), name_(name), ev_(ev) {
    mode_ = !o.jsonl_field.empty() ? kJsonl : (sep || o.blank_lines) ? kLines : kWhole;
  }

  void feed(std::string_view s) {
    if (mode_ == kWhole) {
      open(0);
      ev_.text(s);
      return;
    }
    for (size_t i = 0; i < s.size();) {
      const size_t nl = s.find('\n', i);
      const size_t e = nl == std::string_view::npos ? s.size() : nl + 1;
      const std::string_view piece = s.substr(i, e - i);
      if (streaming_line_) {
        ev_.text(piece);
      } else {
        line_.append(piece.data(), piece.size());
        // --blank-lines: a line with a non-blank byte is text, whatever follows.
        if (mode_ == kLines && !sep_ && !blank(piece)) {
          open(doc_line_);
          ev_.text(line_);
          line_.clear();
          streaming_line_ = true;
        }
      }
      if (nl != std::string_view::npos) end_line();
      i = e;
    }
  }

  void finish() {
    if (!line_.empty() || streaming_line_) end_line();
    close();
  }

  uint64_t documents = 0;

 private:
  enum Mode { kWhole, kLines, kJsonl };
  void open(uint64_t line) {
    if (open_) return;
    open_ = true;
    documents++;
    ev_.begin(line);
  }
  void close() {
    if (!open_) return;
    open_ = false;
    ev_.end();
  }
  void end_line() {
    line_no_++;
    if (streaming_line_) {
      streaming_line_ = false;
      return;
    }
    size_t content_end = line_.size();
    if (content_end > 0 && line_[content_end - 1] == '\n') content_end--;
    if (mode_ == kJsonl) {
      const std::string_view content(line_.data(), content_end);
      if (!blank(content)) {
        std::optional<std::string> value =
            jsonl_text_field(content, o_.jsonl_field, name_ + ":" + std::to_string(line_no_));
        if (!value)
          fail("--input ", name_, ":", line_no_, " has no field \"", o_.jsonl_field,
               "\": pass the --jsonl-field that holds the text");
        open(line_no_);
        if (!value->empty()) ev_.text(*value);
        close();
      }
      line_.clear();
      return;
    }
    if (content_end > 0 && line_[content_end - 1] == '\r') content_end--;
    const bool is_sep = sep_ ? std::regex_match(line_.begin(), line_.begin() + (long)content_end, *sep_)
                             : blank(std::string_view(line_.data(), content_end));
    if (is_sep) {
      close();
      doc_line_ = line_no_ + 1;
    } else {
      open(doc_line_);
      ev_.text(line_);
    }
    line_.clear();
  }

  const TextSourceOptions& o_;
  const std::regex* sep_;
  const std::string& name_;
  DocumentEvents& ev_;
  Mode mode_;
  std::string line_;  // the current line, until it is known to be text
  bool streaming_line_ = false;
  bool open_ = false;
  uint64_t line_no_ = 0, doc_line_ = 1;
};

}  // namespace

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex((EVP_MD_CTX*)ctx_, EVP_sha256(), nullptr) != 1)
    fail("cannot start a SHA-256 digest (OpenSSL)");
}
Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free((EVP_MD_CTX*)ctx_); }
void Sha256Stream::add(std::string_view b) {
  if (!b.empty()) EVP_DigestUpdate((EVP_MD_CTX*)ctx_, b.data(), b.size());
}
void Sha256Stream::raw(unsigned char out[32]) {
  unsigned int n = 0;
  EVP_DigestFinal_ex((EVP_MD_CTX*)ctx_, out, &n);
}
std::string Sha256Stream::hex() {
  unsigned char d[32];
  raw(d);
  static const char* k = "0123456789abcdef";
  std::string s;
  for (unsigned char c : d) s += k[c >> 4], s += k[c & 15];
  return s;
}

void Utf8Check::add(std::string_view s) {
  if (!valid_ || s.empty()) return;
  size_t i = 0;
  if (!carry_.empty()) {  // complete the sequence begun in the last piece
    const size_t need = (size_t)seq_len((unsigned char)carry_[0]);
    while (carry_.size() < need && i < s.size()) carry_.push_back(s[i++]);
    if (carry_.size() < need) return;
    valid_ = is_valid_utf8(carry_);
    carry_.clear();
    if (!valid_) return;
  }
  size_t end = s.size();
  // An incomplete sequence at the end waits for the next piece.
  for (size_t k = end; k > i && k + 4 > end; k--) {
    const unsigned char c = (unsigned char)s[k - 1];
    if ((c & 0xC0) == 0x80) continue;
    if (k - 1 + (size_t)seq_len(c) > end) {
      carry_.assign(s.data() + k - 1, end - (k - 1));
      end = k - 1;
    }
    break;
  }
  if (end > i) valid_ = is_valid_utf8(std::string(s.substr(i, end - i)));
}

bool needs_spool(const std::string& path) {
  if (path == "-") return true;
  struct stat st;
  return ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode);
}

InputRead stream_input(const std::string& path, const TextSourceOptions& o, const std::regex* sep,
                       DocumentEvents& ev, std::FILE* spool, const InputRead* expect) {
  const std::string name = path == "-" ? "<stdin>" : path;
  int fd = 0;
  if (path != "-") {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open --input '", path, "': ", std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd > 0) ::close(fd);
    }
  } closer{fd};
  if (expect) {  // a regular file: its size must not have changed since the first pass
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size != expect->bytes)
      fail("--input '", name, "' changed while being read: ", expect->bytes, " bytes at first, ",
           (uint64_t)st.st_size, " now; shard a file that is not being written (or copy it first)");
  }
  Splitter split(o, sep, name, ev);
  Sha256Stream sha;
  InputRead r;
  std::vector<char> buf(kReadChunk);
  for (;;) {
    throw_if_interrupted();  // Ctrl-C, SIGTERM: unwind, so the run's files are removed
    size_t want = buf.size();
    if (expect) want = (size_t)std::min<uint64_t>(want, expect->bytes - r.bytes);
    if (want == 0) break;
    const ssize_t n = ::read(fd, buf.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot read --input '", name, "': ", std::strerror(errno));
    }
    if (n == 0) break;
    const std::string_view chunk(buf.data(), (size_t)n);
    r.bytes += (uint64_t)n;
    sha.add(chunk);
    if (spool && std::fwrite(chunk.data(), 1, chunk.size(), spool) != chunk.size())
      fail("cannot spool --input '", name, "' for its second reading: ", std::strerror(errno),
           " (the spool file is in --output-dir)");
    split.feed(chunk);
  }
  if (r.bytes == 0) {
    if (path == "-") fail("--input '-': stdin is empty, nothing to tokenize");
    fail("--input '", path, "' is empty: nothing to tokenize, remove it");
  }
  split.finish();
  r.sha256 = sha.hex();
  if (expect) {
    char extra;
    const bool grew = ::read(fd, &extra, 1) > 0;
    if (grew || r.bytes != expect->bytes || r.sha256 != expect->sha256)
      fail("--input '", name, "' changed while being read (", expect->bytes, " bytes, SHA-256 ",
           expect->sha256.substr(0, 16), "... at first; ", grew ? "it grew since" : "other bytes now",
           "): shard a file that is not being written (or copy it first)");
  }
  return r;
}

}  // namespace ratchet
