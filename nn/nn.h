// Everything in nn/.
#pragma once

#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/containers.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/gpt.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "nn/safetensors.h"
#include "nn/sequential.h"
