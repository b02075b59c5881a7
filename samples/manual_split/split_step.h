// The gradient of one batch computed chunk by chunk — the tutorial's example 2, done right.
// Shared by samples/manual_split and its test (tests/samples/test_manual_split.cpp).
//
// Note [scaling each chunk's loss]
// CrossEntropyLoss takes the mean over its rows, so a chunk's loss is the mean over the chunk.
// The tutorial calls loss.backward() on each chunk's loss as it is: the accumulated gradient is
// then the SUM of the chunk means — for k equal chunks, k times the batch-mean gradient, so
// SGD takes a k-times larger step than on the whole batch (and unequal chunks weight their rows
// unequally). Scaling chunk c's loss by its share of the batch, |c| / B, before backward makes
// the accumulated gradient Σ_c (|c|/B) · mean_c = (1/B) Σ_rows — exactly the full-batch
// gradient, for any chunk sizes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/loss.h"
#include "nn/module.h"

namespace manual_split {

// Rows per chunk for `chunks` chunks of a batch of `batch` rows: the ceiling, like torch.chunk,
// so there are at most `chunks` chunks. (The tutorial's len(inputs) // device_count divides by
// zero on a machine without GPUs, and when the batch is not a multiple it makes one chunk too
// many: 10 // 3 = 3 gives chunks of 3, 3, 3 and 1.) chunks is clamped to at least 1.
inline int64_t chunk_rows(int64_t batch, int64_t chunks) {
  if (chunks < 1) chunks = 1;
  return batch < 1 ? 1 : (batch + chunks - 1) / chunks;
}

// Splits inputs / labels into chunks of `rows` rows, runs forward and backward per chunk with
// the loss scaled by the chunk's share of the batch (Note [scaling each chunk's loss]), so the
// model's .grad accumulates the full-batch gradient. Returns the full-batch mean loss.
inline double backward_in_chunks(minidl::nn::Module& model, const minidl::nn::CrossEntropyLoss& criterion,
                                 const minidl::Tensor& inputs, const minidl::Tensor& labels, int64_t rows) {
  const std::vector<minidl::Tensor> input_chunks = inputs.split(rows);  // views, no copies
  const std::vector<minidl::Tensor> label_chunks = labels.split(rows);
  const double batch = static_cast<double>(inputs.size(0));
  double batch_loss = 0.0;
  for (size_t c = 0; c < input_chunks.size(); ++c) {
    minidl::Tensor loss = criterion(model(input_chunks[c]), label_chunks[c]);  // mean over the chunk
    const double share = static_cast<double>(input_chunks[c].size(0)) / batch;
    (loss * share).backward();  // the tutorial: loss.backward(), a k-times too large gradient
    batch_loss += share * loss.item();
  }
  return batch_loss;
}

}  // namespace manual_split
