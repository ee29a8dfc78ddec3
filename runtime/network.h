#pragma once

#include "error.h"

/* In a fresh network namespace: bring the loopback interface up. */
int network_loopback_up(nsbox_error_t **err);
