#include "tokenizer/byte_tokenizer.h"

namespace ratchet {

std::vector<uint32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<uint32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); i++) ids[i] = (unsigned char)text[i];
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id < 256)
      out.push_back((char)(unsigned char)id);
    else if (id == (uint32_t)kEot)
      out += kEotText;
    else
      out += "<|id=" + std::to_string(id) + "|>";
  }
  return out;
}

}  // namespace ratchet
