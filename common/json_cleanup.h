#pragma once

#include <jansson.h>

#include "cleanup.h"

/* jansson provides json_decrefp() for scope-bound references. */
#define _cleanup_json_ _cleanup_(json_decrefp)
