#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""E2B's SDK against nsbox: time to interactive as peers' leaderboards
measure it (Sandbox.create() to the first commands.run that succeeds) and a
commands.run('true') round trip, through the unmodified E2B JS SDK and
nsbox-http, each beside the same steps through nsbox's own Python SDK on
nsboxd's socket, in one run; prints medians, p90 and the ratios, and writes
BUILD/bench-e2b.json.

  /usr/bin/python3 tests/bench/e2b.py --build build     (part of make bench)
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))

KEY = "e2b_" + "5a" * 20
KEY_UID = 41031
# What the issue asks: create-to-first-command at most 20 ms median; the front adds at most 1 ms per call.
TARGET_CREATE_MS = 20.0
TARGET_FRONT_MS = 1.0


def p90(values):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]


# E2B's SDK runs every command as `/bin/bash -l -c CMD` (a login shell that
# reads /etc/profile); nsbox's runs a string under /bin/sh -c. The front's own
# cost is measured against nsbox's SDK running E2B's command line.
E2B_TRUE = ["/bin/bash", "-l", "-c", "true"]


def nsbox_sdk(socket_path, rounds):
    import nsbox
    out = {"create_to_first_command": [], "run_true": [], "run_e2b_true": []}
    for i in range(rounds + 3):
        t0 = time.perf_counter()
        sb = nsbox.Sandbox.create(socket=socket_path)
        sb.commands.run("true")
        t1 = time.perf_counter()
        if i >= 3:
            out["create_to_first_command"].append((t1 - t0) * 1000)
        sb.remove()
        sb.close()
    sb = nsbox.Sandbox.create(socket=socket_path)
    for key, cmd in (("run_true", "true"), ("run_e2b_true", E2B_TRUE)):
        for i in range(rounds + 3):
            t0 = time.perf_counter()
            sb.commands.run(cmd)
            if i >= 3:
                out[key].append((time.perf_counter() - t0) * 1000)
    sb.remove()
    sb.close()
    return out


def raw_start(port, rounds):
    """process.Process/Start of E2B's `bash -l -c true` as the SDK sends it, with
    http.client on one kept-alive connection: the front's cost without the SDK's."""
    import http.client
    import struct
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def req(method, path, body, headers):
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()

    status, body = req("POST", "/sandboxes", b"{}", {"X-API-KEY": KEY, "Content-Type": "application/json"})
    assert status == 201, body
    sb = json.loads(body)
    h = {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49983", "X-Access-Token": sb["envdAccessToken"],
         "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
    msg = json.dumps({"process": {"cmd": E2B_TRUE[0], "args": E2B_TRUE[1:], "envs": {}}, "stdin": False}).encode()
    envelope = struct.pack(">BI", 0, len(msg)) + msg
    out = []
    for i in range(rounds + 3):
        t0 = time.perf_counter()
        status, body = req("POST", "/process.Process/Start", envelope, h)
        assert status == 200 and b'"exitCode":0' in body, body
        if i >= 3:
            out.append((time.perf_counter() - t0) * 1000)
    req("DELETE", "/sandboxes/" + sb["sandboxID"], None, {"X-API-KEY": KEY})
    c.close()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--image-dir", default="/var/lib/nsbox/images")
    p.add_argument("--rounds", type=int, default=50)
    a = p.parse_args()
    os.environ["NSBOX_BUILD"] = os.path.abspath(a.build)
    os.environ["NSBOX_IMAGE_DIR"] = os.path.abspath(a.image_dir)
    from conftest import Daemon  # reads the two variables above

    subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "e2b-sdk"], check=True)
    sdk_dir = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "e2b-sdk-dir"], check=True,
                             capture_output=True, text=True).stdout.strip()
    daemon = Daemon()
    work = tempfile.mkdtemp(prefix="nsbox-bench-e2b-")
    front = None
    try:
        os.chmod(daemon.socket, 0o666)  # for auth.act_as's uid
        tokens = os.path.join(work, "tokens")
        with open(tokens, "w") as f:
            f.write("%d %s\n" % (KEY_UID, KEY))
        os.chmod(tokens, 0o600)
        log = open(os.path.join(work, "http.log"), "wb")
        front = subprocess.Popen([os.path.join(a.build, "nsbox-http"), "--http", "127.0.0.1:0", "--socket",
                                  daemon.socket, "--tokens", tokens], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not re.search(r"port (\d+)", open(log.name, errors="replace").read()):
            assert front.poll() is None and time.monotonic() < deadline, open(log.name).read()
            time.sleep(0.02)
        port = int(re.search(r"port (\d+)", open(log.name).read()).group(1))
        url = "http://127.0.0.1:%d" % port
        env = dict(os.environ, E2B_SDK_DIR=sdk_dir, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=KEY)
        # interleaved halves, so drift hits both sides alike
        e2b = {"create_to_first_command": [], "run_true": [], "stub_run_true": []}
        own = {"create_to_first_command": [], "run_true": [], "run_e2b_true": []}
        raw = []
        bench = os.path.join(REPO, "tests", "e2b", "bench.mjs")
        for _ in range(2):
            for extra in ([], ["stub"]):
                r = subprocess.run(["node", bench, str(a.rounds // 2)] + extra, env=env, capture_output=True,
                                   text=True, check=True, timeout=1800)
                for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
                    e2b[k] += v
            for k, v in nsbox_sdk(daemon.socket, a.rounds // 2).items():
                own[k] += v
            raw += raw_start(port, a.rounds // 2)
        e2b["raw_http_start"] = raw

        def row(key, what, e2b_key, own_key):
            m, base = statistics.median(e2b[e2b_key]), statistics.median(own[own_key])
            return {"key": key, "what": what, "e2b_median_ms": m, "e2b_p90_ms": p90(e2b[e2b_key]),
                    "nsbox_median_ms": base, "nsbox_p90_ms": p90(own[own_key]), "ratio": m / base,
                    "added_ms": m - base}
        # E2B's SDK runs every command as `bash -l -c CMD`: the rows after the
        # first two set it beside nsbox's SDK running that same command line, so
        # what is left is the E2B SDK's and nsbox-http's own time; the Start sent
        # with http.client (no SDK) leaves nsbox-http's alone.
        rows = [row("create_to_first_command", "Sandbox.create() to the first commands.run('true')",
                    "create_to_first_command", "create_to_first_command"),
                row("run_true", "commands.run('true') round trip", "run_true", "run_true"),
                row("run_e2b_true", "the same beside nsbox's SDK running E2B's command line (%s)"
                    % " ".join(E2B_TRUE), "run_true", "run_e2b_true"),
                row("front", "that command's process.Process/Start sent with http.client, no SDK (nsbox-http's "
                    "own cost)", "raw_http_start", "run_e2b_true")]
        create, front_row = rows[0], rows[3]
        stub = statistics.median(e2b["stub_run_true"])
        targets = {"create_to_first_command_median_ms <= %g" % TARGET_CREATE_MS:
                   create["e2b_median_ms"] <= TARGET_CREATE_MS,
                   "nsbox-http adds <= %g ms per call (Start with http.client against nsbox's SDK running %s)"
                   % (TARGET_FRONT_MS, " ".join(E2B_TRUE)): front_row["added_ms"] <= TARGET_FRONT_MS}
        print("\nE2B JS SDK (through nsbox-http) beside nsbox's Python SDK (nsboxd's socket), %d rounds each:"
              % (2 * (a.rounds // 2)))
        print("| step | E2B median (p90) | nsbox SDK median (p90) | ratio | added |")
        print("|---|---|---|---|---|")
        for r in rows:
            print("| %s | %.2f ms (%.2f) | %.2f ms (%.2f) | %.2f× | %+.2f ms |" % (
                r["what"], r["e2b_median_ms"], r["e2b_p90_ms"], r["nsbox_median_ms"], r["nsbox_p90_ms"],
                r["ratio"], r["added_ms"]))
        print("| the E2B SDK's commands.run('true') against a stub that answers at once (the SDK's own cost) "
              "| %.2f ms (%.2f) | | | |" % (stub, p90(e2b["stub_run_true"])))
        for name, met in targets.items():
            print("target %s: %s" % (name, "met" if met else "MISSED"))
        with open(os.path.join(a.build, "bench-e2b.json"), "w") as f:
            json.dump({"rows": rows, "targets": targets, "samples": {"e2b": e2b, "nsbox": own}}, f,
                      indent=1)
    finally:
        if front is not None:
            front.terminate()
            front.wait()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
