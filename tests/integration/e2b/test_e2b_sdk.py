# SPDX-License-Identifier: Apache-2.0
"""E2B's own SDKs, unmodified, against nsbox-http: the JavaScript SDKs from npm
(e2b and @e2b/code-interpreter, pinned in tests/e2b/package.json) run
tests/e2b/suite.mjs with only E2B_API_URL, E2B_SANDBOX_URL, E2B_VOLUME_API_URL
and E2B_API_KEY pointing at nsbox."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO
from e2b_front import KEY_A, KEY_B, front  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def sdk_dir():
    """The SDKs, installed by `make e2b-sdk` into the cache dir (once)."""
    node = shutil.which("node") or "/usr/bin/node"
    assert os.path.exists(node), "node is missing (make deps-test installs nodejs and npm)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip().lstrip("v")
    major, minor = (int(x) for x in version.split(".")[:2])
    # the engines of the pinned e2b and @e2b/code-interpreter
    assert (major, minor) >= (20, 18) and major != 21, "the E2B SDKs want Node >= 20.18.1 (not 21), this is " + version
    subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "e2b-sdk"], check=True, timeout=600)
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "e2b-sdk-dir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert os.path.isdir(os.path.join(out, "node_modules", "e2b")), out
    return out


def scenario(front, sdk_dir, name, timeout=240):
    url = "http://127.0.0.1:%d" % front.port
    return run_suite(front, sdk_dir, name, timeout, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_VOLUME_API_URL=url)


def run_suite(front, sdk_dir, name, timeout, **urls):
    """The report of suite.mjs's scenario name, run with key A (key B the other) and these URLs."""
    env = dict(os.environ, E2B_SDK_DIR=sdk_dir, E2B_API_KEY=KEY_A, E2B_OTHER_KEY=KEY_B, **urls)
    env.pop("E2B_DOMAIN", None)
    p = subprocess.run(["node", os.path.join(REPO, "tests", "e2b", "suite.mjs"), name], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "suite.mjs %s failed (%d):\n%s\n%s" % (name, p.returncode, p.stdout, p.stderr)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert "exception" not in report, report["exception"] + "\nnsbox-http log:\n" + front.read_log()[-4000:]
    return report


def test_create_list_connect_timeout_kill(front, sdk_dir):
    r = scenario(front, sdk_dir, "lifecycle")
    assert r["isRunning"] is True
    assert r["info"]["state"] == "running"
    assert r["info"]["metadata"]["suite"] == "e2b"
    assert r["listed"] == [r["sandboxId"]]  # the metadata filter leaves the other sandbox out
    assert r["env"] == "hi\n"
    assert r["timeoutSet"] is True
    assert r["connected"] == "again\n"
    assert r["isRunningAfterKill"] is False
    assert r["infoAfterKill"].endswith("NotFoundError")


def test_commands_foreground_background_stdin_kill(front, sdk_dir):
    r = scenario(front, sdk_dir, "commands")
    assert r["fg"] == {"stdout": "out\n", "stderr": "err\n", "exitCode": 0}
    assert r["callbacks"] == {"out": "a\n", "err": "b\n"}
    assert r["exit"]["isCommandExitError"] is True
    assert r["exit"]["exitCode"] == 3
    assert r["exit"]["stderr"] == "failing\n"
    assert r["bg"] == {"stdout": "done-bg\n", "exitCode": 0, "pid": "number"}
    assert r["stdin"] == "from stdin\n"
    assert r["listedSleeper"] is True
    assert r["killed"] is True
    assert r["killedWait"]["name"] == "CommandExitError"
    assert r["connectWait"] == 0


def test_files(front, sdk_dir):
    r = scenario(front, sdk_dir, "files")
    assert r["text"] == "hello e2b\n"
    assert r["bytes"] == [0, 1, 2, 250, 255]
    assert r["exists"] is True and r["missing"] is False
    assert r["madeDir"] is True and r["madeAgain"] is False
    assert r["info"] == {"name": "hello.txt", "type": "file", "size": 10, "path": "/workspace/dir/hello.txt"}
    assert "dir:dir" in r["list"] and "bin.dat:file" in r["list"]
    assert "/workspace/made/sub" in r["deep"] and "/workspace/dir/hello.txt" in r["deep"]
    assert r["moved"] == "/workspace/dir/moved.txt"
    assert r["movedText"] == "hello e2b\n"
    assert r["removed"] is True
    assert r["readMissing"].endswith("NotFoundError")


def test_watch_dir(front, sdk_dir):
    r = scenario(front, sdk_dir, "watch")
    assert "create:a.txt" in r["events"]
    assert "write:a.txt" in r["events"]
    assert "create:sub/b.txt" in r["events"]
    assert r["events"].index("create:a.txt") < r["events"].index("remove:a.txt")
    assert r["after"] == "still\n"


def test_run_code_stateful_text_png_error_and_contexts(front, sdk_dir):
    r = scenario(front, sdk_dir, "interpreter")
    assert r["text"] == "42"
    assert r["stdout"] == ["hi\n"]
    assert r["png"] is True
    assert r["error"] == {"name": "ZeroDivisionError", "value": "division by zero", "traceback": True}
    assert r["stderrBeforeError"] == ["before\n"]  # the traceback is the error's, not stderr's
    assert r["inContext"] == "10"
    assert r["defaultHasY"] == "False" and r["contextHasX"] == "False"
    assert r["listed"] is True
    assert r["afterRestart"] == "False"
    assert r["listedAfterRemove"] is False
    assert r["contextCwd"] == "'/tmp'" and r["defaultCwd"] == "'/workspace'"
    assert r["envs"] == "'v'" and r["envsAfter"] == "'unset'"


def test_run_code_callbacks_hear_lines_while_the_cell_runs(front, sdk_dir):
    r = scenario(front, sdk_dir, "interpreterLive")
    assert ["out", "saw-go\n"] in r["heard"]  # the callback's file reached the cell before it gave up
    assert ["err", "err-first\n"] in r["heard"]
    assert r["stdout"] == ["first\n", "saw-go\n"]
    assert r["figureStdout"] == ["saw-go\n"] and r["figurePngs"] == 1


def test_pty_input_resize_kill(front, sdk_dir):
    r = scenario(front, sdk_dir, "pty")
    assert r["seen"] == {"answer": True, "size": True}
    assert r["ptyKilled"] is True


def test_pause_connect_and_metrics(front, sdk_dir):
    r = scenario(front, sdk_dir, "pause")
    assert r["paused"] is True
    assert r["pausedAgain"] is False  # E2B's 409: paused already
    assert r["stateWhilePaused"] == "paused"
    assert r["stateAfterConnect"] == "running"
    assert r["kept"] == "kept"
    assert r["metrics"] == {"memTotal": True, "memUsed": True, "cpuCount": 1, "date": True}


def test_snapshots_create_from_snapshot_and_fork(front, sdk_dir):
    r = scenario(front, sdk_dir, "snapshots")
    assert r["names"] and r["names"][0].startswith("snap-")
    assert r["listed"] is True
    assert r["fromSnapshot"] == "before the snapshot"
    assert r["forks"] == ["before the snapshot", "before the snapshot"] and r["forkIds"] == 2
    assert r["deleted"] is True and r["deletedAgain"] is False


def test_two_api_keys_do_not_see_each_others_sandboxes(front, sdk_dir):
    r = scenario(front, sdk_dir, "isolation")
    assert r["otherSees"] is False
    assert r["otherConnect"].endswith("NotFoundError")
    assert r["otherKill"] in ("NotFoundError", "no error")  # E2B's kill of a missing sandbox returns false
    assert r["stillRunning"] is True


def test_volumes_created_mounted_shared_and_destroyed(front, sdk_dir):
    """E2B's Volume class and Sandbox.create's volumeMounts on nsbox volumes
    of the key's uid: a file written by one sandbox (and by files.write,
    which sees the volume at its mount point) is read by the next."""
    r = scenario(front, sdk_dir, "volumes")
    assert r["created"]["volumeId"] == r["created"]["name"] and r["created"]["name"].startswith("e2b-vol-")
    assert r["listed"] is True and r["info"] == r["created"]["name"]
    assert r["otherInfo"] == "VolumeNotFoundError" and r["otherListed"] is False
    assert r["mounts"] == [{"name": r["created"]["name"], "path": "/data"}]
    assert r["readByFiles"] == "kept\n"
    assert r["owner"] == "sandbox\n", r["owner"]
    assert r["second"] == "kept\nwritten by files.write\n"
    assert r["destroyWhileMounted"] == "VolumeError"
    assert r["destroyed"] is True and r["destroyedAgain"] is False
    assert r["infoAfterDestroy"] == "VolumeNotFoundError"


def test_volume_content_written_and_read_without_a_sandbox(front, sdk_dir):
    """E2B's volume content API (Volume.writeFile, readFile, list, makeDir,
    getInfo, exists, updateMetadata, remove) with the volume's token: what
    writeFile puts in a volume a sandbox mounting it reads as its user's,
    what the sandbox writes readFile sees; paths stay in the volume, and
    another key's token reaches only its own."""
    r = scenario(front, sdk_dir, "volumeContent")
    assert r["hasToken"] is True
    dates = {"datesValid": True, "uid": 1000, "gid": 1000}
    assert r["written"] == dict(dates, name="from-sdk.txt", type="file", path="/notes/from-sdk.txt",
                                size=len("written by Volume.writeFile\n"), mode=0o644), r["written"]
    assert r["madeDir"]["type"] == "directory" and r["madeDir"]["path"] == "/made/deep", r["madeDir"]
    assert r["madeAgain"] == "VolumeError"
    assert r["bytes"] == [0, 1, 2, 250, 255]
    assert r["inSandbox"] == "written by Volume.writeFile\nsandbox 644\nsandbox 755\n", r["inSandbox"]
    assert r["readWhileMounted"] == r["readAfter"] == "written in the sandbox\n"
    assert [(e["name"], e["type"], e["path"], e["uid"]) for e in r["listed"]] == [
        ("from-sandbox.txt", "file", "/notes/from-sandbox.txt", 1000),
        ("from-sdk.txt", "file", "/notes/from-sdk.txt", 1000)], r["listed"]
    assert r["listedDeep"] == ["/bin.dat", "/lost+found", "/made", "/made/deep", "/notes",
                               "/notes/from-sandbox.txt", "/notes/from-sdk.txt"], r["listedDeep"]
    assert r["info"]["type"] == "directory" and r["info"]["datesValid"], r["info"]
    assert r["exists"] is True and r["missing"] is False
    assert r["updatedMode"] == 0o600 and r["chown"] == "VolumeError"
    assert r["readMissing"] == "VolumePathNotFoundError"
    assert r["readAbove"] == "VolumeError"
    assert r["forgedToken"] == "AuthenticationError"
    assert r["theirsSees"] is False and r["theirsTokenDiffers"] is True
    assert r["existsAfterRemove"] is False and r["removeMissing"] == "VolumePathNotFoundError"
    assert r["connectedRead"] == [0, 1, 2, 250, 255]
