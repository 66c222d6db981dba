// Everything in data/.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/sampler.h"
#include "data/text.h"
