# SPDX-License-Identifier: Apache-2.0
"""Connecting to nsboxd's unix socket, for the sync and the asyncio client.

nsboxd also listens on an operator socket, OPERATOR_DIR/ beside its socket, that
only its own uid (root) can connect to: a flood of connects by other uids fills
the shared socket's listen queue, never that one's. It is tried first where it
is there and usable. A full listen queue (EAGAIN) is waited out for at most
CONNECT_BUDGET seconds, in tries of at most TRY_SECONDS: each try is a blocking
connect bounded by SO_SNDTIMEO, which the kernel wakes as soon as nsboxd
accepts; then a clear error."""
import errno
import os
import select
import socket
import struct
import time

from .errors import NsboxConnectionError

OPERATOR_DIR = "operator"
CONNECT_BUDGET = 2.0
TRY_SECONDS = 0.5


class QueueFullError(OSError):
    """The socket's listen queue stayed full for the whole budget."""


def budget(connect_timeout):
    """How long a full queue is waited out: connect_timeout, at most CONNECT_BUDGET."""
    if connect_timeout is None:
        return CONNECT_BUDGET
    return min(connect_timeout, CONNECT_BUDGET)


def connection_error(path, e):
    if isinstance(e, QueueFullError):
        return NsboxConnectionError("cannot reach nsboxd at %s: %s" % (path, e.strerror))
    return NsboxConnectionError("cannot reach nsboxd at %s: %s (is nsboxd running? set NSBOX_SOCKET "
                                "or pass socket=)" % (path, e.strerror or e))


def operator_socket_path(path):
    head, name = os.path.split(path)
    return os.path.join(head or ".", OPERATOR_DIR, name)


def _timeval(seconds):
    return struct.pack("ll", int(seconds), int(round((seconds % 1) * 1e6)))


def _connect_bounded(path, budget):
    deadline = time.monotonic() + budget
    pause = 0.025
    tries = 0
    while True:
        tries += 1
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            # A blocking socket: Python's timeout mode makes the fd non-blocking,
            # and a non-blocking connect fails at once on a full queue.
            wait = max(0.001, min(TRY_SECONDS, deadline - time.monotonic()))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(wait))
            s.connect(path)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(0))
            return s
        except OSError as e:
            s.close()
            if e.errno not in (errno.EAGAIN, errno.EINTR):
                raise
        except BaseException:
            s.close()
            raise
        left = deadline - time.monotonic()
        if left <= 0:
            raise QueueFullError(errno.EAGAIN, "its listen queue stayed full for %g s (%d tries: nsboxd is "
                                 "overloaded or other clients flood it); try again later" % (budget, tries))
        time.sleep(min(pause, left))
        pause *= 2


def connect(path, budget=CONNECT_BUDGET):
    """A connected, blocking socket to nsboxd at path (or to its operator socket)."""
    operator = operator_socket_path(path)
    if os.path.exists(operator):
        try:
            return _connect_bounded(operator, budget)
        except QueueFullError:
            raise
        except OSError:
            pass  # stale (nsboxd died) or not ours: the shared socket
    return _connect_bounded(path, budget)


def stale(sock):
    """True when an idle connection has something to read: nsboxd closed it
    (client_idle_timeout_seconds, shutdown), since it sends nothing unasked."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
