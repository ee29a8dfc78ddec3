#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Create times with mounts: a plain sandbox, one with a volume, one with a
host directory of the caller's, and one with both (no warm pool: a sandbox
with mounts never comes from it, so the plain one is made fresh too); and
the time volume.create takes (a sparse image and mkfs.ext4). Prints medians
and writes BUILD/bench-mounts.json.

  /usr/bin/python3 tests/bench/mounts.py --build build     (part of make bench)
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--image-dir", default="/var/lib/nsbox/images")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--volume-size", default="1G")
    a = p.parse_args()
    os.environ["NSBOX_BUILD"] = os.path.abspath(a.build)
    os.environ["NSBOX_IMAGE_DIR"] = a.image_dir
    from conftest import Daemon  # reads the two variables above

    project = tempfile.mkdtemp(prefix="nsbox-bench-project-", dir="/tmp")
    d = Daemon(extra_args=["--warm-pool", "0"])
    volume = {"volume": "bench", "path": "/workspace/data"}
    host = {"host_path": project, "path": "/workspace/project", "read_only": False}
    cases = {"plain_create_ms": None, "create_with_volume_ms": [volume],
             "create_with_host_dir_ms": [host], "create_with_both_ms": [volume, host]}
    t = {k: [] for k in cases}
    t["volume_create_ms"] = []
    try:
        with d.client() as c:
            for i in range(a.rounds):
                t0 = time.perf_counter()
                c.call("volume.create", name="v%d" % i, size=a.volume_size)
                t["volume_create_ms"].append((time.perf_counter() - t0) * 1e3)
                c.call("volume.remove", name="v%d" % i)
            c.call("volume.create", name="bench", size=a.volume_size)
            for _ in range(a.rounds):
                for name, mounts in cases.items():
                    t0 = time.perf_counter()
                    sid = c.call("sandbox.create", **({"mounts": mounts} if mounts else {}))["sandbox_id"]
                    t[name].append((time.perf_counter() - t0) * 1e3)
                    c.call("sandbox.remove", sandbox_id=sid, force=True)
            c.call("volume.remove", name="bench")
    finally:
        d.stop()
        shutil.rmtree(project, ignore_errors=True)
    report = {k: round(statistics.median(v), 1) for k, v in t.items()}
    report["rounds"] = a.rounds
    report["volume_size"] = a.volume_size
    print("create times with mounts, no warm pool (median of %d):" % a.rounds)
    for k in t:
        print("  %-26s %8.1f ms" % (k, report[k]))
    with open(os.path.join(a.build, "bench-mounts.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
