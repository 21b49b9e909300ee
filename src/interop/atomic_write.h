// Writing a file so that a reader never sees half of it: write a temp file
// next to it, fsync, rename over the target.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

namespace ratchet {

// `body` writes the bytes into the open temp file and returns false when a
// write failed. Throws Error naming `path` (the temp file is removed).
void write_atomically(const std::string& path, const std::function<bool(FILE*)>& body);
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace ratchet
