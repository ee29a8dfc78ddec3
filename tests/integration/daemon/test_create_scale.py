# SPDX-License-Identifier: Apache-2.0
"""Creating a sandbox costs the same however many fds nsboxd holds (five per
live sandbox, one per client): the setup child does not take a copy of
nsboxd's fd table, which the kernel would copy at clone and walk again at the
init's execve and at every fork of the init."""
import os

from conftest import Daemon, host_inits

# More than the 64 fds of a table the kernel has not had to grow.
MANAGER_FDS = 200


def status_field(pid, name):
    with open("/proc/%d/status" % pid) as f:
        return int(f.read().split(name + ":")[1].split()[0])


def test_sandbox_init_does_not_inherit_the_managers_fd_table():
    daemon = Daemon(["--warm-pool", "0"])
    clients = []
    try:
        # Every client is an fd of nsboxd: answered, so it has been accepted.
        for _ in range(MANAGER_FDS):
            c = daemon.client(timeout=30)
            c.call("server.info")
            clients.append(c)
        assert len(os.listdir("/proc/%d/fd" % daemon.proc.pid)) > MANAGER_FDS
        before = set(host_inits(daemon))
        sandbox_id = clients[0].call("sandbox.create")["sandbox_id"]
        (init,) = set(host_inits(daemon)) - before
        # The init holds a handful of its own fds (stdio, its control socket,
        # a signalfd and, for the moment it takes to fork a supervisor, the
        # two sockets of an exec slot nsboxd may be sending it), nothing of
        # nsboxd's...
        assert len(os.listdir("/proc/%d/fd" % init)) <= 8
        # ...and its table was never sized for nsboxd's: the kernel's
        # initial 64 slots.
        assert status_field(init, "FDSize") == 64
        r = clients[0].call("sandbox.exec", sandbox_id=sandbox_id, argv=["/bin/true"])
        assert r["exit_code"] == 0, r
        clients[0].call("sandbox.remove", sandbox_id=sandbox_id, force=True)
    finally:
        for c in clients:
            c.close()
        rc = daemon.stop()
    assert rc == 0, daemon.final_log[-4000:]
