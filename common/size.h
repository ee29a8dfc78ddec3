/* SPDX-License-Identifier: Apache-2.0 */
/* Sizes with units, as people write and read them: "512M" in, "512 MiB" out. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* "1048576", "512M", "512MiB", "1.5G", "64k", "2 GB": a number, then
 * optionally K, M, G or T (any case), each a power of 1024, optionally
 * followed by i and/or B ("KB" is 1024 bytes, as docker and systemd read
 * it). A bare number, or one ending in B, is bytes; a fraction of a byte
 * is dropped ("1.3M" is 1363148). 0, or -EINVAL for no number, a sign, an
 * unknown unit or more than 2^63 - 1 bytes. */
int size_parse(const char *text, uint64_t *out);

/* bytes as "512 MiB", "1.5 GiB", "1 TiB", "100 bytes": whole units where
 * they are whole, else one decimal (rounded down, so a limit is not
 * overstated). Returns out. */
char *size_format(uint64_t bytes, char *out, size_t size);
#define SIZE_FORMAT_MAX 32
