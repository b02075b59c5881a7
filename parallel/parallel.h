// The parallel layer in one include: communicators, DataParallel and its parts.
#pragma once

#include "parallel/communicator.h"
#include "parallel/cpu_communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/gradient_bucket.h"
#include "parallel/gradient_reducer.h"
#include "parallel/scatter_gather.h"
