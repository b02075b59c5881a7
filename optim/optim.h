// The optim layer in one include: optimizers, learning-rate schedules and loss scaling.
#pragma once

#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
