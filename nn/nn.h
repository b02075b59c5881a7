// The nn layer in one include: modules, layers, losses, functional forms and initialisers.
#pragma once

#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/sequential.h"
// Convolutional networks.
#include "nn/batch_norm.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/pool.h"
// Transformer layers.
#include "nn/embedding.h"
#include "nn/layer_norm.h"
// Training-loop utilities.
#include "nn/clip_grad.h"
