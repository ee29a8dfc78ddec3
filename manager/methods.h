#pragma once

#include "rpc.h"

extern const struct rpc_method nsboxd_methods[];
