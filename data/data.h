// The data layer in one include: datasets, samplers, the DataLoader.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/random_dataset.h"
#include "data/sampler.h"
