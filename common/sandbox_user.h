/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox's own user: the uid and gid its code runs as (not root), and whom a volume's files belong to.
 */
#pragma once

#define NSBOX_SANDBOX_USER 1000
