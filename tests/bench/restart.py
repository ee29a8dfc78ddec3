#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Daemon restart time with live sandboxes: nsboxd with live_restore on and N
sandboxes is killed (-9) or stopped (SIGTERM) and started again a few times;
the time is from the signal to the new nsboxd answering sandbox.list with all
N adopted, and then to a first exec in one of them. For comparison, the same
start without live restore, which removes the N sandboxes instead. Prints
medians and writes BUILD/bench-restart.json.

  /usr/bin/python3 tests/bench/restart.py --build build --sandboxes 100   (part of make bench)
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
sys.path.insert(0, os.path.join(HERE, "..", "integration", "daemon"))

POOL_BASE = 1_800_000_000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--image-dir", default="/var/lib/nsbox/images")
    p.add_argument("--sandboxes", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    os.environ["NSBOX_BUILD"] = os.path.abspath(a.build)
    os.environ["NSBOX_IMAGE_DIR"] = a.image_dir
    from test_service import Service  # reads the two variables above

    n = a.sandboxes
    common = ["--warm-pool", "0", "--max-sandboxes", str(n + 10), "--max-sandboxes-per-uid", str(n + 10),
              "--uid-pool-ranges", str(n + 10), "--memory-bytes", str(64 << 20), "--disk-bytes", str(16 << 20)]
    root = tempfile.mkdtemp(prefix="nsbox-bench-restart-")
    os.chmod(root, 0o755)
    svc = Service(root, extra_args=common + ["--live-restore", "1"], pool_base=POOL_BASE)
    # --uid-pool-ranges given twice: the last one wins over Service's own
    t = {"kill9_to_list_ms": [], "kill9_to_first_exec_ms": [], "sigterm_to_list_ms": [], "stop_ms": []}
    ids = []

    def restarted(kind):
        t0 = time.perf_counter()
        if kind == "kill9":
            svc.kill9()
        else:
            svc.terminate()
            t["stop_ms"].append((time.perf_counter() - t0) * 1e3)
        svc.start()
        listed = svc.call("sandbox.list")["count"]
        t1 = time.perf_counter()
        assert listed == n, "%d of %d sandboxes adopted" % (listed, n)
        r = svc.call("sandbox.exec", sandbox_id=ids[0], argv=["true"])
        assert r["exit_code"] == 0, r
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t0) * 1e3

    try:
        svc.start()
        t0 = time.perf_counter()
        for _ in range(n):
            ids.append(svc.call("sandbox.create")["sandbox_id"])
        create_s = time.perf_counter() - t0
        for _ in range(a.rounds):
            listed, first = restarted("kill9")
            t["kill9_to_list_ms"].append(listed)
            t["kill9_to_first_exec_ms"].append(first)
            listed, _ = restarted("sigterm")
            t["sigterm_to_list_ms"].append(listed)
        # Without live restore: the start after kill -9 removes the N sandboxes.
        svc.kill9()
        svc.extra_args = common
        t0 = time.perf_counter()
        svc.start()
        cleanup_ms = (time.perf_counter() - t0) * 1e3
        assert svc.call("sandbox.list")["count"] == 0
        svc.terminate()
    finally:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.extra_args = common
            svc.kill9()
            svc.start()
            svc.terminate()
        shutil.rmtree(root, ignore_errors=True)
    result = {name: round(statistics.median(v), 1) for name, v in t.items()}
    result.update({"sandboxes": n, "rounds": a.rounds, "create_all_s": round(create_s, 1),
                   "start_without_live_restore_ms": round(cleanup_ms, 1)})
    print("restart with %d live sandboxes (medians of %d rounds):" % (n, a.rounds))
    for key, value in result.items():
        print("  %-32s %s" % (key, value))
    with open(os.path.join(a.build, "bench-restart.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
