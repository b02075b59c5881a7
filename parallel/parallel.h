// The parallel layer in one include: communicators, DataParallel and its parts, process groups
// and DistributedDataParallel.
#pragma once

#include "parallel/communicator.h"
#include "parallel/cpu_communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/batch_shard.h"
#include "parallel/distributed_data_parallel.h"
#include "parallel/gradient_bucket.h"
#include "parallel/gradient_reducer.h"
#include "parallel/model_state.h"
#include "parallel/process_group.h"
#include "parallel/scatter_gather.h"
