// What DataParallel and DistributedDataParallel ask of the model they wrap: its parameters and
// buffers as one list (what a broadcast copies), and whether all of them are on one device.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace minidl::parallel {

// The model's parameters, then its buffers, in registration order.
std::vector<Tensor> parameters_and_buffers(const nn::Module& model);

// "" when every parameter and buffer of `model` is on `device`; else the first that is not, as
// "parameter 'fc.weight' is on cuda:1" (or "buffer '...' is on ...").
std::string first_tensor_not_on(const nn::Module& model, Device device);

}  // namespace minidl::parallel
