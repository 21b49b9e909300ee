// Where `ratchet shard` gets its documents: files, globs, directories and
// standard input; plain text (one document per file, or split by a separator
// line or by blank lines) or JSONL (one document per record, from a named
// string field). Every document remembers its source and position
// ("data/a.jsonl:17") for error messages and the dedup report.
#pragma once
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace ratchet {

// Expands --input values in order: "-" (stdin) as is, globs sorted, a
// directory as every regular, non-hidden file below it (recursively, sorted).
// Throws Error naming `flag` and the value when something matches nothing or
// cannot be read.
std::vector<std::string> expand_text_inputs(const std::vector<std::string>& values,
                                            const std::string& flag = "--input");

struct TextSourceOptions {
  std::string jsonl_field;   // non-empty: inputs are JSONL, documents are this field
  std::string separator;     // non-empty: a line fully matching this ECMAScript regex ends a
                             // document (the line itself is dropped)
  bool blank_lines = false;  // one or more blank lines end a document
  bool empty_is_error = false;  // else empty (whitespace-only) documents are skipped
};

struct TextSourceFile {
  std::string name;    // as given ("-" for stdin)
  std::string sha256;  // of its bytes
  uint64_t bytes = 0;
};

struct TextDocument {
  std::string text;
  int source = 0;     // index into TextCorpus::sources
  uint64_t line = 0;  // 1-based line where it starts (0: the whole file)
};

struct TextCorpus {
  std::vector<TextSourceFile> sources;
  std::vector<TextDocument> documents;
  uint64_t empty_skipped = 0;
  std::string first_empty;    // "file:line" of the first skipped empty document
  uint64_t invalid_utf8 = 0;  // documents that are not valid UTF-8 (tokenized anyway)
  std::string first_invalid_utf8;
  uint64_t total_bytes = 0;   // of the documents' text
  std::string where(const TextDocument& d) const;  // "file:line" or "file"
};

// Reads every input. Throws Error naming the file (and line) for: a file that
// cannot be read, an empty input, JSONL that is not an object per line or
// lacks the field, an empty document when empty_is_error, a separator regex
// that does not compile, and no document at all.
TextCorpus read_text_corpus(const std::vector<std::string>& inputs,
                            const TextSourceOptions& options);

// The text of one JSONL record: the string member `field` of the JSON object
// on `line`, or nullopt when the object has no such member. Throws Error
// naming `where` ("file:line") when the line is not one JSON object or the
// member is not a string.
std::optional<std::string> jsonl_text_field(std::string_view line, const std::string& field,
                                            const std::string& where);

// True when `s` is valid UTF-8.
bool is_valid_utf8(const std::string& s);

}  // namespace ratchet
