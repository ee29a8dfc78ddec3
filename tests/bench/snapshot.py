#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Snapshot and fork times: a sandbox with about 50 MB of file
changes (40 files of 1 MB and 2500 of 4 KB, as a pip install leaves) is
snapshotted and forked (snapshot + create from it) a few times over; prints
medians and writes BUILD/bench-snapshot.json.

Also measures the alternative the fork design rejected: copying the
snapshot into each fork's own writable layer (a tmpfs) instead of mounting
it as a shared read-only layer.

  /usr/bin/python3 tests/bench/snapshot.py --build build     (part of make bench)
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

FILL = ("mkdir -p big small && for i in $(seq 40); do head -c 1048576 /dev/urandom > big/$i; done && "
        "python3 -c \"import os\nfor i in range(2500): open('small/%d.py' % i, 'wb').write(os.urandom(4096))\"")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--image-dir", default="/var/lib/nsbox/images")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    os.environ["NSBOX_BUILD"] = os.path.abspath(a.build)
    os.environ["NSBOX_IMAGE_DIR"] = a.image_dir
    from conftest import Daemon  # reads the two variables above

    d = Daemon(extra_args=["--disk-bytes", str(256 << 20)])
    t = {"snapshot_ms": [], "fork_ms": [], "create_from_snapshot_ms": [], "plain_create_ms": [],
         "copy_as_upper_ms": [], "first_exec_in_fork_ms": []}
    try:
        with d.client() as c:
            parent = c.call("sandbox.create")["sandbox_id"]
            r = c.call("sandbox.exec", sandbox_id=parent, command=FILL, timeout_seconds=300)
            assert r["exit_code"] == 0, r
            size = None
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                snap = c.call("sandbox.snapshot", sandbox_id=parent)
                t1 = time.perf_counter()
                fork = c.call("sandbox.create", from_snapshot=snap["snapshot_id"])["sandbox_id"]
                t2 = time.perf_counter()
                r = c.call("sandbox.exec", sandbox_id=fork, command="ls small | wc -l")
                t3 = time.perf_counter()
                assert r["stdout"] == "2500\n", r
                size = snap["size_bytes"]
                t["snapshot_ms"].append((t1 - t0) * 1e3)
                t["create_from_snapshot_ms"].append((t2 - t1) * 1e3)
                t["fork_ms"].append((t2 - t0) * 1e3)
                t["first_exec_in_fork_ms"].append((t3 - t2) * 1e3)

                t0 = time.perf_counter()
                plain = \
                    c.call("sandbox.create", limits={"memory_bytes": 256 << 20})["sandbox_id"]
                t["plain_create_ms"].append((time.perf_counter() - t0) * 1e3)

                # The rejected design: the snapshot copied into a fresh tmpfs upper per fork.
                mnt = tempfile.mkdtemp(prefix="nsbox-bench-upper-")
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "bench", mnt], check=True)
                try:
                    layer = os.path.join(d.state, "snapshots", snap["snapshot_id"], "layer")
                    t0 = time.perf_counter()
                    subprocess.run(["cp", "-a", layer, os.path.join(mnt, "upper")], check=True)
                    t["copy_as_upper_ms"].append((time.perf_counter() - t0) * 1e3)
                finally:
                    subprocess.run(["umount", mnt], check=True)
                    os.rmdir(mnt)
                for sid in (fork, plain):
                    c.call("sandbox.remove", sandbox_id=sid, force=True)
                c.call("snapshot.remove", snapshot_id=snap["snapshot_id"])
            c.call("sandbox.remove", sandbox_id=parent, force=True)
    finally:
        d.stop()
    report = {k: round(statistics.median(v), 1) for k, v in t.items()}
    report["snapshot_size_bytes"] = size
    report["rounds"] = a.rounds
    print("snapshot and fork of a sandbox with %.1f MB of changes (median of %d):" % (size / 1e6, a.rounds))
    for k in t:
        print("  %-26s %8.1f ms" % (k, report[k]))
    with open(os.path.join(a.build, "bench-snapshot.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
