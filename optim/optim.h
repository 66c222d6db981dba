// Everything in optim/.
#pragma once

#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "optim/training_checkpoint.h"
