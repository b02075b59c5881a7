// parameters_and_buffers, first_tensor_not_on.
#include "parallel/model_state.h"

namespace minidl::parallel {

std::vector<Tensor> parameters_and_buffers(const nn::Module& model) {
  std::vector<Tensor> state;
  for (const auto& [name, p] : model.named_parameters()) state.push_back(p);
  for (const auto& [name, b] : model.named_buffers()) state.push_back(b);
  return state;
}

std::string first_tensor_not_on(const nn::Module& model, Device device) {
  for (const auto& [name, p] : model.named_parameters())
    if (p.device() != device) return "parameter '" + name + "' is on " + p.device().str();
  for (const auto& [name, b] : model.named_buffers())
    if (b.device() != device) return "buffer '" + name + "' is on " + b.device().str();
  return "";
}

}  // namespace minidl::parallel
