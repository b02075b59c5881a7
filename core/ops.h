// The public op surface in one include for users (samples, nn, optim, data); library code
// includes the specific core/ops/*.h it needs.
#pragma once

#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "core/ops/view.h"
// Convolutional networks: conv2d, pooling, batch norm, dropout.
#include "core/ops/batch_norm.h"
#include "core/ops/conv.h"
#include "core/ops/dropout.h"
#include "core/ops/pool.h"
// Transformer layers: embedding, layer norm, GELU.
#include "core/ops/embedding.h"
#include "core/ops/gelu.h"
#include "core/ops/layer_norm.h"
// Attention masks: tril, triu, masked_fill.
#include "core/ops/mask.h"

// Attention: fused scaled dot-product attention.
#include "core/ops/attention.h"

// Sampling: topk, multinomial.
#include "core/ops/sampling.h"
