// The checks every tokenizer file passes before it is read or parsed
// (issue 36): one clear Error, exit 2, whichever command reads it.
//   - a symbolic-link loop (the file, or a directory above it), a dangling
//     link, a directory where a file belongs: named as such, not as "cannot
//     open" or "not valid JSON";
//   - a size bound checked before reading: a huge file is refused by its
//     size, not by std::bad_alloc;
//   - a nesting bound checked before the document is built (HF's library,
//     through serde_json, refuses nesting deeper than 128); the engine's
//     readers recurse once per level, so the bound also bounds their memory.
#pragma once
#include <cstdint>
#include <string>

namespace ratchet::hf {

// A container this deep (the root object is 1) is refused, as serde_json's
// recursion limit refuses it in HF's library (checked with its Node binding:
// 127 deep loads, 128 does not).
inline constexpr int kMaxJsonDepth = 128;
// tokenizer.json: the largest published ones are tens of MB.
inline constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t(128) << 20;
// tokenizer_config.json, special_tokens_map.json: chat templates and added
// tokens, at most a few MB in practice.
inline constexpr uint64_t kMaxTokenizerConfigBytes = uint64_t(32) << 20;

// What is wrong with `path` as a file to read ("" when it is a readable
// regular file, or when it does not exist and `must_exist` is false):
// "is a symbolic-link loop", "is a dangling symbolic link to X", "is a
// directory, not a file", "does not exist", "is larger than N MB".
std::string file_problem(const std::string& path, bool must_exist, uint64_t max_bytes);

// True when the name exists at all (lstat), even as a dangling link or loop,
// or when a directory above it loops (file_problem then says so).
bool name_exists(const std::string& path);

// Error "FILE: PATH: JSON nested 128 levels deep or more ..." when `text` (a
// JSON document read from `file`) has a container kMaxJsonDepth deep; the JSON path
// (RFC 6901) of the first container too deep. Malformed JSON passes: the
// parse that follows reports it.
void check_json_depth(const std::string& text, const std::string& file);

}  // namespace ratchet::hf
