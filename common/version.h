/* SPDX-License-Identifier: Apache-2.0 */
/* The one version of nsbox's programs and protocol (server.info's version). */
#pragma once

/* A build may say more (make CFLAGS=-DNSBOX_VERSION='"0.1.0+local"'): the
 * live restore test runs two builds of different versions. */
#ifndef NSBOX_VERSION
#define NSBOX_VERSION "0.1.0"
#endif
