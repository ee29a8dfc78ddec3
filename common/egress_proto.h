/* SPDX-License-Identifier: Apache-2.0 */
/* The control protocol between nsboxd and nsbox-egress (JSON messages over
 * a SOCK_SEQPACKET socket): its version. With live restore a next nsboxd
 * adopts the proxy its predecessor left only when both speak the same one
 * (the proxy says its own in the "adopted" event); any change to the
 * messages or to the fds the proxy keeps bumps it. */
#pragma once

#define EGRESS_PROTOCOL 1
