#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layering of nsbox's C tree (docs/architecture.md), checked: every
#include "..." of a source file must point to its own component or one it may
depend on, and inside a layered component (manager/, egress/, http/) to its
own layer or a lower one; and no two units (a .c and its .h) may include
each other, directly or around a circle. Exits 1 naming each offending include."""
import os
import re
import subprocess
import sys

# Which components a component may include from (besides itself).
COMPONENTS = {
    "common": [],
    "policy": ["common"],
    "runtime": ["common", "policy"],
    "manager": ["common", "policy", "runtime"],
    "egress": ["common", "policy"],
    "http": ["common"],
    "cli": ["common", "policy"],
    "rootfs-builder": [],
}
# The search order of the compiler's -I flags (Makefile), after the file's own directory.
INCLUDE_DIRS = ["common", "policy", "runtime", "manager", "cli"]

# manager/'s layers, bottom up: a unit includes its own layer or lower.
MANAGER_LAYERS = [
    ("core", ["loop", "daemon", "config", "budget", "fs_path", "fs_worker", "metrics"]),
    ("host and wire", ["cgroup_scope", "cgroup", "userns", "uidmode", "basens", "rootfs", "host_pools", "profiles", "rpc",
                       "rpc_listen", "quota", "host_mounts"]),
    ("registry", ["sandbox", "sandbox_uids", "state", "events", "removals"]),
    ("live sandboxes", ["exec_params", "exec_internal", "exec_keep", "exec_log", "exec", "exec_api", "egress", "egress_ca", "secrets_keep", "fs_ops", "fs_files", "fs_staging", "fs_api", "fs_watch", "sandbox_pause",
                        "snapshot", "images", "volumes"]),
    ("lifecycle", ["sandbox_life"]),
    ("features", ["python", "shell", "desktop", "browser", "restore", "keeper"]),
    ("api", ["methods", "idle", "observe"]),
    ("top", ["server", "main"]),
]
# egress/'s (nsbox-egress): the shared state below DNS, DNS below the proxy,
# which answers DNS over TCP through a callback it gives dns.c.
EGRESS_LAYERS = [
    ("leaves", ["sniff", "inject", "peer"]),
    ("interception", ["intercept"]),
    ("core", ["core"]),
    ("dns", ["dns"]),
    ("proxy", ["proxy"]),
    ("top", ["main"]),
]
# http/'s (nsbox-http): the handlers reply and call nsboxd through the units
# below them; the router includes the handlers, never the reverse.
HTTP_LAYERS = [
    ("request", ["request", "counters", "owned"]),
    ("replies and nsboxd", ["reply", "nsboxd", "auth", "bounds"]),
    ("e2b wire", ["e2b_wire"]),
    ("handlers", ["rpc_api", "execute", "agent_sandbox", "e2b_api", "e2b_process", "e2b_watch", "e2b_files", "e2b_volumes", "e2b_interp", "e2b_ports", "metrics"]),
    ("e2b router", ["e2b"]),
    ("router", ["server"]),
    ("top", ["main"]),
]
# The components in layers, each with its layers bottom up.
LAYERS = {"manager": MANAGER_LAYERS, "egress": EGRESS_LAYERS, "http": HTTP_LAYERS}
LAYER_OF = {component: {unit: i for i, (_, units) in enumerate(layers) for unit in units}
            for component, layers in LAYERS.items()}


def tracked_sources(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "*.c", "*.h"], capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if f.split("/")[0] in COMPONENTS and os.path.exists(os.path.join(root, f))]


def resolve(root, src, header):
    here = os.path.dirname(src)
    for d in [here] + INCLUDE_DIRS:
        candidate = os.path.normpath(os.path.join(d, header))
        if os.path.exists(os.path.join(root, candidate)):
            return candidate
    return None  # a system or generated header


def unit(path):
    return path.rsplit(".", 1)[0]


def check(root):
    problems = []
    edges = {}
    for src in tracked_sources(root):
        component = src.split("/")[0]
        with open(os.path.join(root, src), errors="replace") as f:
            text = f.read()
        for lineno, header in ((text.count("\n", 0, m.start()) + 1, m.group(1))
                               for m in re.finditer(r'^#include "([^"]+)"', text, re.M)):
            target = resolve(root, src, header)
            if target is None:
                continue
            to = target.split("/")[0]
            where = "%s:%d: #include \"%s\"" % (src, lineno, header)
            if to != component and to not in COMPONENTS[component]:
                problems.append("%s: %s/ may not depend on %s/" % (where, component, to))
            if component in LAYERS and to == component:
                layers, layer_of = LAYERS[component], LAYER_OF[component]
                a, b = os.path.basename(unit(src)), os.path.basename(unit(target))
                for name in (a, b):
                    if name not in layer_of:
                        problems.append("%s: %s/%s is in no layer (tests/layers/check_layers.py)"
                                        % (where, component, name))
                if a in layer_of and b in layer_of and layer_of[b] > layer_of[a]:
                    problems.append("%s: points up from layer \"%s\" to \"%s\"" % (
                        where, layers[layer_of[a]][0], layers[layer_of[b]][0]))
            if unit(target) != unit(src):
                edges.setdefault(unit(src), set()).add(unit(target))
    problems += ["include circle: " + " -> ".join(c + [c[0]]) for c in circles(edges)]
    return sorted(set(problems))


def circles(edges):
    """Strongly connected components of more than one unit (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check(root)
    for p in problems:
        print(p)
    print("layers: %s" % ("ok" if not problems else "%d problem(s)" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
