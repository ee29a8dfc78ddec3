#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""nsbox side by side with bubblewrap, crun and podman, on the same image.

Everything runs in one process and interleaved: each round runs every
variant whose turn it is, in a rotating order, so drift of the machine (CPU
frequency, page cache, other tenants) hits all sides alike.  One-shot
variants are spread evenly over the warm rounds.

  /usr/bin/python3 tests/bench/bench.py --build build        (or: make bench)

Prints a table of medians (and p90) with the ratio of each figure to
bubblewrap's one-shot of the same command, checks the issue's targets, and
writes the table to BUILD/bench.md and BUILD/bench.json.
"""
import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from nsbox_client import Client  # noqa: E402

UID_RANGE = 65536 + 128  # nsboxd puts ranges this far apart (NSBOX_UID_STRIDE)
TRUE = ["/bin/true"]
PYTHON = ["python3", "-c", "print(1)"]
# Stateless python.run: served by the sandbox's fork server, which
# has these imported already; bwrap runs the same code in a fresh python3.
PANDAS_CODE = "import pandas, matplotlib.pyplot; print(1)"
PLOT_CODE = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\nprint(1)\n"
# Stateless calls made one right after another, per sample of that row.
BACK_TO_BACK = 5
BWRAP_PLOT_CODE = ("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.savefig('/tmp/figure_1.png')\n"
                   "print(1)\n")


def ms(ns):
    return ns / 1e6


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


# --- the bench's own nsboxd ----------------------------------------------------


class Daemon:
    def __init__(self, build, image_dir, uid_base, uid_ranges, log_path, warm_pool, max_sandboxes=256,
                 memory_commit_bytes=None, extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="nsbox-bench-")
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "nsbox.sock")
        self.log_path = log_path
        self.log = open(log_path, "wb")
        args = [os.path.join(build, "nsboxd"), "--socket", self.socket,
                "--state-dir", os.path.join(self.dir, "state"), "--image-dir", image_dir,
                "--log-level", "info", "--max-sandboxes", str(max_sandboxes),
                "--uid-pool-base", str(uid_base), "--uid-pool-ranges", str(uid_ranges)]
        if memory_commit_bytes is not None:
            args += ["--memory-commit-bytes", str(memory_commit_bytes)]
        if warm_pool is not None:
            args += ["--warm-pool", str(warm_pool)]
        args += list(extra_args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                with Client(self.socket, timeout=5) as c:
                    self.info = c.call("server.info")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nsboxd did not start:\n" + open(log_path, errors="replace").read())
                time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode


# --- crun ----------------------------------------------------------------------


def crun_bundle(rootfs, args, work):
    bundle = tempfile.mkdtemp(prefix="bundle-", dir=work)
    subprocess.run(["crun", "spec"], cwd=bundle, check=True, capture_output=True)
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["process"]["terminal"] = False
    config["process"]["args"] = args
    config["root"] = {"path": rootfs, "readonly": True}
    config["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                             "options": ["nosuid", "nodev", "mode=1777"]})
    with open(path, "w") as f:
        json.dump(config, f)
    return bundle


def crun_runner():
    """Runs crun on request (stdin: "BUNDLE ID" lines), answers "NS RC ERR".
    Started in a private mount namespace when the host's hybrid cgroup
    layout has to be hidden from crun."""
    for line in sys.stdin:
        bundle, cid = line.split()
        t0 = time.perf_counter_ns()
        p = subprocess.run(["crun", "run", "--bundle", bundle, cid], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t1 = time.perf_counter_ns()
        err = (p.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        sys.stdout.write(json.dumps([t1 - t0, p.returncode, p.stdout.decode(errors="replace"), err]) + "\n")
        sys.stdout.flush()


class Crun:
    """crun, straight on the host when it runs there; else in a private mount
    namespace where the cgroup2 mount of a hybrid host is unmounted (crun
    refuses hybrid hosts whose cgroup2 mount has controllers)."""

    def __init__(self, rootfs, work):
        self.note = ""
        self.error = None
        self.proc = None
        self.n = 0
        if shutil.which("crun") is None:
            self.error = "crun is not installed"
            return
        self.bundles = {"true": crun_bundle(rootfs, TRUE, work), "python": crun_bundle(rootfs, PYTHON, work)}
        runner = [sys.executable, os.path.abspath(__file__), "--crun-runner"]
        self.proc = subprocess.Popen(runner, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        _, rc, _, err = self.run_once("true")
        if rc == 0:
            return
        self.stop()
        first_error = err
        hidden = "umount /sys/fs/cgroup/unified 2>/dev/null; exec \"$@\""
        if os.path.ismount("/sys/fs/cgroup/unified"):
            self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", hidden,
                                          "sh", *runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True)
            _, rc, _, err = self.run_once("true")
            if rc == 0:
                self.note = ("crun refuses this hybrid host (\"%s\"); it runs in a private mount namespace "
                             "without /sys/fs/cgroup/unified, with its v1 cgroups" % first_error)
                return
            self.stop()
        self.error = "not runnable on this host: " + first_error

    def run_once(self, which):
        self.n += 1
        cid = "nsbox-bench-%d-%d" % (os.getpid(), self.n)
        self.proc.stdin.write("%s %s\n" % (self.bundles[which], cid))
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


# --- podman ----------------------------------------------------------------------


class Podman:
    """podman on the same image (its rootfs imported as a podman image):
    `run --rm` one-shots, `exec` into one running container, and the host
    memory an idle container takes. runc, because crun refuses a hybrid
    cgroup host; explicit ulimits no higher than the bench's own, because
    podman's defaults (nofile 1048576) need CAP_SYS_RESOURCE to set."""

    def __init__(self, rootfs, log):
        self.error = None
        self.image = self.container = None
        self.name = "nsbox-bench-%d" % os.getpid()
        missing = [t for t in ("podman", "runc") if shutil.which(t) is None]
        if missing:
            self.error = "%s not installed (make deps-test installs them)" % " and ".join(missing)
            return
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        nproc = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[0])
        self.flags = ["--runtime", "runc", "--network", "none", "--ulimit", "nofile=%d:%d" % nofile,
                      "--ulimit", "nproc=%d:%d" % (nproc, nproc)]
        log("podman: importing %s as an image" % rootfs)
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["podman", "import", "-q", "-", "localhost/%s:latest" % self.name],
                                  stdin=tar.stdout, capture_output=True, text=True)
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            self.error = "podman import failed: " + imported.stderr.strip()[-200:]
            return
        self.image = "localhost/%s:latest" % self.name
        self.container = self.start(self.name)
        if self.container is None:
            self.error = "podman run failed: " + self.last_error

    def start(self, name):
        """An idle container (sleep as its PID 1): its id, or None."""
        p = subprocess.run(["podman", "run", "-d", "--name", name, *self.flags, self.image, "sleep", "infinity"],
                           capture_output=True, text=True)
        self.last_error = p.stderr.strip()[-200:]
        return p.stdout.strip() if p.returncode == 0 else None

    def run_argv(self, argv):
        return ["podman", "run", "--rm", *self.flags, self.image, *argv]

    def exec_argv(self, argv):
        return ["podman", "exec", self.name, *argv]

    def idle_memory(self, n):
        """Host memory per idle container, counted as for a sandbox: the RSS
        of its processes (conmon and what runs in the container) and the
        kernel memory of its cgroup."""
        names = ["%s-idle-%d" % (self.name, i) for i in range(n)]
        ids = [cid for cid in (self.start(name) for name in names) if cid]
        try:
            time.sleep(2)
            rss = kmem = 0
            for cid in ids:
                conmon = subprocess.run(["podman", "inspect", "--format", "{{.State.ConmonPid}}", cid],
                                        capture_output=True, text=True).stdout.strip()
                pids = [int(conmon)] if conmon.isdigit() else []
                dirs = sandbox_cgroups(["libpod-" + cid])
                for d in dirs.values():
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        pids += [int(line) for line in f if line.strip()]
                    kmem += cgroup_memory({cid: d})[2]
                for pid in pids:
                    try:
                        rss += rollup(pid).get("Rss", 0)
                    except OSError:
                        pass
            return {"containers": len(ids), "rss_mib": rss / max(1, len(ids)) / 2**20,
                    "kmem_mib": kmem / max(1, len(ids)) / 2**20,
                    "headline_mib": (rss + kmem) / max(1, len(ids)) / 2**20}
        finally:
            for cid in ids:
                subprocess.run(["podman", "rm", "-f", "-t", "0", cid], capture_output=True)

    def stop(self):
        if self.container is not None:
            subprocess.run(["podman", "rm", "-f", "-t", "0", self.name], capture_output=True)
            self.container = None
        if self.image is not None:
            subprocess.run(["podman", "rmi", "-f", self.image], capture_output=True)
            self.image = None


# --- measurements ----------------------------------------------------------------


class Variant:
    def __init__(self, key, label, rounds, fn, base=None, settle=None):
        """settle: called untimed after each round, returns the ns it
        waited (or None): work a round leaves running after its answer (a
        remove's teardown) is not charged to the variant that runs next."""
        self.key, self.label, self.rounds, self.fn, self.base = key, label, rounds, fn, base
        self.settle = settle
        self.samples = []
        self.settle_samples = []
        self.failures = 0
        self.last_error = None
        self.skip_reason = None

    def run(self):
        try:
            ns, ok, why = self.fn()
        except Exception as e:  # a failed round is counted, never fatal
            ns, ok, why = None, False, "%s: %s" % (type(e).__name__, e)
        if ok:
            self.samples.append(ns)
        else:
            self.failures += 1
            self.last_error = why
        if self.settle is not None:
            waited = self.settle()
            if waited is not None:
                self.settle_samples.append(waited)


def timed_subprocess(argv, expect=b""):
    t0 = time.perf_counter_ns()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t1 = time.perf_counter_ns()
    ok = p.returncode == 0 and p.stdout.strip() == expect
    return t1 - t0, ok, "rc %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()[-300:])


def run_interleaved(variants, log):
    total = max(v.rounds for v in variants if v.skip_reason is None)
    active = [v for v in variants if v.skip_reason is None]
    for r in range(total):
        order = active[r % len(active):] + active[:r % len(active)]
        for v in order:
            # v.rounds samples spread evenly over `total` rounds.
            if len(v.samples) + v.failures < v.rounds and r * v.rounds // total != (r + 1) * v.rounds // total:
                v.run()
        if (r + 1) % max(1, total // 10) == 0:
            log("  round %d/%d" % (r + 1, total))


def concurrent_creates(socket_path, n):
    barrier = threading.Barrier(n + 1)
    results = [None] * n

    def worker(i):
        try:
            c = Client(socket_path, timeout=300)
        except Exception as e:
            barrier.wait()
            results[i] = (False, 0, "connect: %s" % e)
            return
        with c:
            barrier.wait()
            t0 = time.perf_counter_ns()
            try:
                sb = c.call("sandbox.create")
                results[i] = (True, time.perf_counter_ns() - t0, sb["sandbox_id"])
            except Exception as e:
                results[i] = (False, time.perf_counter_ns() - t0, "%s: %s" % (type(e).__name__, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter_ns()
    for t in threads:
        t.join()
    return time.perf_counter_ns() - t0, results


def concurrent_removes(socket_path, ids):
    errors = []

    def worker(chunk):
        with Client(socket_path, timeout=300) as c:
            for sid in chunk:
                try:
                    c.call("sandbox.remove", sandbox_id=sid, force=True)
                except Exception as e:
                    errors.append("%s: %s" % (sid, e))

    chunks = [ids[i::16] for i in range(16)]
    threads = [threading.Thread(target=worker, args=(ch,)) for ch in chunks if ch]
    t0 = time.perf_counter_ns()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter_ns() - t0, errors


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    return out


def rollup(pid):
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def sandbox_processes(uid_base, uid_ranges):
    """Host processes whose user namespace maps onto the bench daemon's uid
    pool, grouped by the range (one range per sandbox)."""
    groups = {}
    low, high = uid_base, uid_base + uid_ranges * UID_RANGE
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open("/proc/%d/uid_map" % pid) as f:
                first = f.readline().split()
            if len(first) < 2 or not low <= int(first[1]) < high:
                continue
            groups.setdefault(int(first[1]), []).append((pid, rollup(pid)))
        except (OSError, ValueError):
            continue
    return groups


def forkserver_memory(uid_base, uid_ranges):
    """Per sandbox with a fork server: the smaps_rollup of each of its fork
    server processes (host view): the server, and the reapers and processes
    forked ahead for its next calls. The server is the one whose parent is
    not one of them."""
    out = []
    for group in sandbox_processes(uid_base, uid_ranges).values():
        family = {}
        for pid, r in group:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
                with open("/proc/%d/stat" % pid, "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if len(argv) > 1 and argv[1].endswith(b"/forkserver.py"):
                family[pid] = (ppid, r)
        servers = [r for pid, (ppid, r) in family.items() if ppid not in family]
        if len(servers) == 1:
            out.append({"server": servers[0], "family": [r for _, r in family.values()]})
    return out


def wait_forkserver(client, sandbox_id, deadline_s=180):
    """Until stateless calls of the sandbox are served by its fork server:
    pandas found imported before the code's own import of it (never run,
    but it makes the heavy template serve the call where there are two)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        r = client.call("python.run", sandbox_id=sandbox_id,
                        code="import sys\nprint('pandas' in sys.modules)\nif False:\n    import pandas\n")
        if r.get("stdout", "").strip() == "True":
            return True
        time.sleep(0.3)
    return False


def sandbox_cgroups(ids):
    """The v1 memory cgroup (or v2 cgroup) dir of each sandbox id, by name."""
    ids = set(ids)
    found = {}
    for top in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, _ in os.walk(top):
            for d in list(dirnames):
                if d in ids:
                    found[d] = os.path.join(dirpath, d)
                    dirnames.remove(d)
            if len(found) == len(ids):
                return found
        if found:
            return found
    return found


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cgroup_memory(dirs):
    usage = kmem = 0
    n = 0
    for d in dirs.values():
        u = read_int(os.path.join(d, "memory.usage_in_bytes"))
        if u is None:
            u = read_int(os.path.join(d, "memory.current"))
        k = read_int(os.path.join(d, "memory.kmem.usage_in_bytes"))
        if k is None:
            try:
                with open(os.path.join(d, "memory.stat")) as f:
                    stat = dict(line.split() for line in f)
                k = sum(int(stat.get(key, 0)) for key in ("kernel", "sock"))
                if "kernel" not in stat:
                    k = sum(int(stat.get(key, 0)) for key in
                            ("kernel_stack", "pagetables", "percpu", "sock", "slab"))
            except OSError:
                k = None
        if u is not None:
            usage += u
            n += 1
        if k is not None:
            kmem += k
    return n, usage, kmem


# --- 1000 live sandboxes ------------------------------------------------------------

# 16 MiB of memory (the least allowed) and a 2 MiB disk (and /dev/shm, at
# most the disk): 20 MiB of RAM promised each, as the memory commit counts a sandbox's disk and
# /dev/shm (they are RAM), so a thousand fit the default commit of this host.
SCALE_LIMITS = {"memory_bytes": 16 << 20, "pids": 32, "disk_bytes": 2 << 20}
SCALE_WINDOW = 50  # creates whose latency is "at N live": the 50 around N


def scale_run(a, build, out_dir, log):
    """One nsboxd, a.scale sandboxes created one after another by one client
    (latency at ~0, half and all live, and the rate), then a warm exec in the
    last one and the memory of them all, idle. Limits are small
    (SCALE_LIMITS: a thousand of them fit nsboxd's default memory commit,
    the host's memory)."""
    n = a.scale
    base = a.uid_pool_base + a.uid_pool_ranges * UID_RANGE  # clear of the first daemon's ranges
    daemon = Daemon(build, a.image_dir, base, n + 64, os.path.join(out_dir, "bench-scale-nsboxd.log"), 0,
                    max_sandboxes=n + 16)
    ids, lat = [], []
    try:
        client = Client(daemon.socket, timeout=300)
        before = sandbox_processes(base, n + 64)
        mem_before = meminfo()
        log("scale: creating %d sandboxes one after another" % n)
        t0 = time.perf_counter_ns()
        failure = None
        for i in range(n):
            c0 = time.perf_counter_ns()
            try:
                ids.append(client.call("sandbox.create", limits=SCALE_LIMITS)["sandbox_id"])
            except Exception as e:
                failure = "create %d: %s: %s" % (i + 1, type(e).__name__, e)
                break
            lat.append(time.perf_counter_ns() - c0)
            if (i + 1) % (n // 5 or 1) == 0:
                log("  %d live" % (i + 1))
        wall = time.perf_counter_ns() - t0
        exec_lat = []
        if ids:
            for _ in range(a.scale_exec_rounds):
                e0 = time.perf_counter_ns()
                r = client.call("sandbox.exec", sandbox_id=ids[-1], argv=TRUE)
                if r["exit_code"] == 0:
                    exec_lat.append(time.perf_counter_ns() - e0)
        time.sleep(3)  # settle, as above
        groups = sandbox_processes(base, n + 64)
        n_groups = max(1, len(groups) - len(before))
        rss = sum(r.get("Rss", 0) for p in groups.values() for _, r in p)
        _, _, cg_kmem = cgroup_memory(sandbox_cgroups(ids))
        avail_drop = mem_before["MemAvailable"] - meminfo()["MemAvailable"]
        daemon_fds = len(os.listdir("/proc/%d/fd" % daemon.proc.pid))
        daemon_rss = rollup(daemon.proc.pid).get("Rss", 0)
        info = client.call("server.info")
        log("scale: removing them")
        r0 = time.perf_counter_ns()
        _, rm_errors = concurrent_removes(daemon.socket, ids)
        rm_wall = time.perf_counter_ns() - r0
        client.close()
    finally:
        rc = daemon.stop()

    def window(at):
        w = lat[max(0, at - SCALE_WINDOW // 2):at + SCALE_WINDOW // 2] if at else lat[:SCALE_WINDOW]
        return (ms(statistics.median(w)), ms(percentile(w, 0.9))) if w else (None, None)

    low, half, full = window(0), window(n // 2), window(len(lat) - SCALE_WINDOW // 2)
    return {
        "n": n, "created": len(ids), "failure": failure, "daemon_rc": rc,
        "seconds": wall / 1e9, "per_second": len(ids) / (wall / 1e9) if wall else 0,
        "create_ms_at_0": low, "create_ms_at_half": half, "create_ms_at_n": full,
        "growth": full[0] / low[0] if full[0] and low[0] else None,
        "exec_true_ms": (ms(statistics.median(exec_lat)), ms(percentile(exec_lat, 0.9))) if exec_lat else None,
        "exec_failures": a.scale_exec_rounds - len(exec_lat) if ids else None,
        "memory_mib": ((rss + cg_kmem) / n_groups) / 2**20,
        "rss_mib": rss / n_groups / 2**20, "cgroup_kmem_mib": cg_kmem / n_groups / 2**20,
        "memavailable_drop_mib": avail_drop / n_groups / 2**20,
        "daemon_fds": daemon_fds, "daemon_rss_mib": daemon_rss / 2**20,
        "memory_committed_bytes": info.get("memory_committed_bytes"),
        "memory_commit_limit_bytes": info.get("memory_commit_limit_bytes"),
        "remove_seconds": rm_wall / 1e9, "remove_failures": len(rm_errors),
    }


SCALE_GROWTH_TARGET = 2.0  # create latency at N live / at ~0 live


def scale_markdown(sc):
    if sc is None:
        return []
    n = sc["n"]

    def pair(p):
        return "%.1f / %.1f ms" % p if p and p[0] is not None else "–"
    growth = sc["growth"]
    lines = ["", "| %d live sandboxes (16 MiB, 32 pids, 2 MiB disk each: 20 MiB of RAM promised with /dev/shm), created "
             "one after another | value "
             "| target |" % n, "|---|---:|---|"]
    lines.append("| created | %d of %d | all %s |" % (sc["created"], n, "met" if sc["created"] == n else
                                                         "MISSED: " + str(sc["failure"])[:120]))
    lines.append("| creations per second (one client, sequential) | %.1f (%.1f s) | |" % (sc["per_second"],
                                                                                         sc["seconds"]))
    lines.append("| create latency at ~0 live (first %d), median / p90 | %s | |" % (SCALE_WINDOW,
                                                                                   pair(sc["create_ms_at_0"])))
    lines.append("| create latency at %d live, median / p90 | %s | |" % (n // 2, pair(sc["create_ms_at_half"])))
    lines.append("| create latency at %d live (last %d), median / p90 | %s | |" % (n, SCALE_WINDOW,
                                                                                 pair(sc["create_ms_at_n"])))
    lines.append("| … growth: at %d live / at ~0 live | %s | ≤ %.1f× %s |" % (
        n, "%.2f×" % growth if growth else "–", SCALE_GROWTH_TARGET,
        "met" if growth and growth <= SCALE_GROWTH_TARGET else "MISSED"))
    lines.append("| warm exec /bin/true in the last one at %d live, median / p90 | %s | |" % (
        n, pair(sc["exec_true_ms"])))
    lines.append("| host memory per idle sandbox at %d live: RSS + cgroup kernel memory (RSS / kernel) | "
                 "%.2f MiB (%.2f / %.2f) | ≤ 2 MiB %s |" % (n, sc["memory_mib"], sc["rss_mib"],
                                                           sc["cgroup_kmem_mib"],
                                                           "met" if sc["memory_mib"] <= 2 else "MISSED"))
    lines.append("| … cross-check: host MemAvailable drop per sandbox | %.2f MiB | |" % sc["memavailable_drop_mib"])
    lines.append("| nsboxd at %d live: open fds / RSS | %d / %.1f MiB | |" % (n, sc["daemon_fds"],
                                                                          sc["daemon_rss_mib"]))
    lines.append("| memory commit at %d live (server.info) | %.1f of %.1f GiB | |" % (
        n, (sc["memory_committed_bytes"] or 0) / 2**30, (sc["memory_commit_limit_bytes"] or 0) / 2**30))
    lines.append("| removing all of them (16 clients) | %.2f s, %d failures | |" % (sc["remove_seconds"],
                                                                                  sc["remove_failures"]))
    return lines


# --- network egress ------------------------------------------------------

FIRST_REQUEST = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], 80), timeout=30)
s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
data = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    data += c
print(data.split(b"\r\n")[0].decode())
"""


def network_run(a, build, out_dir, log):
    """Egress cost, on its own nsboxd and upstream.py's test-made upstream:
    create with and without network (interleaved), then in each fresh
    sandbox the same python script, which in the network one makes the first
    HTTP request through the proxy (resolving allowed.test through it) and
    in the plain one fails at once (no route): the difference is the first
    request's cost; then remove."""
    import upstream
    n = a.network_rounds
    base = a.uid_pool_base + (a.uid_pool_ranges + a.scale + 64) * UID_RANGE
    up = upstream.Upstream().start()
    cfg_dir = tempfile.mkdtemp(prefix="nsbox-bench-net-")
    cfg = os.path.join(cfg_dir, "nsboxd.json")
    with open(cfg, "w") as f:
        json.dump({"network_policies": {"bench": {"allow": ["allowed.test"]}},
                   "egress_dns_servers": upstream.DNS}, f)
    daemon = None
    res = {"n": n, "failures": 0, "first_error": None}
    keys = ("create_none", "create_net", "exec_none", "exec_net", "remove_none", "remove_net")
    lat = {k: [] for k in keys}
    try:
        daemon = Daemon(build, a.image_dir, base, 64, os.path.join(out_dir, "bench-network-nsboxd.log"), 0,
                        extra_args=["--config", cfg])
        client = Client(daemon.socket, timeout=300)
        log("network: %d rounds of create / first request / remove, with and without network" % n)
        for i in range(n):
            for kind in (("none", "net") if i % 2 == 0 else ("net", "none")):
                t0 = time.perf_counter_ns()
                try:
                    sid = client.call("sandbox.create", **({"network": "bench"} if kind == "net" else {}))[
                        "sandbox_id"]
                except Exception as e:
                    res["failures"] += 1
                    res["first_error"] = res["first_error"] or "create: %s" % e
                    continue
                t1 = time.perf_counter_ns()
                r = client.call("sandbox.exec", sandbox_id=sid, timeout_seconds=60,
                                argv=["python3", "-c", FIRST_REQUEST, "allowed.test"])
                t2 = time.perf_counter_ns()
                ok = (r["stdout"].startswith("HTTP/1.1 200") if kind == "net" else r["exit_code"] != 0)
                client.call("sandbox.remove", sandbox_id=sid, force=True)
                t3 = time.perf_counter_ns()
                if not ok:
                    res["failures"] += 1
                    res["first_error"] = res["first_error"] or "%s exec: %s" % (kind, (r["stdout"] + r["stderr"])[-200:])
                    continue
                lat["create_" + kind].append(t1 - t0)
                lat["exec_" + kind].append(t2 - t1)
                lat["remove_" + kind].append(t3 - t2)
        client.close()
    except Exception as e:
        res["first_error"] = res["first_error"] or "%s: %s" % (type(e).__name__, e)
        res["failures"] += 1
    finally:
        res["daemon_rc"] = daemon.stop() if daemon is not None else None
        up.stop()
        shutil.rmtree(cfg_dir, ignore_errors=True)
    for k in keys:
        v = lat[k]
        res[k + "_ms"] = (ms(statistics.median(v)), ms(percentile(v, 0.9))) if v else None
    return res


def network_markdown(nt):
    if nt is None:
        return []

    def pair(p):
        return "%.1f / %.1f ms" % p if p else "–"

    def diff(a, b):
        return "%+.1f ms" % (nt[a][0] - nt[b][0]) if nt[a] and nt[b] else "–"
    lines = ["", "| network egress, %d rounds each, interleaved, median / p90 | without network | "
             "with network (policy) | difference |" % nt["n"], "|---|---:|---:|---:|"]
    lines.append("| sandbox.create | %s | %s | %s |" % (pair(nt["create_none_ms"]), pair(nt["create_net_ms"]),
                                                       diff("create_net_ms", "create_none_ms")))
    lines.append("| first exec in it: python3 GET http://allowed.test/ (DNS + HTTP through the proxy; "
                 "without network: fails at once) | %s | %s | %s |" % (
                     pair(nt["exec_none_ms"]), pair(nt["exec_net_ms"]), diff("exec_net_ms", "exec_none_ms")))
    lines.append("| sandbox.remove | %s | %s | %s |" % (pair(nt["remove_none_ms"]), pair(nt["remove_net_ms"]),
                                                       diff("remove_net_ms", "remove_none_ms")))
    if nt["failures"]:
        lines.append("| failures | %d: %s | | |" % (nt["failures"], str(nt["first_error"])[:160].replace("|", "/").replace("\n", " ")))
    return lines


BROWSER_PAGE = "data:text/html,<body style='background:rgb(255,0,0)'><h1>nsbox bench</h1></body>"


def browser_run(a, build, out_dir, log):
    """Headless Chromium (the browser image) on its own nsboxd: sandbox.create
    to the first browser.screenshot (Chromium starts inside that call), a
    navigate + screenshot round trip in a warm browser sandbox, and the memory
    of idle browser sandboxes (their cgroups' memory.current after a first
    screenshot); beside the same Chromium run by bubblewrap on the same image
    for one screenshot (--screenshot: start, render, write the PNG, exit)."""
    rootfs = os.path.join(a.image_dir, "browser", "rootfs")
    res = {"n": a.browser_rounds, "failures": 0, "first_error": None}
    if not os.path.isdir(rootfs):
        res["first_error"] = "no browser image in %s (make image IMAGE=browser)" % a.image_dir
        res["failures"] = 1
        return res
    n = a.browser_rounds
    base = a.uid_pool_base + (a.uid_pool_ranges + a.scale + 128) * UID_RANGE
    lat = {"first_shot": [], "bwrap_shot": [], "round_trip": []}
    work = tempfile.mkdtemp(prefix="nsbox-bench-browser-")
    bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc",
             "--dev", "/dev", "--tmpfs", "/tmp", "--bind", work, "/tmp/out", "--setenv", "HOME", "/tmp",
             "/usr/lib/chromium/chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=/tmp/profile",
             "--window-size=320,200", "--screenshot=/tmp/out/shot.png", BROWSER_PAGE]
    daemon = None
    try:
        daemon = Daemon(build, a.image_dir, base, 64, os.path.join(out_dir, "bench-browser-nsboxd.log"), 0)
        client = Client(daemon.socket, timeout=300)
        log("browser: %d rounds of create + first screenshot, and bwrap's Chromium --screenshot, interleaved" % n)
        idle = []
        for i in range(n):
            for kind in (("nsbox", "bwrap") if i % 2 == 0 else ("bwrap", "nsbox")):
                try:
                    if kind == "bwrap":
                        shot = os.path.join(work, "shot.png")
                        if os.path.exists(shot):
                            os.unlink(shot)
                        t0 = time.perf_counter_ns()
                        p = subprocess.run(bwrap, capture_output=True, timeout=120)
                        t1 = time.perf_counter_ns()
                        if not os.path.exists(shot):
                            raise RuntimeError("bwrap chromium wrote no PNG: %s" % p.stderr.decode()[-200:])
                        lat["bwrap_shot"].append(t1 - t0)
                        continue
                    t0 = time.perf_counter_ns()
                    sid = client.call("sandbox.create", image="browser", limits={"memory_bytes": "1G"})["sandbox_id"]
                    client.call("browser.screenshot", sandbox_id=sid, url=BROWSER_PAGE, width=320, height=200)
                    t1 = time.perf_counter_ns()
                    lat["first_shot"].append(t1 - t0)
                    idle.append(sid)
                except Exception as e:
                    res["failures"] += 1
                    res["first_error"] = res["first_error"] or "%s: %s" % (kind, e)
        if idle:
            for i in range(n):
                t0 = time.perf_counter_ns()
                client.call("browser.navigate", sandbox_id=idle[0], url=BROWSER_PAGE + "<!--%d-->" % i)
                client.call("browser.screenshot", sandbox_id=idle[0], width=320, height=200)
                lat["round_trip"].append(time.perf_counter_ns() - t0)
            time.sleep(2)  # idle: what Chromium keeps once the page is drawn
            dirs = sandbox_cgroups(idle)
            mem = [read_int(os.path.join(d, "memory.current")) or read_int(os.path.join(d, "memory.usage_in_bytes"))
                   for d in dirs.values()]
            mem = [m for m in mem if m]
            res["idle_sandboxes"] = len(mem)
            res["idle_memory_mib"] = statistics.median(mem) / 2**20 if mem else None
        for sid in idle:
            client.call("sandbox.remove", sandbox_id=sid, force=True)
        client.close()
    except Exception as e:
        res["first_error"] = res["first_error"] or "%s: %s" % (type(e).__name__, e)
        res["failures"] += 1
    finally:
        res["daemon_rc"] = daemon.stop() if daemon is not None else None
        shutil.rmtree(work, ignore_errors=True)
    for k, v in lat.items():
        res[k + "_ms"] = (ms(statistics.median(v)), ms(percentile(v, 0.9))) if v else None
    return res


def browser_markdown(br):
    if br is None:
        return []

    def pair(p):
        return "%.0f / %.0f ms" % p if p else "–"
    lines = ["", "| browser image (headless Chromium), %d rounds, median / p90 | value |" % br["n"], "|---|---:|",
             "| sandbox.create + first browser.screenshot (Chromium starts in it) | %s |" % pair(br["first_shot_ms"]),
             "| bwrap one-shot: the same Chromium, --screenshot of the same page | %s |" % pair(br["bwrap_shot_ms"]),
             "| warm browser sandbox: browser.navigate + browser.screenshot | %s |" % pair(br["round_trip_ms"])]
    if br.get("idle_memory_mib") is not None:
        lines.append("| memory of an idle browser sandbox after its first screenshot (cgroup, median of %d) "
                     "| %.0f MiB |" % (br["idle_sandboxes"], br["idle_memory_mib"]))
    if br["failures"]:
        lines.append("| failures | %d: %s |" % (br["failures"], str(br["first_error"])[:160].replace("|", "/")
                                                .replace("\n", " ")))
    return lines


# --- the run ---------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--image-dir", default="/var/lib/nsbox/images")
    ap.add_argument("--image", default="python")
    ap.add_argument("--oneshot-rounds", type=int, default=30)
    ap.add_argument("--warm-rounds", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--warm-pool", type=int, default=None, help="nsboxd --warm-pool (default: nsboxd's own)")
    ap.add_argument("--uid-pool-base", type=int, default=2000000000)
    ap.add_argument("--uid-pool-ranges", type=int, default=512)
    ap.add_argument("--scale", type=int, default=1000, help="live sandboxes of the scale section (0: skip it)")
    ap.add_argument("--scale-exec-rounds", type=int, default=100)
    ap.add_argument("--network-rounds", type=int, default=30,
                    help="rounds of the network egress section (0: skip it)")
    ap.add_argument("--browser-rounds", type=int, default=10,
                    help="rounds of the browser section, on the browser image (0: skip it)")
    ap.add_argument("--out", default=None, help="dir for bench.md/bench.json (default: the build dir)")
    ap.add_argument("--reproduce", default=None, help="the command printed under the table")
    ap.add_argument("--no-podman", dest="podman", action="store_false", help="leave podman out")
    ap.add_argument("--podman-idle", type=int, default=10, help="idle podman containers measured for memory")
    ap.add_argument("--crun-runner", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.crun_runner:
        return crun_runner()

    build = os.path.abspath(a.build)
    out_dir = os.path.abspath(a.out or build)
    rootfs = os.path.join(a.image_dir, a.image, "rootfs")
    reproduce = a.reproduce or "/usr/bin/python3 tests/bench/bench.py --build %s" % os.path.relpath(build, REPO)
    if os.geteuid() != 0:
        sys.exit("bench: run as root (nsboxd, bwrap with --unshare-all and crun need it)")
    for tool in ("bwrap",):
        if shutil.which(tool) is None:
            sys.exit("bench: %s is missing (make deps-bench installs it)" % tool)
    if not os.path.isdir(rootfs):
        sys.exit("bench: no image at %s (make image builds it)" % rootfs)

    started = time.monotonic()

    def log(msg):
        print("[%6.1fs] %s" % (time.monotonic() - started, msg), flush=True)

    work = tempfile.mkdtemp(prefix="nsbox-bench-work-")
    # 200 idle sandboxes of the default 512 MiB promise 100 GiB: this part
    # measures creation, not memory use, so nsboxd may overcommit (1 PiB)
    # instead of refusing at the host's memory (memory_commit_bytes).
    daemon = Daemon(build, a.image_dir, a.uid_pool_base, a.uid_pool_ranges,
                    os.path.join(out_dir, "bench-nsboxd.log"), a.warm_pool, memory_commit_bytes=1 << 50)
    crun = None
    podman = None
    podman_memory = None
    forkserver = None
    try:
        log("nsboxd %s on %s (cgroup %s, uid isolation %s)" % (daemon.info.get("version"), daemon.socket,
                                                               daemon.info.get("cgroup"),
                                                               daemon.info.get("uid_isolation")))
        crun = Crun(rootfs, work)
        log("crun: " + ("runs" if crun.error is None else crun.error) + (" — " + crun.note if crun.note else ""))
        podman = Podman(rootfs, log) if a.podman else None
        if podman is not None:
            log("podman: " + ("runs" if podman.error is None else podman.error))

        client = Client(daemon.socket, timeout=300)
        warm = client.call("sandbox.create")["sandbox_id"]
        client.call("python.run", sandbox_id=warm, code="x = 0", stateful=True)
        nsbox = os.path.join(build, "nsbox")
        bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc",
                 "--dev", "/dev", "--tmpfs", "/tmp", "--"]
        # matplotlib in bwrap gets the image's prebuilt font cache, writable
        # (read-only, matplotlib would rebuild it in a temporary dir each run),
        # as a sandbox has it.
        mpl_cache = os.path.join(work, "mpl")
        shutil.copytree(os.path.join(rootfs, "tmp", ".matplotlib"), mpl_cache)
        bwrap_mpl = bwrap[:-1] + ["--bind", mpl_cache, "/tmp/.matplotlib", "--setenv", "MPLCONFIGDIR",
                                  "/tmp/.matplotlib", "--"]
        forkserver_ok = wait_forkserver(client, warm)
        log("fork server of the warm sandbox: " + ("serving" if forkserver_ok else "NOT serving"))

        def settle_removals():
            """Wait until nsboxd has ended every sandbox it answered removed
            (server.load's sandboxes_ending): the kernel's teardown after a
            remove's answer. None from an nsboxd without the field."""
            t0 = time.perf_counter_ns()
            deadline = time.monotonic() + 10
            while True:
                ending = client.call("server.load").get("sandboxes_ending")
                if ending is None:
                    return None
                if ending == 0 or time.monotonic() > deadline:
                    return time.perf_counter_ns() - t0
                time.sleep(0.0005)

        def c_exec(argv, expect):
            def f():
                t0 = time.perf_counter_ns()
                r = client.call("sandbox.exec", sandbox_id=warm, argv=argv)
                t1 = time.perf_counter_ns()
                return t1 - t0, r["exit_code"] == 0 and r["stdout"].strip() == expect, r["stderr"][-300:]
            return f

        def c_create_exec_remove(argv, expect):
            def f():
                t0 = time.perf_counter_ns()
                sid = client.call("sandbox.create")["sandbox_id"]
                r = client.call("sandbox.exec", sandbox_id=sid, argv=argv)
                client.call("sandbox.remove", sandbox_id=sid, force=True)
                t1 = time.perf_counter_ns()
                return t1 - t0, r["exit_code"] == 0 and r["stdout"].strip() == expect, r["stderr"][-300:]
            return f

        stateful_count = [0]

        def c_stateful():
            t0 = time.perf_counter_ns()
            r = client.call("python.run", sandbox_id=warm, code="x += 1", stateful=True)
            t1 = time.perf_counter_ns()
            if r.get("status") == "ok":
                stateful_count[0] += 1
            return t1 - t0, r.get("status") == "ok", r.get("stderr", "")[-300:]

        def c_stateless(code, want_image=False):
            def f():
                t0 = time.perf_counter_ns()
                r = client.call("python.run", sandbox_id=warm, code=code)
                t1 = time.perf_counter_ns()
                images = [o for o in r.get("outputs", []) if o.get("type") == "image"]
                ok = r.get("status") == "ok" and r.get("stdout", "").strip() == "1" and \
                    (len(images) == 1 if want_image else not images)
                return t1 - t0, ok, r.get("stderr", "")[-300:]
            return f

        def c_stateless_back_to_back(n):
            """n stateless calls one right after another: the time per call.
            Each call finds what the one before it left to do (its fork
            server's forks for the next call) still running or done."""
            def f():
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    r = client.call("python.run", sandbox_id=warm, code="print(1)")
                    if r.get("status") != "ok" or r.get("stdout", "").strip() != "1":
                        return 0, False, r.get("stderr", "")[-300:]
                return (time.perf_counter_ns() - t0) // n, True, ""
            return f

        def podman_fn(argv_of, argv, expect=b""):
            return lambda: timed_subprocess(argv_of(argv), expect)

        # Pause and resume of a sandbox with its interpreter running (after its
        # first pause: on cgroup v1 that one also makes its freezer dir).
        paused = client.call("sandbox.create")["sandbox_id"]
        client.call("python.run", sandbox_id=paused, code="y = 0", stateful=True)
        client.call("sandbox.pause", sandbox_id=paused)

        def c_pause_or_resume(timed):
            def f():
                client.call("sandbox.resume" if timed == "sandbox.pause" else "sandbox.pause", sandbox_id=paused)
                t0 = time.perf_counter_ns()
                r = client.call(timed, sandbox_id=paused)
                t1 = time.perf_counter_ns()
                want = "paused" if timed == "sandbox.pause" else "running"
                return t1 - t0, r["state"] == want, r["state"]
            return f

        def crun_fn(which, expect):
            def f():
                ns, rc, out, err = crun.run_once(which)
                return ns, rc == 0 and out.strip() == expect, "rc %d: %s" % (rc, err)
            return f

        O, W = a.oneshot_rounds, a.warm_rounds
        variants = [
            Variant("host_true", "host /bin/true, no sandbox (spawn cost of the driver)", O,
                    lambda: timed_subprocess(TRUE), "bwrap_true"),
            Variant("bwrap_true", "bwrap one-shot /bin/true", O, lambda: timed_subprocess(bwrap + TRUE),
                    "bwrap_true"),
            Variant("bwrap_python", "bwrap one-shot python3 -c 'print(1)'", O,
                    lambda: timed_subprocess(bwrap + PYTHON, b"1"), "bwrap_python"),
            Variant("crun_true", "crun one-shot /bin/true", O, crun_fn("true", ""), "bwrap_true"),
            Variant("crun_python", "crun one-shot python3 -c 'print(1)'", O, crun_fn("python", "1"),
                    "bwrap_python"),
            Variant("run_true", "nsbox run -- /bin/true (CLI, through the daemon)", O,
                    lambda: timed_subprocess([nsbox, "--socket", daemon.socket, "run", "--"] + TRUE),
                    "bwrap_true", settle=settle_removals),
            Variant("run_python", "nsbox run -- python3 -c 'print(1)'", O,
                    lambda: timed_subprocess([nsbox, "--socket", daemon.socket, "run", "--"] + PYTHON, b"1"),
                    "bwrap_python", settle=settle_removals),
            Variant("podman_run_true", "podman run --rm /bin/true", O,
                    podman and podman_fn(podman.run_argv, TRUE), "bwrap_true"),
            Variant("podman_run_python", "podman run --rm python3 -c 'print(1)'", O,
                    podman and podman_fn(podman.run_argv, PYTHON, b"1"), "bwrap_python"),
            Variant("podman_exec_true", "podman exec (running container) /bin/true", O,
                    podman and podman_fn(podman.exec_argv, TRUE), "bwrap_true"),
            Variant("podman_exec_python", "podman exec (running container) python3 -c 'print(1)'", O,
                    podman and podman_fn(podman.exec_argv, PYTHON, b"1"), "bwrap_python"),
            Variant("cli_exec_true", "nsbox exec ID /bin/true (CLI, running sandbox)", O,
                    lambda: timed_subprocess([nsbox, "--socket", daemon.socket, "exec", warm] + TRUE),
                    "bwrap_true"),
            Variant("cer_true", "nsbox create + exec /bin/true + remove (client)", O,
                    c_create_exec_remove(TRUE, ""), "bwrap_true", settle=settle_removals),
            Variant("cer_python", "nsbox create + exec python3 -c 'print(1)' + remove", O,
                    c_create_exec_remove(PYTHON, "1"), "bwrap_python", settle=settle_removals),
            Variant("exec_true", "nsbox warm exec /bin/true", W, c_exec(TRUE, ""), "bwrap_true"),
            Variant("exec_python", "nsbox warm exec python3 -c 'print(1)'", W, c_exec(PYTHON, "1"),
                    "bwrap_python"),
            Variant("stateful", "nsbox python.run stateful x += 1", W, c_stateful, "bwrap_true"),
            Variant("bwrap_pandas", "bwrap one-shot python3 -c '%s'" % PANDAS_CODE, O,
                    lambda: timed_subprocess(bwrap_mpl + ["python3", "-c", PANDAS_CODE], b"1"), "bwrap_pandas"),
            Variant("bwrap_plot", "bwrap one-shot python3: matplotlib plot saved as PNG", O,
                    lambda: timed_subprocess(bwrap_mpl + ["python3", "-c", BWRAP_PLOT_CODE], b"1"),
                    "bwrap_plot"),
            Variant("stateless_python", "nsbox python.run stateless print(1) (fork server)", W,
                    c_stateless("print(1)"), "bwrap_python"),
            Variant("stateless_b2b", "nsbox python.run stateless print(1), %d back to back (per call)" % BACK_TO_BACK,
                    O, c_stateless_back_to_back(BACK_TO_BACK), "bwrap_python"),
            Variant("podman_exec_pandas", "podman exec (running container) python3 -c '%s'" % PANDAS_CODE, O,
                    podman and podman_fn(podman.exec_argv, ["env", "MPLCONFIGDIR=/tmp/.matplotlib", "python3", "-c",
                                                            PANDAS_CODE], b"1"), "bwrap_pandas"),
            Variant("podman_exec_plot", "podman exec (running container) python3: matplotlib plot saved as PNG", O,
                    podman and podman_fn(podman.exec_argv, ["env", "MPLCONFIGDIR=/tmp/.matplotlib", "python3", "-c",
                                                            BWRAP_PLOT_CODE], b"1"), "bwrap_plot"),
            Variant("stateless_pandas", "nsbox python.run stateless %s (fork server)" % PANDAS_CODE, W,
                    c_stateless(PANDAS_CODE), "bwrap_pandas"),
            Variant("stateless_plot", "nsbox python.run stateless matplotlib plot, PNG image returned (fork "
                    "server)", W, c_stateless(PLOT_CODE, want_image=True), "bwrap_plot"),
            Variant("pause", "nsbox sandbox.pause (cgroup freezer)", W,
                    c_pause_or_resume("sandbox.pause"), "bwrap_true"),
            Variant("resume", "nsbox sandbox.resume", W, c_pause_or_resume("sandbox.resume"), "bwrap_true"),
        ]
        if crun.error is not None:
            for v in variants:
                if v.key.startswith("crun_"):
                    v.skip_reason = "crun: " + crun.error
        for v in variants:
            if v.key.startswith("podman_") and (podman is None or podman.error is not None):
                v.skip_reason = "podman: " + (podman.error if podman else "skipped (--no-podman)")
        log("interleaved rounds: %d warm, %d one-shot per variant, %d variants" %
            (W, O, sum(v.skip_reason is None for v in variants)))
        run_interleaved(variants, log)
        if podman is not None and podman.error is None and a.podman_idle > 0:
            podman_memory = podman.idle_memory(a.podman_idle)
            log("podman: %d idle containers, %.2f MiB each" % (podman_memory["containers"],
                                                                podman_memory["headline_mib"]))
        # The fork servers' memory: the warm sandbox's and two more, so that
        # what the servers share (the image's files in the page cache) shows.
        extra = [client.call("sandbox.create")["sandbox_id"] for _ in range(2)]
        for sid in extra:
            wait_forkserver(client, sid)
        time.sleep(2)  # each server forks the next call's processes once the last call is over
        servers = forkserver_memory(a.uid_pool_base, a.uid_pool_ranges)
        for sid in extra:
            client.call("sandbox.remove", sandbox_id=sid, force=True)
        if servers:
            def avg(values):
                values = list(values)
                return sum(values) / len(values) / 2**20

            forkserver = {
                "sandboxes": len(servers),
                "processes": avg(len(s["family"]) for s in servers) * 2**20,
                "server_rss_mib": avg(s["server"].get("Rss", 0) for s in servers),
                "server_anon_mib": avg(s["server"].get("Anonymous", 0) for s in servers),
                "server_file_mib": avg(s["server"].get("Rss", 0) - s["server"].get("Anonymous", 0)
                                       for s in servers),
                "sandbox_anon_mib": avg(sum(r.get("Pss_Anon", 0) for r in s["family"]) for s in servers),
                "sandbox_file_pss_mib": avg(sum(r.get("Pss_File", 0) for r in s["family"]) for s in servers),
                "serving": forkserver_ok,
            }
            log("fork servers of %d sandboxes: server RSS %.1f MiB (anonymous %.1f, file %.1f); per sandbox "
                "anonymous %.1f MiB, its share of file pages %.1f MiB" % (
                    len(servers), forkserver["server_rss_mib"], forkserver["server_anon_mib"],
                    forkserver["server_file_mib"], forkserver["sandbox_anon_mib"],
                    forkserver["sandbox_file_pss_mib"]))
        final = client.call("python.run", sandbox_id=warm, code="x", stateful=True).get("result")
        stateful_ok = final == str(stateful_count[0])
        if not stateful_ok:
            log("stateful check FAILED: x is %r after %d increments" % (final, stateful_count[0]))
        client.call("sandbox.remove", sandbox_id=warm, force=True)
        client.call("sandbox.remove", sandbox_id=paused, force=True)
        client.close()

        # --- 200 concurrent creations, then idle ---
        log("creating %d sandboxes concurrently" % a.concurrent)
        time.sleep(1)
        groups_before = sandbox_processes(a.uid_pool_base, a.uid_pool_ranges)
        mem_before = meminfo()
        daemon_before = rollup(daemon.proc.pid)
        wall, results = concurrent_creates(daemon.socket, a.concurrent)
        ids = [r[2] for r in results if r[0]]
        failures = [r[2] for r in results if not r[0]]
        lat = [r[1] for r in results if r[0]]
        log("created %d in %.2f s, %d failures%s" % (len(ids), wall / 1e9, len(failures),
                                                     (": " + failures[0]) if failures else ""))
        time.sleep(3)  # settle: pool refills, lazy frees
        groups = sandbox_processes(a.uid_pool_base, a.uid_pool_ranges)
        mem_after = meminfo()
        daemon_after = rollup(daemon.proc.pid)
        n_groups = len(groups)
        n_new = max(1, n_groups - len(groups_before))
        procs = sum(len(p) for p in groups.values())
        rss = sum(r.get("Rss", 0) for p in groups.values() for _, r in p)
        pss = sum(r.get("Pss", 0) for p in groups.values() for _, r in p)
        cg_dirs = sandbox_cgroups(ids)
        n_cg, cg_usage, cg_kmem = cgroup_memory(cg_dirs)
        avail_drop = mem_before["MemAvailable"] - mem_after["MemAvailable"]
        daemon_growth = daemon_after.get("Rss", 0) - daemon_before.get("Rss", 0)
        slab_drop = (mem_after["Slab"] - mem_before["Slab"])
        log("removing them")
        rm_wall, rm_errors = concurrent_removes(daemon.socket, ids)
        time.sleep(3)
        mem_removed = meminfo()
        avail_rise = mem_removed["MemAvailable"] - mem_after["MemAvailable"]
        memory = {
            "sandboxes_measured": n_groups, "processes": procs,
            "rss_mib": rss / n_groups / 2**20 if n_groups else None,
            "pss_mib": pss / n_groups / 2**20 if n_groups else None,
            "cgroups_found": n_cg,
            "cgroup_usage_mib": cg_usage / n_cg / 2**20 if n_cg else None,
            "cgroup_kmem_mib": cg_kmem / n_cg / 2**20 if n_cg else None,
            "memavailable_drop_mib": avail_drop / n_new / 2**20,
            "memavailable_rise_on_remove_mib": avail_rise / n_new / 2**20,
            "slab_growth_mib": slab_drop / n_new / 2**20,
            "daemon_rss_growth_mib": daemon_growth / n_new / 2**20,
        }
        memory["headline_mib"] = ((rss / n_groups if n_groups else 0) + (cg_kmem / n_cg if n_cg else 0)) / 2**20
        concurrent = {
            "n": a.concurrent, "created": len(ids), "failures": len(failures),
            "first_failure": failures[0] if failures else None,
            "seconds": wall / 1e9, "per_second": len(ids) / (wall / 1e9) if wall else 0,
            "latency_median_ms": ms(statistics.median(lat)) if lat else None,
            "latency_p90_ms": ms(percentile(lat, 0.9)) if lat else None,
            "remove_seconds": rm_wall / 1e9, "remove_failures": len(rm_errors),
        }
    finally:
        if crun is not None:
            crun.stop()
        if podman is not None:
            podman.stop()
        rc = daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    if rc != 0:
        log("nsboxd exited with %s (log: %s)" % (rc, daemon.log_path))
    scale = scale_run(a, build, out_dir, log) if a.scale > 0 else None
    network = network_run(a, build, out_dir, log) if a.network_rounds > 0 else None
    browser = browser_run(a, build, out_dir, log) if a.browser_rounds > 0 else None

    report = build_report(variants, concurrent, memory, stateful_ok, crun, reproduce,
                          time.monotonic() - started, a, scale, network, forkserver, podman_memory, browser)
    print()
    print(report["markdown"])
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "bench.md"), "w") as f:
        f.write(report["markdown"])
    with open(os.path.join(out_dir, "bench.json"), "w") as f:
        json.dump(report["json"], f, indent=2)
    print("written: %s/bench.md, %s/bench.json" % (out_dir, out_dir))
    # Missed performance targets are results; failures are bugs.
    broken = [v.label for v in variants if v.failures] + \
        (["%d of %d concurrent creations" % (concurrent["failures"], concurrent["n"])] if concurrent["failures"] else []) + \
        (["stateful state check"] if not stateful_ok else []) + \
        (["%d of %d scale creations" % (scale["n"] - scale["created"], scale["n"])]
         if scale and scale["created"] < scale["n"] else []) + \
        (["%d scale execs" % scale["exec_failures"]] if scale and scale["exec_failures"] else []) + \
        (["%d network rounds" % network["failures"]] if network and network["failures"] else []) + \
        (["%d browser rounds" % browser["failures"]] if browser and browser["failures"] else [])
    if broken:
        print("bench: FAILED: " + "; ".join(broken), file=sys.stderr)
        return 1
    return 0


TARGETS = {  # key → (max ratio, or max ms when absolute)
    "run_true": ("ratio", 0.6),
    "cli_exec_true": ("ratio", 0.3),
    "stateless_b2b": ("ratio", 0.3),
    "exec_true": ("ratio", 0.25),
    "cer_true": ("ratio", 1.0),
    "exec_python": ("ratio", 0.85),
    "stateful": ("ms", 1.0),
    "stateless_python": ("ratio", 0.3),
    "stateless_pandas": ("ratio", 0.05),
    "stateless_plot": ("ratio", 0.1),
}

# Each nsbox row against what a podman user would do for the same thing; every
# one of them is to take at most PODMAN_TARGET of podman's time.
PODMAN_OF = {
    "run_true": "podman_run_true", "cer_true": "podman_run_true",
    "run_python": "podman_run_python", "cer_python": "podman_run_python",
    "cli_exec_true": "podman_exec_true", "exec_true": "podman_exec_true",
    "exec_python": "podman_exec_python", "stateful": "podman_exec_python",
    "stateless_python": "podman_exec_python", "stateless_b2b": "podman_exec_python",
    "stateless_pandas": "podman_exec_pandas", "stateless_plot": "podman_exec_plot",
}
PODMAN_TARGET = 0.5


def forkserver_markdown(fs):
    if fs is None:
        return ["", "Fork server memory: no fork server found."]
    return ["", "| python fork server of stateless python.run: memory per sandbox (%d sandboxes, %.0f processes "
            "each: the server (its templates, where it has two), and the reapers and processes forked ahead for the "
            "next two calls of each) | value |" % (
                fs["sandboxes"], fs["processes"]), "|---|---:|",
            "| the server's RSS | %.1f MiB |" % fs["server_rss_mib"],
            "| … anonymous (the imported modules' objects): the sandbox's own, charged to its cgroup; the "
            "forks share it copy-on-write | %.1f MiB |" % fs["server_anon_mib"],
            "| … file-backed (the image's libraries): one copy in the page cache, shared by every sandbox's "
            "server | %.1f MiB |" % fs["server_file_mib"],
            "| extra memory per sandbox: anonymous pages of the server and its forks, each counted once (PSS) "
            "| %.1f MiB |" % fs["sandbox_anon_mib"],
            "| … plus its share of the shared file pages (PSS, %d sandboxes sharing) | %.1f MiB |" % (
                fs["sandboxes"], fs["sandbox_file_pss_mib"])]


def build_report(variants, concurrent, memory, stateful_ok, crun, reproduce, seconds, a, scale=None, network=None,
                 forkserver=None, podman_memory=None, browser=None):
    by_key = {v.key: v for v in variants}

    def median(v):
        return ms(statistics.median(v.samples)) if v.samples else None

    lines = []
    rows = []
    lines.append("| variant | n | median ms | p90 ms | × bwrap one-shot | × podman | target |")
    lines.append("|---|---:|---:|---:|---:|---:|---|")
    for v in variants:
        if v.skip_reason is not None:
            lines.append("| %s | – | – | – | – | – | %s |" % (v.label, v.skip_reason))
            rows.append({"key": v.key, "label": v.label, "skipped": v.skip_reason})
            continue
        m = median(v)
        base = median(by_key[v.base]) if v.base else None
        ratio = m / base if m is not None and base else None
        p90 = ms(percentile(v.samples, 0.9)) if v.samples else None
        target = ""
        if v.key in TARGETS:
            kind, limit = TARGETS[v.key]
            if kind == "ratio" and ratio is not None:
                target = "≤ %.2f× %s" % (limit, "met" if ratio <= limit else "MISSED")
            elif kind == "ms" and m is not None:
                target = "< %g ms %s" % (limit, "met" if m < limit else "MISSED")
        podman_v = by_key.get(PODMAN_OF.get(v.key))
        podman_m = median(podman_v) if podman_v is not None and podman_v.skip_reason is None else None
        podman_ratio = m / podman_m if m is not None and podman_m else None
        if podman_ratio is not None:
            target += "%s≤ %.2f× podman %s" % ("; " if target else "", PODMAN_TARGET,
                                               "met" if podman_ratio <= PODMAN_TARGET else "MISSED")
        if v.key == "stateful" and not stateful_ok:
            target += " (state check FAILED)"
        if v.failures:
            target += " %d failed: %s" % (v.failures, (v.last_error or "")[:120].replace("|", "/"))
        digits = 3 if v.key == "stateful" else 2
        lines.append("| %s | %d | %s | %s | %s | %s | %s |" % (
            v.label, len(v.samples), "%.*f" % (digits, m) if m is not None else "–",
            "%.*f" % (digits, p90) if p90 is not None else "–",
            "%.2f×" % ratio if ratio is not None else "–",
            "%.2f×" % podman_ratio if podman_ratio is not None else "", target))
        rows.append({"key": v.key, "label": v.label, "n": len(v.samples), "failures": v.failures,
                     "median_ms": m, "p90_ms": p90, "ratio": ratio, "base": v.base,
                     "podman_ratio": podman_ratio, "target": target.strip()})
        if v.settle_samples:
            sm, sp = ms(statistics.median(v.settle_samples)), ms(percentile(v.settle_samples, 0.9))
            label = "… then the sandbox's teardown after the remove's answer (not in the row above; waited " \
                    "for before the next round)"
            lines.append("| %s | %d | %.2f | %.2f |  |  |  |" % (label, len(v.settle_samples), sm, sp))
            rows.append({"key": v.key + "_teardown", "label": label, "n": len(v.settle_samples),
                         "median_ms": sm, "p90_ms": sp})

    c, mem = concurrent, memory
    lines.append("")
    lines.append("| %d concurrent creations, then idle | value | target |" % c["n"])
    lines.append("|---|---:|---|")
    lines.append("| wall time for all | %.2f s | |" % c["seconds"])
    lines.append("| creations per second | %.1f | |" % c["per_second"])
    lines.append("| failures | %d | 0 %s |" % (c["failures"], "met" if c["failures"] == 0 else
                                                "MISSED: " + str(c["first_failure"])[:120]))
    lines.append("| latency of one create under that load, median / p90 | %.1f / %.1f ms | |" % (
        c["latency_median_ms"] or 0, c["latency_p90_ms"] or 0))

    def f(x):
        return "%.2f MiB" % x if x is not None else "–"
    headline = mem["headline_mib"]
    lines.append("| host memory per idle sandbox: RSS of its processes + kernel memory of its cgroup | %s | "
                 "≤ 2 MiB %s |" % (f(headline), "met" if headline <= 2 else "MISSED"))
    if podman_memory is not None:
        pm = podman_memory["headline_mib"]
        lines.append("| … podman: host memory per idle container (`sleep infinity`; RSS of conmon and the "
                     "container's processes + kernel memory of its cgroup; %d containers) | %s | sandbox ≤ %.2f× "
                     "podman %s |" % (podman_memory["containers"], f(pm), PODMAN_TARGET,
                                      "met" if pm and headline <= PODMAN_TARGET * pm else "MISSED"))
    lines.append("| … RSS / PSS of its processes (%d processes in %d sandboxes) | %s / %s | |" % (
        mem["processes"], mem["sandboxes_measured"], f(mem["rss_mib"]), f(mem["pss_mib"])))
    lines.append("| … its cgroup: all charged / kernel (%d cgroups) | %s / %s | |" % (
        mem["cgroups_found"], f(mem["cgroup_usage_mib"]), f(mem["cgroup_kmem_mib"])))
    lines.append("| … cross-check, per sandbox: host MemAvailable drop on create / rise on remove (noisy on "
                 "a shared host) | %s / %s | |" % (f(mem["memavailable_drop_mib"]),
                                                  f(mem["memavailable_rise_on_remove_mib"])))
    lines.append("| … kernel memory outside its cgroup, per sandbox: host Slab growth / nsboxd RSS growth "
                 "| %s / %s | |" % (f(mem["slab_growth_mib"]), f(mem["daemon_rss_growth_mib"])))
    lines.append("| removing all of them (16 clients) | %.2f s, %d failures | |" % (
        c["remove_seconds"], c["remove_failures"]))
    lines.extend(scale_markdown(scale))
    lines.extend(network_markdown(network))
    lines.extend(browser_markdown(browser))
    lines.extend(forkserver_markdown(forkserver))
    lines.append("")
    lines.append("Medians of interleaved rounds (%d one-shot, %d warm per variant) on %s, kernel %s, %d CPUs; "
                 "bench took %.0f s. Ratios: to bwrap's one-shot of the same command (python rows to bwrap "
                 "python, the rest to bwrap true). bwrap: `--unshare-all --die-with-parent --ro-bind ROOTFS / "
                 "--proc /proc --dev /dev --tmpfs /tmp`; crun: `crun spec` defaults (pid, net, ipc, uts, mount "
                 "namespaces, read-only root = the image, + tmpfs /tmp); podman: the image's rootfs imported, "
                 "`--runtime runc` (crun refuses a hybrid cgroup host), `--network none` and explicit `--ulimit nofile, nproc` (its defaults need CAP_SYS_RESOURCE); × podman: "
                 "to podman's row for the same thing (run --rm, or exec into its running container)." % (
                     a.oneshot_rounds, a.warm_rounds, platform.node() or "this host", platform.release(),
                     os.cpu_count(), seconds))
    if crun.note:
        lines.append("Note: " + crun.note + ".")
    lines.append("")
    lines.append("Reproduce: `%s`" % reproduce)
    md = "\n".join(lines) + "\n"
    return {"markdown": md, "json": {"rows": rows, "concurrent": concurrent, "memory": memory,
                                     "podman_memory": podman_memory,
                                     "stateful_state_ok": stateful_ok, "scale": scale, "network": network,
                                     "browser": browser,
                                     "forkserver": forkserver,
                                     "crun_note": crun.note,
                                     "crun_error": crun.error, "seconds": seconds, "kernel": platform.release(),
                                     "cpus": os.cpu_count(), "reproduce": reproduce}}


if __name__ == "__main__":
    sys.exit(main())
