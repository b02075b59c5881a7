// The character-level data of samples/char_gpt, as nanoGPT's shakespeare_char prepares it: the
// sorted set of the text's characters is the vocabulary, each character is encoded as its index
// in it, the first 90% of the encoded text trains and the last 10% validates, and a batch is B
// windows of T + 1 consecutive tokens at random offsets: x = the first T, y = the last T (the
// next character of each position of x).
//
// Characters are bytes: the default corpus (scripts/setup-deps) is ASCII, and any file can be
// read; a multi-byte UTF-8 character becomes several tokens.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace minidl::char_gpt {

// Where scripts/setup-deps puts the default corpus: $MINIDL_SHAKESPEARE_DIR/input.txt, else
// /usr/local/share/datasets/shakespeare-char/input.txt.
std::string default_data_path();

class Vocabulary {
 public:
  Vocabulary() = default;
  // The sorted distinct bytes of `text` (an empty text is an error: nothing to learn).
  static Vocabulary from_text(const std::string& text);
  // The bytes as comma-separated decimal values ("10,32,33"): how a checkpoint stores the
  // vocabulary (metadata is JSON text, where a raw control byte would not survive), and back.
  std::string serialize() const;
  static Vocabulary deserialize(const std::string& text);

  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  const std::string& chars() const { return chars_; }
  bool contains(char c) const { return index_[static_cast<unsigned char>(c)] >= 0; }
  // A character outside the vocabulary is an error naming it and `what` (e.g. "--prompt").
  std::vector<int64_t> encode(const std::string& text, const std::string& what = "text") const;
  std::string decode(const std::vector<int64_t>& tokens) const;
  friend bool operator==(const Vocabulary& a, const Vocabulary& b) { return a.chars_ == b.chars_; }

 private:
  explicit Vocabulary(std::string sorted_chars);
  std::string chars_;                 // index -> byte, sorted
  std::vector<int64_t> index_ = std::vector<int64_t>(256, -1);  // byte -> index, -1 when absent
};

struct TextData {
  Vocabulary vocab;
  std::vector<int64_t> train, val;  // the encoded text: the first 90% and the rest
};

// nanoGPT's split: n = int(0.9 * len); train = data[:n], val = data[n:].
TextData make_text_data(const std::string& text);
// The largest text read_text_file takes: 1 GiB (its tokens and their split take 16 bytes more
// a character, all in memory).
constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;

// Reads the whole file (an error naming it when missing or empty; the default path's error says
// how to fetch the corpus). A FIFO, a folder, a device or a file over kMaxTextBytes is an
// error naming --data, found before the file is opened (samples/common/input_files.h).
std::string read_text_file(const std::string& path);

struct Batch {
  Tensor x, y;  // int64 [B, T], on the CPU
};

// B windows at offsets drawn uniformly from [0, len - T) with gen.next_below (one draw per row,
// in row order), nanoGPT's torch.randint(len(data) - block_size, (batch_size,)). `split` names
// the data in the error when it holds no more than T tokens.
Batch get_batch(const std::vector<int64_t>& data, int64_t batch_size, int64_t block_size, Generator& gen,
                const std::string& split = "data");

}  // namespace minidl::char_gpt
