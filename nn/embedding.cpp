// nn::Embedding: the weight drawn as PyTorch's reset_parameters does (init.normal_), and a
// forward that delegates to ops::embedding.
#include "nn/embedding.h"

#include <typeinfo>

#include "core/ops/embedding.h"
#include "nn/init.h"

namespace minidl::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  MINIDL_CHECK(num_embeddings > 0 && embedding_dim > 0,
               "Embedding: num_embeddings and embedding_dim must be positive, got ", num_embeddings, " and ",
               embedding_dim);
  Tensor w = empty(Shape{num_embeddings, embedding_dim});  // [V, D]
  init::normal_(w, 0.0, 1.0, gen);
  weight = register_parameter("weight", w);
}

std::string Embedding::name() const {
  return detail::make_message("Embedding(", num_embeddings_, ", ", embedding_dim_, ")");
}

std::shared_ptr<Module> Embedding::clone() const {
  check_clone_is_exact(typeid(Embedding), "Embedding");
  Generator scratch;  // the initial values are overwritten: keep the default generator untouched
  auto copy = std::make_shared<Embedding>(num_embeddings_, embedding_dim_, &scratch);
  copy->copy_state_from(*this);
  return copy;
}

Tensor Embedding::forward(const Tensor& indices) { return ops::embedding(indices, weight); }

}  // namespace minidl::nn
