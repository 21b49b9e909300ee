#include "data_tools/text_source.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "core/sha256.h"

namespace ratchet {
namespace fs = std::filesystem;
namespace {

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool blank(const std::string& s, size_t a, size_t b) {
  for (size_t i = a; i < b; i++)
    if (!std::strchr(" \t\r\n\v\f", s[i])) return false;
  return true;
}

std::string read_all(const std::string& path, const std::string& flag) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (text.empty()) fail(flag, " '-': stdin is empty, nothing to tokenize");
    return text;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open ", flag, " '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("cannot read ", flag, " '", path, "': ", std::strerror(errno));
  text = ss.str();
  if (text.empty()) fail(flag, " '", path, "' is empty: nothing to tokenize, remove it");
  return text;
}

}  // namespace

bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    if ((unsigned char)s[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    int n = utf8_next(s, i, &cp);
    if (cp == 0xFFFFFFFFu) return false;
    i += n;
  }
  return true;
}

std::vector<std::string> expand_text_inputs(const std::vector<std::string>& values,
                                            const std::string& flag) {
  std::vector<std::string> paths;
  int stdin_count = 0;
  for (const std::string& v : values) {
    if (v == "-") {
      if (++stdin_count > 1) fail(flag, " '-' (stdin) is given more than once");
      paths.push_back(v);
      continue;
    }
    struct stat st;
    if (::stat(v.c_str(), &st) != 0 && has_glob_chars(v)) {
      glob_t g{};
      int rc = ::glob(v.c_str(), 0, nullptr, &g);
      std::vector<std::string> matches;
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) matches.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (matches.empty()) fail(flag, " '", v, "' matches no file: check the path");
      std::sort(matches.begin(), matches.end());
      for (auto& m : matches) {
        std::error_code ec;
        if (fs::is_directory(m, ec)) continue;  // globs pick files; name directories explicitly
        paths.push_back(m);
      }
    } else if (::stat(v.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::vector<std::string> files;
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(
               v, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) files.push_back(it->path().string());
      }
      if (ec) fail("cannot list ", flag, " directory '", v, "': ", ec.message());
      if (files.empty()) fail(flag, " directory '", v, "' holds no files");
      std::sort(files.begin(), files.end());
      paths.insert(paths.end(), files.begin(), files.end());
    } else {
      paths.push_back(v);
    }
  }
  for (const std::string& p : paths) {
    if (p == "-") continue;
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) fail("cannot open ", flag, " '", p, "': ", std::strerror(errno));
    // A device's bytes never end (/dev/zero, /dev/urandom): spooled into
    // --output-dir until the disk was full. A pipe ('-', <(...)) is read.
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
      fail(flag, " '", p, "' is a device, not a text file or a pipe: pass files, directories, "
           "globs, or '-' for stdin");
    if (::access(p.c_str(), R_OK) != 0)
      fail("cannot read ", flag, " '", p, "': ", std::strerror(errno));
  }
  if (paths.empty()) fail(flag, " names no file");
  return paths;
}

std::string TextCorpus::where(const TextDocument& d) const {
  const std::string& name = sources[(size_t)d.source].name;
  std::string n = name == "-" ? "<stdin>" : name;
  return d.line ? n + ":" + std::to_string(d.line) : n;
}

std::optional<std::string> jsonl_text_field(std::string_view line, const std::string& field,
                                            const std::string& where) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    fail("--input ", where, " is not valid JSONL (", e.what(),
         "): each line must be one JSON object");
  }
  if (!record.is_object())
    fail("--input ", where, " is not valid JSONL (a ", record.type_name(),
         ", not an object): each line must be one JSON object");
  auto it = record.find(field);
  if (it == record.end()) return std::nullopt;
  if (!it->is_string())
    fail("--input ", where, ": field \"", field, "\" is not a string but a ", it->type_name(),
         ": pass the --jsonl-field that holds the text");
  return it->get<std::string>();
}

TextCorpus read_text_corpus(const std::vector<std::string>& inputs,
                            const TextSourceOptions& o) {
  const std::string flag = "--input";
  TextCorpus c;
  std::regex sep;
  if (!o.separator.empty()) {
    try {
      sep = std::regex(o.separator, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail("--separator '", o.separator, "' is not a valid regular expression: ", e.what());
    }
  }
  for (const std::string& path : inputs) {
    const int src = (int)c.sources.size();
    std::string text = read_all(path, flag);
    c.sources.push_back({path, sha256_hex(text), (uint64_t)text.size()});
    const std::string name = path == "-" ? "<stdin>" : path;
    size_t docs_before = c.documents.size();
    auto add = [&](std::string doc, uint64_t line) {
      TextDocument d{std::move(doc), src, line};
      if (blank(d.text, 0, d.text.size())) {
        if (o.empty_is_error)
          fail("document at ", c.where(d), " is empty: remove it, or drop --empty-docs error to "
               "skip empty documents");
        if (c.empty_skipped++ == 0) c.first_empty = c.where(d);
        return;
      }
      if (!is_valid_utf8(d.text) && c.invalid_utf8++ == 0) c.first_invalid_utf8 = c.where(d);
      c.total_bytes += d.text.size();
      c.documents.push_back(std::move(d));
    };

    if (!o.jsonl_field.empty()) {
      size_t pos = 0;
      uint64_t line_no = 0;
      while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        std::string_view line(text.data() + pos, nl - pos);
        pos = nl + 1;
        line_no++;
        if (blank(std::string(line), 0, line.size())) continue;
        std::optional<std::string> value =
            jsonl_text_field(line, o.jsonl_field, name + ":" + std::to_string(line_no));
        if (!value)
          fail(flag, " ", name, ":", line_no, " has no field \"", o.jsonl_field,
               "\": pass the --jsonl-field that holds the text");
        add(std::move(*value), line_no);
      }
    } else if (!o.separator.empty() || o.blank_lines) {
      size_t pos = 0, doc_start = 0;
      uint64_t line_no = 0, doc_line = 1;
      while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        size_t end = nl == std::string::npos ? text.size() : nl + 1;
        size_t content_end = nl == std::string::npos ? text.size() : nl;
        if (content_end > pos && text[content_end - 1] == '\r') content_end--;
        line_no++;
        bool is_sep = o.blank_lines
                          ? blank(text, pos, content_end)
                          : std::regex_match(text.begin() + (long)pos,
                                             text.begin() + (long)content_end, sep);
        if (is_sep) {
          if (pos > doc_start) add(text.substr(doc_start, pos - doc_start), doc_line);
          doc_start = end;
          doc_line = line_no + 1;
        }
        pos = end;
      }
      if (text.size() > doc_start) add(text.substr(doc_start), doc_line);
    } else {
      add(std::move(text), 0);
    }
    if (c.documents.size() == docs_before && !o.jsonl_field.empty() && c.empty_skipped == 0)
      fail(flag, " ", name, " holds no JSONL records");
  }
  if (c.documents.empty())
    fail("the inputs hold no non-empty document (", inputs.size(), " file",
         inputs.size() == 1 ? "" : "s", ", ", c.empty_skipped,
         " empty documents skipped): nothing to tokenize");
  return c;
}

}  // namespace ratchet
