# SPDX-License-Identifier: Apache-2.0
"""The layering check fails on what it is there to catch: an include up a
layer, an include across components, a circle, a unit in no layer."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import check_layers  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def tree(tmp_path, files):
    for path, text in files.items():
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    return str(tmp_path)


def test_the_tree_as_it_is_passes():
    assert check_layers.check(REPO) == []


def test_an_include_up_a_layer_is_caught(tmp_path):
    root = tree(tmp_path, {"manager/sandbox.c": '#include "sandbox.h"\n#include "exec.h"\n',
                           "manager/sandbox.h": "", "manager/exec.h": "", "manager/exec.c": '#include "exec.h"\n'})
    problems = check_layers.check(root)
    assert any('manager/sandbox.c:2: #include "exec.h": points up from layer "registry" to "live sandboxes"' in p
               for p in problems), problems


def test_an_include_up_a_layer_of_egress_is_caught(tmp_path):
    # dns.c answers DNS over TCP through the proxy's callback, not by calling proxy.c.
    root = tree(tmp_path, {"egress/dns.c": '#include "dns.h"\n#include "proxy.h"\n', "egress/dns.h": '#include "core.h"\n',
                           "egress/proxy.h": '#include "core.h"\n', "egress/core.h": ""})
    problems = check_layers.check(root)
    assert any('egress/dns.c:2: #include "proxy.h": points up from layer "dns" to "proxy"' in p
               for p in problems), problems


def test_a_handler_including_the_router_of_http_is_caught(tmp_path):
    root = tree(tmp_path, {"http/execute.c": '#include "execute.h"\n#include "server.h"\n', "http/execute.h": "",
                           "http/server.h": ""})
    problems = check_layers.check(root)
    assert any('http/execute.c:2: #include "server.h": points up from layer "handlers" to "router"' in p
               for p in problems), problems


def test_an_egress_unit_in_no_layer_is_caught(tmp_path):
    root = tree(tmp_path, {"egress/newthing.c": '#include "core.h"\n', "egress/core.h": ""})
    assert any("egress/newthing is in no layer" in p for p in check_layers.check(root))


def test_an_include_across_components_is_caught(tmp_path):
    root = tree(tmp_path, {"common/log.c": '#include "sandbox.h"\n', "manager/sandbox.h": ""})
    assert any("common/ may not depend on manager/" in p for p in check_layers.check(root))


def test_a_circle_is_caught_even_within_one_layer(tmp_path):
    root = tree(tmp_path, {"manager/exec.c": '#include "egress.h"\n', "manager/exec.h": "",
                           "manager/egress.c": '#include "exec.h"\n', "manager/egress.h": ""})
    assert any(p.startswith("include circle: manager/egress -> manager/exec") for p in check_layers.check(root))


def test_a_manager_unit_in_no_layer_is_caught(tmp_path):
    root = tree(tmp_path, {"manager/newthing.c": '#include "sandbox.h"\n', "manager/sandbox.h": ""})
    assert any("manager/newthing is in no layer" in p for p in check_layers.check(root))
