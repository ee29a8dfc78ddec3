# SPDX-License-Identifier: Apache-2.0
"""python.run and package.install: the code-interpreter calls, against the
real daemon and the real image."""
import base64
import hashlib
import io
import os
import time
import zipfile

import pytest
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(daemon, **params):
    return daemon.call("python.run", **params)


def test_stateless_run_returns_seed_response_shape(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, code="print('hello')\nimport sys; sys.stderr.write('warn')")
    assert r["status"] == "ok"
    assert r["stdout"] == "hello\n"
    assert r["stderr"] == "warn"
    assert r["exit_code"] == 0
    assert isinstance(r["execution_time_ms"], int)
    assert r["outputs"][0] == {"type": "logs", "logs": "hello\n"}
    assert r["result"] is None


def test_code_lands_in_workspace_script_py(daemon, sandbox):
    run(daemon, sandbox_id=sandbox, code="print(1)  # marker-17")
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["cat", "/workspace/script.py"])
    assert "marker-17" in r["stdout"]


def test_exception_is_status_error_with_traceback(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, code="def f():\n    raise ValueError('bad value')\nf()")
    assert r["status"] == "error"
    assert r["exit_code"] == 1
    assert "ValueError: bad value" in r["stderr"]
    assert 'File "/workspace/script.py", line 3' in r["stderr"]
    assert "runpy" not in r["stderr"] and "run.py" not in r["stderr"]


def test_sys_exit_code_comes_back(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, code="import sys\nsys.exit(4)")
    assert (r["status"], r["exit_code"]) == ("error", 4)


def test_timeout_is_status_timeout(daemon, sandbox):
    t = time.monotonic()
    r = run(daemon, sandbox_id=sandbox, code="import time\ntime.sleep(60)", timeout_seconds=1)
    assert r["status"] == "timeout"
    assert time.monotonic() - t < 15


def test_files_are_written_first_and_produced_files_listed(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, files={"data/in.csv": "a,b\n1,2\n3,4\n"},
            code="import pandas as pd\ndf = pd.read_csv('data/in.csv')\n"
                 "df.to_csv('out.csv', index=False)\nprint(int(df.b.sum()))")
    assert r["status"] == "ok", r["stderr"]
    assert r["stdout"] == "6\n"
    assert r["files_produced"] == {"/workspace/out.csv": 12}


def test_file_paths_are_validated(daemon, sandbox):
    for bad in ["../etc/passwd", "/etc/passwd", "a/../../b", ""]:
        with pytest.raises(RpcError) as e:
            run(daemon, sandbox_id=sandbox, code="pass", files={bad: "x"})
        assert e.value.code == -32602, bad


def test_numpy_pandas_matplotlib_pillow_import(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox,
            code="import numpy, pandas, matplotlib, PIL\nprint(numpy.__version__ > '1')")
    assert r["status"] == "ok", r["stderr"]
    assert r["stdout"] == "True\n"


def test_matplotlib_figure_comes_back_as_png_image(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox,
            code="import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title('squares')\nplt.show()\n"
                 "plt.figure(); plt.bar([1, 2], [3, 4])")
    assert r["status"] == "ok", r["stderr"]
    images = [o["image"] for o in r["outputs"] if o["type"] == "image"]
    assert len(images) == 2  # one at show(), one left open at the end
    for img in images:
        assert img["mime"] == "image/png"
        data = base64.b64decode(img["data"])
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
        assert img["path"].startswith("/tmp/nsbox-figures/figure_"), img["path"]
    assert r["files_produced"] == {}  # nsbox's own files are not the code's
    # the saved file is the same PNG
    got = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["sha256sum", images[0]["path"]])
    assert got["stdout"].split()[0] == hashlib.sha256(base64.b64decode(images[0]["data"])).hexdigest()


def workspace_files(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["find", "/workspace", "-type", "f"])
    return sorted(r["stdout"].split())


@pytest.mark.parametrize("stateful", [False, True])
def test_a_figure_the_code_saved_is_one_image_and_nothing_more_lands_in_workspace(daemon, sandbox, stateful):
    code = ("import matplotlib.pyplot as plt\n"
            "fig = plt.figure(); plt.plot([1, 2, 3]); fig.savefig('plot.png')\n"  # saved, left open
            "plt.figure(); plt.plot([3, 2, 1]); plt.savefig('other.png')\n"  # saved through pyplot
            "plt.figure(); plt.bar([1, 2], [3, 4])\n")  # left open, never saved
    for _ in range(2):
        named = {} if stateful else {"script_name": "plots.py"}  # not written to /workspace/script.py
        r = run(daemon, sandbox_id=sandbox, code=code, stateful=stateful, **named)
        assert r["status"] == "ok", r["stderr"]
        images = [o["image"] for o in r["outputs"] if o["type"] == "image"]
        # Only the figure the code did not save comes back, and not as a /workspace file.
        assert len(images) == 1, [i["path"] for i in images]
        assert images[0]["path"].startswith("/tmp/nsbox-figures/"), images[0]["path"]
        assert base64.b64decode(images[0]["data"]).startswith(PNG_MAGIC)
        assert set(r["files_produced"]) == {"/workspace/plot.png", "/workspace/other.png"}
    assert workspace_files(daemon, sandbox) == ["/workspace/other.png", "/workspace/plot.png"]


def test_auto_saved_figures_are_kept_to_the_newest_64(daemon, sandbox):
    code = ("import matplotlib.pyplot as plt\n"
            "for i in range(30):\n    plt.figure(figsize=(1, 1), dpi=20)\n")
    for _ in range(3):
        r = run(daemon, sandbox_id=sandbox, code=code, timeout_seconds=120)
        assert r["status"] == "ok", r["stderr"]
        assert r["images_left_out"] == 30 - 16  # a reply carries 16
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["ls", "/tmp/nsbox-figures"])
    assert len(r["stdout"].split()) == 64, r["stdout"]
    assert workspace_files(daemon, sandbox) == ["/workspace/script.py"]  # the code (python.run without script_name)


def test_max_output_bytes_bounds_what_is_kept_and_says_what_was_dropped(daemon, sandbox):
    code = "import sys\nsys.stdout.write('o' * 3000)\nsys.stdout.flush()\nsys.stderr.write('e' * 1000)"
    for stateful in (False, True):
        r = run(daemon, sandbox_id=sandbox, code=code, stateful=stateful, max_output_bytes=1000)
        assert r["truncated"] is True, (stateful, r)
        assert len(r["stdout"]) + len(r["stderr"]) == 1000, (stateful, r)
        assert r["output_dropped_bytes"] == 3000, (stateful, r)
        r = run(daemon, sandbox_id=sandbox, code=code, stateful=stateful, max_output_bytes=4000)
        assert r["truncated"] is False and "output_dropped_bytes" not in r, (stateful, r)
        assert (len(r["stdout"]), len(r["stderr"])) == (3000, 1000), (stateful, r)
    for stateful, bad in ((False, -1), (False, "1M"), (False, (256 << 20) + 1), (True, (8 << 20) + 1)):
        with pytest.raises(RpcError) as e:
            run(daemon, sandbox_id=sandbox, code="pass", stateful=stateful, max_output_bytes=bad)
        assert e.value.code == -32602 and "max_output_bytes" in str(e.value), bad


def test_env_is_the_stateless_calls_own(daemon, sandbox):
    code = "import os\nprint(os.environ.get('OUTPUT_DIR'), os.environ.get('HOME'))"
    for _ in range(2):  # the first may run before the fork server is up, the second is served
        r = run(daemon, sandbox_id=sandbox, code=code, env={"OUTPUT_DIR": "output"})
        assert r["status"] == "ok" and r["stdout"] == "output /workspace\n", r
    r = run(daemon, sandbox_id=sandbox, code=code)
    assert r["stdout"] == "None /workspace\n", r  # not left for the next call
    for bad, why in (({"A=B": "x"}, "env"), ({"A": 1}, "env"), ("A=B", "env")):
        with pytest.raises(RpcError) as e:
            run(daemon, sandbox_id=sandbox, code="pass", env=bad)
        assert e.value.code == -32602 and why in str(e.value), bad
    # a stateful call's env: test_python_contexts.py


def test_png_written_by_code_is_in_files_produced(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox,
            code="from PIL import Image\nImage.new('RGB', (8, 8), 'red').save('red.png')")
    assert r["status"] == "ok", r["stderr"]
    assert "/workspace/red.png" in r["files_produced"]


def test_stateful_keeps_variables_and_imports(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, code="import math\nx = 40", stateful=True)
    assert r["status"] == "ok" and r["result"] is None
    r = run(daemon, sandbox_id=sandbox, code="x += 2\nx", stateful=True)
    assert r["result"] == "42"
    r = run(daemon, sandbox_id=sandbox, code="math.sqrt(x * x)", stateful=True)
    assert r["result"] == "42.0"
    r = run(daemon, sandbox_id=sandbox, code="print('side'); {'k': [1, 2]}", stateful=True)
    assert r["stdout"] == "side\n"
    assert r["result"] == "{'k': [1, 2]}"


def test_stateful_exception_is_error_and_state_survives(daemon, sandbox):
    run(daemon, sandbox_id=sandbox, code="y = 7", stateful=True)
    r = run(daemon, sandbox_id=sandbox, code="1/0", stateful=True)
    assert r["status"] == "error"
    assert "ZeroDivisionError" in r["stderr"]
    assert run(daemon, sandbox_id=sandbox, code="y", stateful=True)["result"] == "7"


def test_stateful_output_of_subprocesses_is_captured(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, code="import os\nos.system('echo from-child')", stateful=True)
    assert r["stdout"] == "from-child\n"


def test_stateful_timeout_interrupts_and_keeps_state(daemon, sandbox):
    run(daemon, sandbox_id=sandbox, code="kept = 'yes'", stateful=True)
    r = run(daemon, sandbox_id=sandbox, code="import time\nwhile True: time.sleep(0.05)", stateful=True,
            timeout_seconds=1)
    assert r["status"] == "timeout"
    assert "KeyboardInterrupt" in r["stderr"]
    # Said as every timeout is, after the code's own traceback.
    assert r["stderr"].endswith("nsbox: timed out after 1 s (timeout_seconds), interrupted; the interpreter "
                                "and its variables remain\n"), r["stderr"]
    assert run(daemon, sandbox_id=sandbox, code="kept", stateful=True)["result"] == "'yes'"


def test_stateful_timeout_that_ignores_sigint_restarts_interpreter(daemon, sandbox):
    run(daemon, sandbox_id=sandbox, code="lost = 1", stateful=True)
    r = run(daemon, sandbox_id=sandbox,
            code="import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
            stateful=True, timeout_seconds=1)
    assert r["status"] == "timeout"
    assert "restarted" in r["stderr"]
    r = run(daemon, sandbox_id=sandbox, code="'lost' in globals()", stateful=True)
    assert r["result"] == "False"


def test_stateful_figure_comes_back_as_image(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox,
            code="import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])", stateful=True)
    images = [o for o in r["outputs"] if o["type"] == "image"]
    assert len(images) == 1
    assert base64.b64decode(images[0]["image"]["data"]).startswith(PNG_MAGIC)


def test_stateful_interpreter_does_not_make_the_sandbox_busy(daemon, sandbox):
    run(daemon, sandbox_id=sandbox, code="z = 1", stateful=True)
    assert daemon.call("sandbox.remove", sandbox_id=sandbox)["removed"] is True


def test_session_id_gets_or_creates_a_sandbox(daemon):
    r1 = run(daemon, session_id="py-session-1", code="open('/workspace/mark', 'w').write('m')")
    r2 = run(daemon, session_id="py-session-1", code="print(open('/workspace/mark').read())")
    assert r1["sandbox_id"] == r2["sandbox_id"]
    assert r2["stdout"] == "m\n"
    created = daemon.call("sandbox.create", session_id="py-session-1")
    assert created["existing"] is True and created["sandbox_id"] == r1["sandbox_id"]
    daemon.call("sandbox.remove", sandbox_id=r1["sandbox_id"], force=True)


def test_bad_params_are_invalid_params(daemon, sandbox):
    cases = [dict(sandbox_id=sandbox), dict(sandbox_id=sandbox, code=""), dict(sandbox_id=sandbox, code=5),
             dict(code="1"), dict(sandbox_id=sandbox, session_id="s", code="1"),
             dict(sandbox_id=sandbox, code="1", stateful="yes"),
             dict(sandbox_id=sandbox, code="1", timeout_seconds=-1),
             dict(sandbox_id=sandbox, code="1", requirements="numpy"),
             dict(sandbox_id=sandbox, code="1", requirements=["-r /etc/passwd"]),
             dict(sandbox_id=sandbox, code="1", bogus=1)]
    for params in cases:
        with pytest.raises(RpcError) as e:
            run(daemon, **params)
        assert e.value.code == -32602, params


def test_unknown_sandbox_is_not_found(daemon):
    with pytest.raises(RpcError) as e:
        run(daemon, sandbox_id="00000000-0000-4000-8000-000000000000", code="1")
    assert e.value.kind == "not_found"


@pytest.mark.parametrize("bad", ["-e .", "--index-url=http://evil", "pkg; rm -rf /", "../pkg", "/tmp/x.whl",
                                 "pkg @ http://x/y.whl", "a b", "pkg==1.0 --pre", "$(id)", ""])
def test_package_names_are_validated(daemon, sandbox, bad):
    with pytest.raises(RpcError) as e:
        daemon.call("package.install", sandbox_id=sandbox, packages=[bad])
    assert e.value.code == -32602


def make_wheel(name, version, module_source):
    """A minimal pure-Python wheel, built here (PyPI is not reachable)."""
    dist = "%s-%s.dist-info" % (name, version)
    files = {
        "%s.py" % name: module_source,
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: nsbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join("%s,,\n" % path for path in files) + dist + "/RECORD,,\n"
    files[dist + "/RECORD"] = record
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return "%s-%s-py3-none-any.whl" % (name, version), buf.getvalue()


def test_offline_wheel_install_from_find_links(daemon, sandbox):
    filename, data = make_wheel("nsbox_testpkg", "1.2.3", "ANSWER = 42\n")
    daemon.call("fs.mkdir", sandbox_id=sandbox, path="/workspace/wheels", parents=True)
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/wheels/" + filename,
                content=base64.b64encode(data).decode(), encoding="base64")
    r = daemon.call("package.install", sandbox_id=sandbox, packages=["nsbox_testpkg==1.2.3"],
                    find_links="/workspace/wheels", index_url="")
    assert r["exit_code"] == 0, r["stderr"]
    assert "Successfully installed nsbox_testpkg-1.2.3" in r["stdout"].replace("nsbox-testpkg", "nsbox_testpkg")
    r = run(daemon, sandbox_id=sandbox, code="import nsbox_testpkg\nprint(nsbox_testpkg.ANSWER)")
    assert r["stdout"] == "42\n"
    # the image itself is untouched: a fresh sandbox does not have it
    other = daemon.call("sandbox.create")["sandbox_id"]
    try:
        r = run(daemon, sandbox_id=other, code="import nsbox_testpkg")
        assert r["status"] == "error" and "ModuleNotFoundError" in r["stderr"]
    finally:
        daemon.call("sandbox.remove", sandbox_id=other, force=True)


def test_requirements_already_present_install_offline(daemon, sandbox):
    r = run(daemon, sandbox_id=sandbox, requirements=["numpy"], code="import numpy; print('ok')")
    assert r["status"] == "ok", r["stderr"]
    assert r["stdout"] == "ok\n"


def test_missing_requirement_without_network_is_an_error_not_a_hang(daemon, sandbox):
    t = time.monotonic()
    r = run(daemon, sandbox_id=sandbox, requirements=["surely-not-installed-pkg-xyz"], code="print('never')")
    assert r["status"] == "error"
    assert "never" not in r["stdout"]
    assert "installing the requirements failed" in r["stderr"]
    assert time.monotonic() - t < 120


def test_pip_without_network_says_the_sandbox_has_none(daemon, sandbox):
    r = daemon.call("package.install", sandbox_id=sandbox, packages=["nsbox-no-such-package"])
    assert r["exit_code"] != 0 and "this sandbox has no network" in r["stderr"], r
    r = daemon.call("python.run", sandbox_id=sandbox, code="print(1)", requirements=["nsbox-no-such-package"])
    assert r["status"] == "error" and "this sandbox has no network" in r["stderr"], r
    # Offline on purpose (no index): pip's own word is the answer.
    r = daemon.call("package.install", sandbox_id=sandbox, packages=["nsbox-no-such-package"], index_url="",
                    find_links="/workspace")
    assert r["exit_code"] != 0 and "no network" not in r["stderr"], r
