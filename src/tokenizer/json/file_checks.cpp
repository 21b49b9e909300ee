#include "tokenizer/json/file_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace ratchet::hf {

bool name_exists(const std::string& path) {
  struct stat st;
  // A directory above it that loops: nothing can be said to be missing.
  return ::lstat(path.c_str(), &st) == 0 || errno == ELOOP;
}

std::string file_problem(const std::string& path, bool must_exist, uint64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ELOOP)
      return "is a symbolic-link loop (it, or a directory above it, links back to itself): "
             "point it at the real file";
    if (err == ENOENT && name_exists(path)) {
      char target[4096];
      const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
      return "is a dangling symbolic link" +
             (n > 0 ? " to " + std::string(target, (size_t)n) : std::string()) +
             ", which does not exist: point it at the real file";
    }
    if (err == ENOENT || err == ENOTDIR) return must_exist ? "does not exist" : "";
    return std::string("cannot be read: ") + std::strerror(err);
  }
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  if (!S_ISREG(st.st_mode)) return "is not a regular file (a device, pipe or socket)";
  if ((uint64_t)st.st_size > max_bytes)
    return "is " + std::to_string((uint64_t)st.st_size >> 20) + " MB, larger than the " +
           std::to_string(max_bytes >> 20) + " MB any real one needs: pass the right file";
  return "";
}

namespace {

// A SAX reader that keeps only the path to the current container, and stops
// at the first one nested too deep.
struct DepthSax {
  struct Frame {
    bool array = false;
    size_t next = 0;  // arrays: the index of the next element
    std::string key;  // objects: the key of the current member
  };
  std::vector<Frame> stack;
  bool too_deep = false;
  std::string where;

  void value_done() {
    if (!stack.empty() && stack.back().array) stack.back().next++;
  }
  std::string pointer() const {
    std::string p;
    for (const Frame& f : stack) {
      p += '/';
      if (f.array) {
        p += std::to_string(f.next);
      } else {
        for (char ch : f.key) p += ch == '~' ? "~0" : ch == '/' ? "~1" : std::string(1, ch);
      }
    }
    return p.empty() ? "/" : p;
  }
  bool open(bool array) {
    if ((int)stack.size() + 1 >= kMaxJsonDepth) {  // the new container's depth (the root's is 1)
      too_deep = true;
      where = pointer();
      return false;
    }
    stack.push_back(Frame{array, 0, {}});
    return true;
  }
  bool close() {
    stack.pop_back();
    value_done();
    return true;
  }
  bool null() { value_done(); return true; }
  bool boolean(bool) { value_done(); return true; }
  bool number_integer(nlohmann::json::number_integer_t) { value_done(); return true; }
  bool number_unsigned(nlohmann::json::number_unsigned_t) { value_done(); return true; }
  bool number_float(nlohmann::json::number_float_t, const std::string&) { value_done(); return true; }
  bool string(std::string&) { value_done(); return true; }
  bool binary(nlohmann::json::binary_t&) { value_done(); return true; }
  bool start_object(std::size_t) { return open(false); }
  bool key(std::string& k) {
    stack.back().key = k;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(true); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }
};

}  // namespace

void check_json_depth(const std::string& text, const std::string& file) {
  DepthSax sax;
  nlohmann::json::sax_parse(text, &sax);
  if (!sax.too_deep) return;
  // The path of a container 128 deep is long; its start and end say where.
  // Whole components: about 80 characters of the start, 60 of the end.
  std::string where = sax.where;
  if (where.size() > 160) {
    const size_t head = where.find('/', 80), tail = where.rfind('/', where.size() - 60);
    if (head != std::string::npos && tail != std::string::npos && head < tail)
      where = where.substr(0, head) + "/..." + where.substr(tail);
  }
  fail(file, ": ", where, ": JSON nested ", kMaxJsonDepth,
       " levels deep or more; Hugging Face's library refuses such a file too (serde_json's "
       "recursion limit): fix the file");
}

}  // namespace ratchet::hf
