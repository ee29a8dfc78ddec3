# SPDX-License-Identifier: Apache-2.0
"""What a wakeup costs on this host: a 100-byte ping-pong over a unix socket
between two processes, both blocking, pinned to two different CPUs and
then to the same one, with the medians of 3000 round trips. The README's
"where the time goes" quotes it; not part of `make bench`.

    python3 tests/bench/pingpong.py
"""
import os
import socket
import statistics
import time

ROUNDS = 3000


def round_trip_us(client_cpu, server_cpu):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        a.close()
        os.sched_setaffinity(0, {server_cpu})
        while True:
            data = b.recv(4096)
            if not data:
                os._exit(0)
            b.sendall(data)
    b.close()
    os.sched_setaffinity(0, {client_cpu})
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter_ns()
        a.sendall(b"x" * 100)
        a.recv(4096)
        samples.append(time.perf_counter_ns() - t0)
    a.close()
    os.waitpid(pid, 0)
    return statistics.median(samples) / 1000


def main():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("one CPU only: nothing to compare")
        return
    across = round_trip_us(cpus[0], cpus[1])
    same = round_trip_us(cpus[0], cpus[0])
    print("unix socket round trip, median of %d: across CPUs %.1f us, on one CPU %.1f us" %
          (ROUNDS, across, same))


if __name__ == "__main__":
    main()
