/* SPDX-License-Identifier: Apache-2.0 */
/* JSON files nsbox keeps on disk (sandbox records, snapshot and image
 * metadata), replaced whole. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

/* Write value (json_dumps flags) to path through a temporary file beside it
 * and a rename, so a reader sees the old file or the new one, never a torn
 * one; durable: the file synced before the rename, its directory after. On any failure the temporary file
 * is removed: a full disk must not leave it behind. */
int json_file_replace(const char *path, const json_t *value, size_t flags, bool durable, nsbox_error_t **err);
/* The same with the file's bytes as given (a journal of JSON lines). */
int file_replace(const char *path, const void *data, size_t len, bool durable, nsbox_error_t **err);
