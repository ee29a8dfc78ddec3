#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The desktop image's desktop (Xvfb, openbox, x11vnc, websockify), nsbox
beside bubblewrap on the same image, interleaved in one run: create to the
first screenshot, a click + screenshot round trip in a running desktop, and
the memory of an idle desktop (its cgroup's, after a screenshot). Prints a
table with the ratios and writes BUILD/bench-desktop.json.

nsbox: sandbox.create {image: desktop}, desktop.start (at 1280x800, the
default), desktop.screenshot; then desktop.click + desktop.screenshot.
bubblewrap: bwrap --unshare-all on the image's rootfs runs what desktop.start's
launcher runs (the same four servers with the same arguments, waiting for the
display and both ports the same way), then one command per line of its stdin:
scrot for a screenshot (the PNG read from a bound dir), xdotool for a click, the
argv desktop.click gives it. Each bwrap desktop runs in a memory cgroup of its
own beside the sandboxes' (same parent), so both are measured alike.

  /usr/bin/python3 tests/bench/desktop.py --build build      (part of make bench)
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
sys.path.insert(0, HERE)
from bench import UID_RANGE, Client, Daemon, ms, percentile, read_int, sandbox_cgroups  # noqa: E402

WIDTH, HEIGHT = 1280, 800
# Away from the screen's middle, where Xvfb starts the pointer, so that every click moves it.
CLICK = (300, 200)
# manager/desktop.c's launcher and readiness check, for bash under bwrap; then the command loop.
BWRAP_DESKTOP = r"""
export DISPLAY=:0
Xvfb :0 -screen 0 "%dx%dx24" -nolisten tcp -noreset >/tmp/xvfb.log 2>&1 &
until xdpyinfo >/dev/null 2>&1; do kill -0 $! 2>/dev/null || { cat /tmp/xvfb.log >&2; exit 1; }; sleep 0.1; done
openbox >/dev/null 2>&1 &
x11vnc -display :0 -forever -shared -nopw -quiet -noipv6 -rfbport 5900 >/dev/null 2>&1 &
websockify --web /usr/share/novnc 6080 127.0.0.1:5900 >/dev/null 2>&1 &
until (exec 3<>/dev/tcp/127.0.0.1/5900) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/6080) 2>/dev/null; do
  sleep 0.1
done
echo @@ready
while IFS= read -r line; do eval "$line" >/dev/null 2>&1; echo "@@ $?"; done
""" % (WIDTH, HEIGHT)


class BwrapDesktop:
    """One desktop under bubblewrap, started in its own memory cgroup `cgroup`."""

    def __init__(self, rootfs, cgroup):
        self.out = tempfile.mkdtemp(prefix="nsbox-bench-desktop-")
        self.cgroup = cgroup
        os.mkdir(cgroup)
        bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc",
                 "--dev", "/dev", "--tmpfs", "/tmp", "--bind", self.out, "/tmp/out", "--setenv", "HOME", "/tmp",
                 "bash", "-c", BWRAP_DESKTOP]
        # The shell joins the cgroup and then becomes bwrap: everything of the desktop starts in it.
        self.proc = subprocess.Popen(["sh", "-c", 'echo $$ >"$0/cgroup.procs" && exec "$@"', cgroup] + bwrap,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        line = self.proc.stdout.readline()
        if line != "@@ready\n":
            raise RuntimeError("bwrap desktop did not start: %r %s" % (line, self.proc.stderr.read()[-300:]))

    def run(self, command):
        self.proc.stdin.write(command + "\n")
        line = self.proc.stdout.readline()
        if line != "@@ 0\n":
            raise RuntimeError("bwrap desktop: %s: %r" % (command, line))

    def screenshot(self):
        self.run("scrot -o /tmp/out/shot.png")
        with open(os.path.join(self.out, "shot.png"), "rb") as f:
            png = f.read()
        if not png.startswith(b"\x89PNG"):
            raise RuntimeError("bwrap desktop: scrot wrote no PNG")
        return png

    def click(self, x, y):
        self.run("xdotool mousemove %d %d click 1" % (x, y))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()
        shutil.rmtree(self.out, ignore_errors=True)
        # bwrap --die-with-parent: its processes go with it; the cgroup is empty once they are reaped
        for _ in range(100):
            try:
                os.rmdir(self.cgroup)
                return
            except OSError:
                time.sleep(0.05)


def cgroup_memory(path):
    """(all charged, anonymous) bytes of a v1 memory cgroup or a v2 cgroup."""
    usage = read_int(os.path.join(path, "memory.usage_in_bytes")) or read_int(os.path.join(path, "memory.current"))
    anon = None
    try:
        with open(os.path.join(path, "memory.stat")) as f:
            stat = dict(line.split() for line in f if len(line.split()) == 2)
        anon = int(stat.get("total_rss", stat.get("anon", 0)))
    except (OSError, ValueError):
        pass
    return usage, anon


def cgroup_processes(path):
    """{command name: anonymous RSS bytes} of the processes under a cgroup."""
    names = {}
    for dirpath, _, files in os.walk(path):
        if "cgroup.procs" not in files:
            continue
        with open(os.path.join(dirpath, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open("/proc/%s/status" % pid) as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            name = status["Name"].strip()
            names[name] = names.get(name, 0) + int(status.get("RssAnon", "0 kB").split()[0]) * 1024
    return names


def median_mib(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) / 2**20 if values else None


def run(a, log):
    rootfs = os.path.join(a.image_dir, "desktop", "rootfs")
    res = {"n": a.rounds, "failures": 0, "first_error": None, "width": WIDTH, "height": HEIGHT}
    if not os.path.isdir(rootfs):
        res["first_error"] = "no desktop image in %s (make image IMAGE=desktop)" % a.image_dir
        res["failures"] = 1
        return res
    lat = {"first_shot": [], "bwrap_first_shot": [], "round_trip": [], "bwrap_round_trip": [],
           "create": [], "start": [], "screenshot": []}  # the last three: nsbox's first shot in its parts
    base = a.uid_pool_base + a.uid_pool_offset * UID_RANGE
    daemon = None
    idle, bwraps = [], []
    try:
        daemon = Daemon(a.build, a.image_dir, base, 64, os.path.join(a.build, "bench-desktop-nsboxd.log"), 0)
        client = Client(daemon.socket, timeout=300)
        cgroup_parent = None
        log("desktop: %d rounds of create + first screenshot, nsbox and bwrap interleaved" % a.rounds)
        for i in range(a.rounds):
            for kind in (("nsbox", "bwrap") if i % 2 == 0 else ("bwrap", "nsbox")):
                try:
                    if kind == "nsbox":
                        t0 = time.perf_counter_ns()
                        sid = client.call("sandbox.create", image="desktop",
                                          limits={"memory_bytes": "1G"})["sandbox_id"]
                        t1 = time.perf_counter_ns()
                        client.call("desktop.start", sandbox_id=sid)
                        t2 = time.perf_counter_ns()
                        client.call("desktop.screenshot", sandbox_id=sid)
                        t3 = time.perf_counter_ns()
                        lat["first_shot"].append(t3 - t0)
                        lat["create"].append(t1 - t0)
                        lat["start"].append(t2 - t1)
                        lat["screenshot"].append(t3 - t2)
                        idle.append(sid)
                        if cgroup_parent is None:
                            cgroup_parent = os.path.dirname(sandbox_cgroups([sid])[sid])
                        continue
                    if cgroup_parent is None:
                        continue  # the first round's nsbox side says where the cgroups are
                    t0 = time.perf_counter_ns()
                    b = BwrapDesktop(rootfs, os.path.join(cgroup_parent, "nsbox-bench-bwrap-desktop-%d" % i))
                    bwraps.append(b)
                    b.screenshot()
                    lat["bwrap_first_shot"].append(time.perf_counter_ns() - t0)
                except Exception as e:
                    res["failures"] += 1
                    res["first_error"] = res["first_error"] or "%s: %s" % (kind, e)
        if idle and bwraps:
            log("desktop: %d rounds of click + screenshot in a running desktop, interleaved" % a.rounds)
            for i in range(a.rounds):
                for kind in (("nsbox", "bwrap") if i % 2 == 0 else ("bwrap", "nsbox")):
                    x, y = CLICK[0] + i, CLICK[1]
                    t0 = time.perf_counter_ns()
                    if kind == "nsbox":
                        client.call("desktop.click", sandbox_id=idle[0], x=x, y=y)
                        client.call("desktop.screenshot", sandbox_id=idle[0])
                        lat["round_trip"].append(time.perf_counter_ns() - t0)
                    else:
                        bwraps[0].click(x, y)
                        bwraps[0].screenshot()
                        lat["bwrap_round_trip"].append(time.perf_counter_ns() - t0)
            time.sleep(2)  # idle: what the desktop keeps once the screen is drawn
            dirs = sandbox_cgroups(idle)
            nsbox_mem = [cgroup_memory(d) for d in dirs.values()]
            bwrap_mem = [cgroup_memory(b.cgroup) for b in bwraps]
            res["idle_sandboxes"], res["idle_bwraps"] = len(nsbox_mem), len(bwrap_mem)
            res["idle_memory_mib"] = median_mib(m[0] for m in nsbox_mem)
            res["idle_anon_mib"] = median_mib(m[1] for m in nsbox_mem)
            res["bwrap_idle_memory_mib"] = median_mib(m[0] for m in bwrap_mem)
            res["bwrap_idle_anon_mib"] = median_mib(m[1] for m in bwrap_mem)
            # where the anonymous memory is, by process name, in one of each
            res["nsbox_processes_anon_mib"] = {k: v / 2**20 for k, v in
                                               sorted(cgroup_processes(dirs[idle[-1]]).items())}
            res["bwrap_processes_anon_mib"] = {k: v / 2**20 for k, v in
                                               sorted(cgroup_processes(bwraps[-1].cgroup).items())}
    except Exception as e:
        res["first_error"] = res["first_error"] or "%s: %s" % (type(e).__name__, e)
        res["failures"] += 1
    finally:
        for b in bwraps:
            b.stop()
        if daemon is not None:
            try:
                for sid in idle:
                    client.call("sandbox.remove", sandbox_id=sid, force=True)
                client.close()
            except Exception:
                pass
            res["daemon_rc"] = daemon.stop()
    for k, v in lat.items():
        res[k + "_ms"] = (ms(statistics.median(v)), ms(percentile(v, 0.9))) if v else None
    return res


def markdown(r):
    def pair(p):
        return "%.0f / %.0f ms" % p if p else "–"

    def ratio(a, b):
        return "%.2f×" % (a / b) if a and b else "–"

    def first(key):
        return r[key][0] if r.get(key) else None

    def mib(key):
        return "%.0f MiB" % r[key] if r.get(key) is not None else "–"
    lines = ["| desktop image (Xvfb, openbox, x11vnc, websockify at %dx%d), %d rounds, median / p90 | nsbox | "
             "bwrap | nsbox ÷ bwrap |" % (r["width"], r["height"], r["n"]), "|---|---:|---:|---:|",
             "| create to the first screenshot (nsbox: sandbox.create + desktop.start + desktop.screenshot; bwrap: "
             "start the same servers, wait for the display and both ports, scrot) | %s | %s | %s |" % (
                 pair(r.get("first_shot_ms")), pair(r.get("bwrap_first_shot_ms")),
                 ratio(first("first_shot_ms"), first("bwrap_first_shot_ms"))),
             "| running desktop: a click (xdotool mousemove, click) + a screenshot | %s | %s | %s |" % (
                 pair(r.get("round_trip_ms")), pair(r.get("bwrap_round_trip_ms")),
                 ratio(first("round_trip_ms"), first("bwrap_round_trip_ms"))),
             "| memory of an idle desktop after a screenshot: all its cgroup is charged (median of %s and %s) "
             "| %s | %s | %s |" % (r.get("idle_sandboxes", 0), r.get("idle_bwraps", 0), mib("idle_memory_mib"),
                                   mib("bwrap_idle_memory_mib"),
                                   ratio(r.get("idle_memory_mib"), r.get("bwrap_idle_memory_mib"))),
             "| … of it anonymous (the processes' own) | %s | %s | %s |" % (
                 mib("idle_anon_mib"), mib("bwrap_idle_anon_mib"),
                 ratio(r.get("idle_anon_mib"), r.get("bwrap_idle_anon_mib")))]
    if r["failures"]:
        lines.append("| failures | %d: %s | | |" % (r["failures"], str(r["first_error"])[:160].replace("|", "/")
                                                   .replace("\n", " ")))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--image-dir", default="/var/lib/nsbox/images")
    ap.add_argument("--rounds", type=int, default=10, help="desktops each side (0: skip)")
    ap.add_argument("--uid-pool-base", type=int, default=2000000000)
    ap.add_argument("--uid-pool-offset", type=int, default=2048,
                    help="ranges past --uid-pool-base where this nsboxd's pool starts (clear of bench.py's)")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if a.rounds <= 0:
        return 0
    if os.geteuid() != 0:
        sys.exit("bench desktop: run as root (nsboxd, bwrap with --unshare-all, cgroups)")
    if shutil.which("bwrap") is None:
        sys.exit("bench desktop: bwrap is missing (make deps-bench installs it)")
    started = time.monotonic()

    def log(msg):
        print("[%6.1fs] %s" % (time.monotonic() - started, msg), flush=True)
    r = run(a, log)
    print()
    print(markdown(r))
    if r.get("first_shot_ms"):
        print("nsbox's first screenshot in its parts (medians): sandbox.create %.0f ms, desktop.start %.0f ms, "
              "desktop.screenshot %.0f ms" % (r["create_ms"][0], r["start_ms"][0], r["screenshot_ms"][0]))
    for side in ("nsbox", "bwrap"):
        procs = r.get(side + "_processes_anon_mib")
        if procs:
            print("%s: anonymous memory by process: %s" % (side, ", ".join("%s %.1f MiB" % kv for kv in procs.items())))
    with open(os.path.join(a.build, "bench-desktop.json"), "w") as f:
        json.dump(r, f, indent=2)
    print("written: %s" % os.path.join(a.build, "bench-desktop.json"))
    if r["failures"]:
        print("bench desktop: FAILED: %d: %s" % (r["failures"], r["first_error"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
