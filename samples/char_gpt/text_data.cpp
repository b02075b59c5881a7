// Vocabulary, split and batches of the character-level data.
#include "samples/char_gpt/text_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <new>
#include <sstream>

#include "core/error.h"
#include "samples/common/input_files.h"

namespace minidl::char_gpt {

std::string default_data_path() {
  const char* dir = std::getenv("MINIDL_SHAKESPEARE_DIR");
  const std::string base = dir != nullptr && *dir != '\0' ? dir : "/usr/local/share/datasets/shakespeare-char";
  return base + "/input.txt";
}

Vocabulary::Vocabulary(std::string sorted_chars) : chars_(std::move(sorted_chars)) {
  for (size_t i = 0; i < chars_.size(); ++i) index_[static_cast<unsigned char>(chars_[i])] = static_cast<int64_t>(i);
}

Vocabulary Vocabulary::from_text(const std::string& text) {
  MINIDL_CHECK(!text.empty(), "char_gpt: the text is empty; expected a file with some text to learn from");
  bool seen[256] = {};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string chars;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) chars.push_back(static_cast<char>(b));  // byte order: Python's sorted(set(text)) for ASCII
  return Vocabulary(std::move(chars));
}

std::string Vocabulary::serialize() const {
  std::string out;
  for (size_t i = 0; i < chars_.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(static_cast<unsigned char>(chars_[i]));
  }
  return out;
}

Vocabulary Vocabulary::deserialize(const std::string& text) {
  std::string chars;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    int v = -1;
    const auto [end, ec] = std::from_chars(text.data() + start, text.data() + comma, v);
    MINIDL_CHECK(ec == std::errc() && end == text.data() + comma && v >= 0 && v < 256 &&
                     (chars.empty() || static_cast<unsigned char>(chars.back()) < v),
                 "char_gpt: vocabulary '", text, "': expected increasing byte values 0..255 separated by commas");
    chars.push_back(static_cast<char>(v));
    start = comma + 1;
  }
  return Vocabulary(std::move(chars));
}

std::vector<int64_t> Vocabulary::encode(const std::string& text, const std::string& what) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int64_t id = index_[static_cast<unsigned char>(text[i])];
    MINIDL_CHECK(id >= 0, "char_gpt: ", what, ": character ", static_cast<int>(static_cast<unsigned char>(text[i])),
                 " ('", std::string(1, text[i]), "') at position ", i, " is not in the vocabulary of ", size(),
                 " characters of the text the model is trained on");
    out.push_back(id);
  }
  return out;
}

std::string Vocabulary::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    MINIDL_CHECK(t >= 0 && t < size(), "char_gpt: token ", t, " is outside the vocabulary [0, ", size(), ")");
    out.push_back(chars_[static_cast<size_t>(t)]);
  }
  return out;
}

TextData make_text_data(const std::string& text) {
  TextData d;
  d.vocab = Vocabulary::from_text(text);
  const std::vector<int64_t> all = d.vocab.encode(text);
  const auto n = static_cast<int64_t>(0.9 * static_cast<double>(all.size()));  // Python's int() truncates
  d.train.assign(all.begin(), all.begin() + n);
  d.val.assign(all.begin() + n, all.end());
  return d;
}

std::string read_text_file(const std::string& path) {
  // A path that exists must be a regular file of a sane size before it is opened: a FIFO would
  // block the read forever, a folder or /dev/zero would fail or never end.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    samples::check_input_file(path, "--data", kMaxTextBytes,
                              "the text and its tokens are held in memory, about 17 bytes a character");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const bool is_default = path == default_data_path();
    throw Error("char_gpt: cannot read " + path +
                (is_default ? " (the default corpus: run scripts/setup-deps to fetch it, or pass --data FILE)"
                            : " (check --data)"));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MINIDL_CHECK(!text.empty(), "char_gpt: ", path, " is empty; expected some text to learn from");
  return text;
}

Batch get_batch(const std::vector<int64_t>& data, int64_t batch_size, int64_t block_size, Generator& gen,
                const std::string& split) {
  const auto len = static_cast<int64_t>(data.size());
  MINIDL_CHECK(batch_size > 0 && block_size > 0, "char_gpt: get_batch: batch_size and block_size must be positive, got ",
               batch_size, " and ", block_size);
  MINIDL_CHECK(len > block_size, "char_gpt: the ", split, " split holds ", len, " characters; a window of --block-size ",
               block_size, " needs at least ", block_size + 1, " (use a longer text or a smaller --block-size)");
  // B·T tokens, twice (x and y), 8 bytes each, then copied into two tensors: the product and
  // its bytes must fit before anything is allocated.
  int64_t tokens = 0;
  MINIDL_CHECK(!__builtin_mul_overflow(batch_size, block_size, &tokens) &&
                   tokens <= std::numeric_limits<int64_t>::max() / 32,
               "char_gpt: a batch of --batch-size ", batch_size, " × --block-size ", block_size,
               " tokens overflows a 64-bit size; expected a product below ", std::numeric_limits<int64_t>::max() / 32);
  try {
    std::vector<int64_t> x(static_cast<size_t>(tokens)), y(x.size());
    for (int64_t b = 0; b < batch_size; ++b) {
      const auto start = static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(len - block_size)));
      std::copy_n(data.begin() + start, block_size, x.begin() + b * block_size);
      std::copy_n(data.begin() + start + 1, block_size, y.begin() + b * block_size);
    }
    return {from_vector(x, Shape{batch_size, block_size}), from_vector(y, Shape{batch_size, block_size})};
  } catch (const std::bad_alloc&) {
    throw Error(detail::make_message("char_gpt: out of memory for a batch of --batch-size ", batch_size,
                                     " × --block-size ", block_size, " tokens (", samples::format_bytes(32.0 * tokens),
                                     "); lower --batch-size or --block-size"));
  }
}

}  // namespace minidl::char_gpt
