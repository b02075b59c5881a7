// nn::Embedding: a table of V learned vectors of size D looked up by integer index, like
// torch.nn.Embedding(V, D): weight [V, D] ~ N(0, 1).
#pragma once

#include <string>

#include "nn/module.h"

namespace minidl::nn {

class Embedding : public Module {
 public:
  // float32 on the CPU; move with to(). gen = null draws from the default generator.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen = nullptr);

  // indices int64 [...] -> [..., D] (ops::embedding: an index outside [0, V) is an Error).
  Tensor forward(const Tensor& indices) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }

  // Handle to the registered parameter. Change its values with copy_ (reassigning the handle
  // would detach it from the module's registry).
  Tensor weight;

 private:
  int64_t num_embeddings_, embedding_dim_;
};

}  // namespace minidl::nn
