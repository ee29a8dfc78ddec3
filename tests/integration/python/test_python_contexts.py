# SPDX-License-Identifier: Apache-2.0
"""The stateful interpreter's streamed calls, contexts, per-call env and
python.reset, against the real daemon and the real image (what nsbox-http's
E2B code interpreter is built on)."""
import base64

import pytest
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]

GATED = ("import os, sys, time\nprint('first')\nprint('err-first', file=sys.stderr)\n"
         "for _ in range(600):\n    if os.path.exists('/workspace/go'):\n        break\n    time.sleep(0.05)\n"
         "print('saw-go' if os.path.exists('/workspace/go') else 'no-go')\n'done'")


def stateful(daemon, sandbox, code, **params):
    return daemon.call("python.run", sandbox_id=sandbox, code=code, stateful=True, **params)


def test_a_stateful_call_streams_its_output_while_it_runs(daemon, sandbox):
    """The cell waits for a file that the test writes only once the cell's
    first lines have come as notifications: output that came only with the
    answer would leave the cell waiting until it gives up."""
    with daemon.client() as c:
        rid = c.request("python.run", {"sandbox_id": sandbox, "code": GATED, "stateful": True, "stream": True})
        notes = []
        while {"first\n", "err-first\n"} - {n["data"] for n in notes}:
            msg = c.read_message()
            assert "id" not in msg, msg  # the answer before the output came
            if msg["method"] == "exec.output":
                notes.append(msg["params"])
            else:
                assert msg["method"] == "exec.started" and not notes
        daemon.call("fs.write", sandbox_id=sandbox, path="go", content="x")
        r = c.response(rid)["result"]
        notes += [n["params"] for n in c.notifications if n["method"] == "exec.output"]
    assert r["status"] == "ok" and r["result"] == "'done'"
    assert r["stdout"] == "" and r["stderr"] == ""  # streamed, not repeated
    assert {n["exec_id"] for n in notes} == {notes[0]["exec_id"]}
    assert "".join(n["data"] for n in notes if n["stream"] == "stdout") == "first\nsaw-go\n"
    assert "".join(n["data"] for n in notes if n["stream"] == "stderr") == "err-first\n"


def test_a_figure_shown_mid_call_comes_before_the_call_ends(daemon, sandbox):
    code = ("import os, time\nimport matplotlib.pyplot as plt\nprint('drawing')\nplt.plot([1, 2, 3])\nplt.show()\n"
            "for _ in range(600):\n    if os.path.exists('/workspace/go-figure'):\n        break\n    time.sleep(0.05)\n"
            "print('saw-go' if os.path.exists('/workspace/go-figure') else 'no-go')")
    with daemon.client() as c:
        rid = c.request("python.run", {"sandbox_id": sandbox, "code": code, "stateful": True, "stream": True,
                                       "timeout_seconds": 120})
        seen = []
        while not seen or seen[-1]["method"] != "python.image":
            msg = c.read_message()
            assert "id" not in msg, msg
            seen.append(msg)
        daemon.call("fs.write", sandbox_id=sandbox, path="go-figure", content="x")
        r = c.response(rid)["result"]
        seen += c.notifications
    image = seen[-1 - len(c.notifications)]["params"]
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG") and image["mime"] == "image/png"
    printed = "".join(m["params"]["data"] for m in seen if m["method"] == "exec.output")
    assert printed == "drawing\nsaw-go\n"
    # what was printed before the figure came before it
    assert [m["method"] for m in seen].index("exec.output") < [m["method"] for m in seen].index("python.image")
    assert r["status"] == "ok" and not [o for o in r["outputs"] if o["type"] == "image"]


def test_a_streamed_exception_is_the_error_not_stderr(daemon, sandbox):
    with daemon.client() as c:
        r = c.call("python.run", sandbox_id=sandbox, stateful=True, stream=True,
                   code="import sys\nprint('before', file=sys.stderr)\ndef f():\n    raise ValueError('bad')\nf()")
        streamed = "".join(n["params"]["data"] for n in c.notifications if n["method"] == "exec.output")
    assert streamed == "before\n"
    assert r["status"] == "error"
    assert (r["error"]["name"], r["error"]["value"]) == ("ValueError", "bad")
    assert r["error"]["traceback"] == r["stderr"] and "line 5" in r["stderr"]
    # unstreamed, the traceback stays in stderr, and the error says it too
    r = stateful(daemon, sandbox, "int('x')")
    assert r["error"]["name"] == "ValueError" and "ValueError" in r["stderr"]


def test_a_streamed_call_that_times_out_keeps_the_interpreter(daemon, sandbox):
    stateful(daemon, sandbox, "kept = 3")
    with daemon.client() as c:
        r = c.call("python.run", sandbox_id=sandbox, stateful=True, stream=True, timeout_seconds=1,
                   code="print('looping')\nwhile True:\n    pass")
        streamed = "".join(n["params"]["data"] for n in c.notifications if n["method"] == "exec.output")
    assert streamed == "looping\n"
    assert r["status"] == "timeout" and r["error"]["name"] == "KeyboardInterrupt"
    assert r["stderr"].endswith("interrupted; the interpreter and its variables remain\n")
    assert stateful(daemon, sandbox, "kept")["result"] == "3"


def test_streamed_output_past_max_output_bytes_is_dropped_and_counted(daemon, sandbox):
    with daemon.client() as c:
        r = c.call("python.run", sandbox_id=sandbox, stateful=True, stream=True, max_output_bytes=1000,
                   code="print('x' * 5000)")
        streamed = "".join(n["params"]["data"] for n in c.notifications if n["method"] == "exec.output")
    assert len(streamed) <= 1000
    assert r["truncated"] is True and r["output_dropped_bytes"] == 5001 - len(streamed)


def test_env_applies_to_its_stateful_call_only(daemon, sandbox):
    code = ("import os, subprocess\n(os.environ.get('CALL_VAR'), "
            "subprocess.run(['sh', '-c', 'echo $CALL_VAR'], capture_output=True, text=True).stdout)")
    assert stateful(daemon, sandbox, code, env={"CALL_VAR": "v"})["result"] == "('v', 'v\\n')"
    assert stateful(daemon, sandbox, code)["result"] == "(None, '\\n')"


def test_contexts_keep_their_own_variables_and_cwd(daemon, sandbox):
    stateful(daemon, sandbox, "shared = 1")
    r = stateful(daemon, sandbox, "import os\nmine = 2\nos.chdir('/tmp')\n'shared' in globals()", context="a",
                 cwd="/")
    assert r["result"] == "False"
    assert stateful(daemon, sandbox, "import os\n('mine' in globals(), os.getcwd())")["result"] == \
        "(False, '/workspace')"
    assert stateful(daemon, sandbox, "mine, os.getcwd()", context="a")["result"] == "(2, '/tmp')"
    assert stateful(daemon, sandbox, "import os\nos.getcwd()", context="b")["result"] == "'/workspace'"
    # reset: the variables go, the cwd is the one the context was made with
    r = daemon.call("python.reset", sandbox_id=sandbox, context="a")
    assert (r["found"], r["removed"]) == (True, False)
    assert stateful(daemon, sandbox, "import os\n('mine' in globals(), os.getcwd())", context="a")["result"] == \
        "(False, '/')"
    assert stateful(daemon, sandbox, "shared")["result"] == "1"
    # the main context resets too, and cannot be removed
    assert daemon.call("python.reset", sandbox_id=sandbox)["found"] is True
    assert stateful(daemon, sandbox, "'shared' in globals()")["result"] == "False"
    with pytest.raises(RpcError) as e:
        daemon.call("python.reset", sandbox_id=sandbox, remove=True)
    assert e.value.kind == "invalid_params"
    r = daemon.call("python.reset", sandbox_id=sandbox, context="a", remove=True)
    assert (r["found"], r["removed"]) == (True, True)
    assert daemon.call("python.reset", sandbox_id=sandbox, context="a")["found"] is False


def test_a_context_whose_cwd_does_not_exist_is_not_made(daemon, sandbox):
    r = stateful(daemon, sandbox, "1", context="lost", cwd="/nonexistent")
    assert r["status"] == "error" and r["error"]["name"] == "FileNotFoundError"
    assert daemon.call("python.reset", sandbox_id=sandbox, context="lost")["found"] is False


def test_contexts_are_capped_per_interpreter(daemon, sandbox):
    for i in range(32):
        assert stateful(daemon, sandbox, "1", context="c%d" % i)["status"] == "ok"
    with pytest.raises(RpcError) as e:
        stateful(daemon, sandbox, "1", context="one-more")
    assert e.value.kind == "limit_reached" and "32 code contexts" in str(e.value)
    assert stateful(daemon, sandbox, "2", context="c0")["result"] == "2"  # the ones made still run
    daemon.call("python.reset", sandbox_id=sandbox, context="c0", remove=True)
    assert stateful(daemon, sandbox, "3", context="one-more")["result"] == "3"


@pytest.mark.parametrize("params, message", [
    ({"context": "a b"}, "context must be 1 to 64"),
    ({"context": "x" * 65}, "context must be 1 to 64"),
    ({"context": ""}, "context must be 1 to 64"),
    ({"cwd": "tmp"}, "cwd must be an absolute path"),
    ({"cwd": 3}, "cwd must be an absolute path"),
    ({"env": {"A": 1}}, "env.A must be a string"),
])
def test_bad_stateful_params_are_refused_clearly(daemon, sandbox, params, message):
    with pytest.raises(RpcError) as e:
        stateful(daemon, sandbox, "1", **params)
    assert e.value.kind == "invalid_params" and message in str(e.value), str(e.value)


def test_bad_reset_params_are_refused_clearly(daemon, sandbox):
    for params in ({"context": "a/b"}, {"remove": "yes"}, {"other": 1}):
        with pytest.raises(RpcError) as e:
            daemon.call("python.reset", sandbox_id=sandbox, **params)
        assert e.value.kind == "invalid_params", params
