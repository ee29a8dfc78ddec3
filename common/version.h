/* SPDX-License-Identifier: Apache-2.0 */
/* The one version of nsbox's programs and protocol (server.info's version). */
#pragma once

#define NSBOX_VERSION "0.1.0"
