#pragma once
/// @file mlakit.h
/// Umbrella header: everything a caller of MLAKit needs.

#include "mlakit/backend.h"
#include "mlakit/kv_format.h"
#include "mlakit/numeric.h"
#include "mlakit/prepared.h"
#include "mlakit/problems.h"
#include "mlakit/registry.h"
#include "mlakit/rope.h"
#include "mlakit/status.h"
#include "mlakit/types.h"
