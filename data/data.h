// The data layer in one include: datasets, samplers, the DataLoader, IDX files and MNIST.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/idx.h"
#include "data/mnist.h"
#include "data/random_dataset.h"
#include "data/sampler.h"
