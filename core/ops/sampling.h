// Picking entries of a distribution: topk (the k best of each row) and multinomial (random draws
// by weight), the two steps of sampling a language model's next token.
#pragma once

#include <utility>

#include "core/generator.h"
#include "core/tensor.h"

namespace minidl::ops {

// (values, indices) of the k largest (or smallest) entries of x along dim, as torch.topk: both have
// x's shape with size k along dim; indices are int64. Order: best first, NaN counting as larger
// than every number, and of equal values the lower index first. sorted = false is accepted and
// gives that same order (PyTorch leaves it unspecified then). Not differentiable: x must not need
// a gradient (detach it, or call under GradModeGuard(false)).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

// num_samples draws from each row of probs [V] or [N, V] of non-negative weights (not necessarily
// normalised) -> int64 [num_samples] or [N, num_samples], as torch.multinomial: column j with
// probability probs[j] / Σ probs; without replacement a drawn column is not drawn again in its row.
// The draws come from gen (the default generator when null) through Philox, so the same generator
// state gives the same samples on the CPU and on CUDA. Errors: a negative, infinite or NaN weight,
// a row of zeros, num_samples < 1, and without replacement num_samples > V or fewer positive
// weights than num_samples. The weights are checked on their device and the host waits for the answer.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

}  // namespace minidl::ops
