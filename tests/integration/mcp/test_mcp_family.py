# SPDX-License-Identifier: Apache-2.0
"""nsbox mcp's one tool family, as agent hosts drive it: every
sandbox tool takes session_id or sandbox_id (neither: the connection's own
session), a stateful run_code, persistent shell sessions, binary-safe files,
output capped with the cap stated, stdout in one place, saved images as image
blocks. Driven by the official SDK client (tests/mcp/client.mjs) and by the
MCP Inspector's CLI mode."""
import base64
import json
import os
import shutil
import subprocess

import pytest

from conftest import BUILD, REPO, Daemon
from test_mcp import McpProcess, init_params, scenario, sdk_dir  # noqa: F401  (the SDK fixture)

CAP = 20000
SANDBOX_TOOLS = ["remove_sandbox", "run_code", "execute_python_code", "install_package", "python_execute",
                 "shell_execute", "sandbox_fs_list", "sandbox_fs_read", "sandbox_fs_write", "expose_port",
                 "shell_start", "shell_output", "shell_kill", "shell_session_run", "shell_session_check",
                 "shell_session_list", "shell_session_close", "pause_sandbox", "resume_sandbox",
                 "snapshot_sandbox"]


@pytest.fixture(scope="module")
def family(daemon, sdk_dir):  # noqa: F811
    return scenario(daemon, sdk_dir, "family", timeout=400)


def test_every_sandbox_tool_takes_session_id_or_sandbox_id(daemon, sdk_dir):  # noqa: F811
    tools = {t["name"]: t for t in scenario(daemon, sdk_dir, "list_tools")["tools"]}
    for name in SANDBOX_TOOLS:
        props = tools[name]["inputSchema"]["properties"]
        assert "session_id" in props and "sandbox_id" in props, name
        assert "session_id" not in tools[name]["inputSchema"].get("required", []), name
        assert "sandbox_id" not in tools[name]["inputSchema"].get("required", []), name
    # The descriptions state defaults and limits.
    assert "timeout 30 s" in tools["shell_execute"]["description"]
    assert "20000 characters" in tools["run_code"]["description"]
    assert "no network" in tools["run_code"]["description"]
    assert "default 300" in tools["run_code"]["inputSchema"]["properties"]["session_id"]["description"]


def test_run_code_keeps_variables_in_the_connections_default_session(family):
    assert not family["first"]["isError"], family["first"]
    assert family["second"]["json"]["stdout"] == "42 True\n"
    assert family["second"]["json"]["sandbox_id"] == family["first"]["json"]["sandbox_id"]
    # stateful: false is a fresh script in the same sandbox.
    assert family["stateless"]["json"]["stdout"] == "False\n"


def test_images_saved_with_savefig_come_back_as_image_blocks(family):
    saved = family["saved"]
    assert not saved["isError"], saved["json"]
    assert saved["types"] == ["text", "image", "image"]
    assert sorted((i["mimeType"], i["magic"]) for i in saved["images"]) == [
        ("image/jpeg", "ffd8ffe0"), ("image/png", "89504e47")]
    text = json.dumps(saved["json"])
    assert "/workspace/chart.png" in text and len(text) < 5000  # the path, not the base64


def test_stdout_is_not_duplicated_in_outputs_or_structured_content(family):
    once = family["once"]
    assert once["json"]["stdout"] == "hello-once-" * 3 + "\n"
    assert all(o.get("type") != "logs" for o in once["json"]["outputs"])
    # One text block and structuredContent: the stdout once in each, nowhere else.
    assert once["raw"].count("hello-once-hello-once-hello-once-") == 2


def test_output_is_capped_with_the_cap_stated(family):
    shell = family["big_shell"]["json"]
    assert shell["output_capped"] is True
    assert "[... 80004 characters cut: output capped at 20000;" in shell["stdout"]
    assert "sandbox_fs_read" in shell["stdout"]
    assert shell["stdout"].startswith("a" * (CAP // 2)) and shell["stdout"].endswith("a" * 100 + "END\n")
    assert len(shell["stdout"]) < CAP + 400
    py = family["big_python"]["json"]
    assert "characters cut: output capped at 20000" in py["stdout"] and py["stdout"].endswith("TAIL\n")


def test_binary_files_are_written_and_read_as_base64(family):
    assert not family["write_binary"]["isError"], family["write_binary"]
    assert family["write_binary"]["json"]["bytes_written"] == 256
    assert family["read_binary"]["same"] is True
    assert family["read_binary"]["json"]["encoding"] == "base64"
    # The same sandbox, by its id.
    assert family["by_id"]["json"]["stdout"].strip() == "256"
    assert family["both"]["isError"] is True
    assert "not both" in family["both"]["json"]["error"]


def test_persistent_shell_keeps_cwd_and_variables(family):
    assert not family["sh1"]["isError"], family["sh1"]
    assert family["sh2"]["json"]["stdout"] == "/tmp\nbar\n"
    assert family["sh2"]["json"]["cwd"] == "/tmp"
    assert family["sh_fail"]["isError"] is True and family["sh_fail"]["json"]["exit_code"] == 1


def test_shell_session_runs_in_the_background_and_is_polled_listed_closed(family):
    assert family["bg"]["json"]["running"] is True and not family["bg"]["isError"]
    check = family["bg_check"]["json"]
    assert check["running"] is False and check["exit_code"] == 0 and check["stdout"] == "later\n"
    names = sorted(s["session"] for s in family["sh_list"]["json"]["sessions"])
    assert names == ["bg", "main"]
    assert family["sh_close"]["json"]["terminated"] is True
    assert [s["session"] for s in family["sh_list_after"]["json"]["sessions"]] == ["main"]


def test_cancelling_a_blocking_shell_session_run_interrupts_it_and_keeps_the_shell(daemon, sdk_dir):  # noqa: F811
    r = scenario(daemon, sdk_dir, "shell_session_cancel")
    assert r["rejected"] is True
    assert r["check"]["json"]["running"] is False
    assert r["stopped_ms"] < 60000  # interrupted, not the 300 s sleep
    assert r["after"]["json"]["stdout"] == "/tmp\n"


def test_remove_sandbox_by_session_id(family):
    assert family["sessions"][0]["session_id"].startswith("mcp-")
    assert family["remove"]["json"]["removed"] is True
    assert family["remove_none"]["isError"] is True
    assert "sandbox_id" in family["remove_none"]["json"]["error"]


def test_a_reaped_session_says_it_was_recreated(sdk_dir):  # noqa: F811
    # Idle sandboxes are paused by default: this daemon removes them instead.
    d = Daemon(extra_args=["--idle-action", "remove"])
    try:
        r = scenario(d, sdk_dir, "reaped", timeout=200)
    finally:
        assert d.stop() == 0, d.final_log[-4000:]
    assert r["gone"] is True
    again = r["again"]["json"]
    assert again["recreated"] is True
    assert "reaped (idle for" in again["note"] and "recreated" in again["note"]
    assert again["stdout"] == "False\n"


def test_an_out_of_memory_run_says_out_of_memory(daemon, sdk_dir):  # noqa: F811
    r = scenario(daemon, sdk_dir, "oom", timeout=200)
    assert r["oom"]["isError"] is True
    assert r["oom"]["json"]["oom_killed"] is True
    assert "out of memory" in r["oom"]["json"]["note"]
    assert r["stateful"]["isError"] is True
    assert "out of memory" in r["stateful"]["json"]["note"]


# --- the MCP Inspector's CLI mode -------------------------------------------------------


@pytest.fixture(scope="module")
def inspector_dir():
    assert shutil.which("node"), "node is missing (make deps-test installs nodejs and npm)"
    subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "mcp-inspector"], check=True, timeout=900)
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "mcp-inspector-dir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert os.path.isdir(os.path.join(out, "node_modules", "@modelcontextprotocol", "inspector")), out
    return out


def inspector(daemon, inspector_dir, *args):
    p = subprocess.run(["npx", "--no-install", "--prefix", inspector_dir, "@modelcontextprotocol/inspector",
                        "--cli", os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "mcp", *args],
                       cwd=inspector_dir, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_inspector_cli_lists_tools_and_calls_run_code(daemon, inspector_dir):
    tools = inspector(daemon, inspector_dir, "--method", "tools/list")["tools"]
    names = [t["name"] for t in tools]
    assert "run_code" in names and "shell_session_run" in names and "create_sandbox" in names
    result = inspector(daemon, inspector_dir, "--method", "tools/call", "--tool-name", "run_code",
                       "--tool-arg", "session_id=inspector", "--tool-arg", "code=print(6 * 7)")
    assert result.get("isError") is False, result
    assert json.loads(result["content"][0]["text"])["stdout"] == "42\n"
    daemon.cli("rm", "-f", json.loads(result["content"][0]["text"])["sandbox_id"])


def _tool(m, tool, **arguments):
    r = m.request("tools/call", {"name": tool, "arguments": arguments}, timeout=120)
    result = r["result"]
    return result["isError"], json.loads(result["content"][0]["text"])


def test_snapshot_fork_and_remove_through_mcp(daemon):
    m = McpProcess(daemon.socket)
    forks = []
    try:
        m.request("initialize", init_params("2025-11-25"))
        bad, _ = _tool(m, "sandbox_fs_write", session_id="mcp-snap", path="notes.txt", content="prepared\n")
        assert not bad
        bad, snap = _tool(m, "snapshot_sandbox", session_id="mcp-snap", name="prepared")
        assert not bad, snap
        sid = snap["snapshot_id"]
        bad, _ = _tool(m, "sandbox_fs_write", session_id="mcp-snap", path="notes.txt", content="later\n")
        for _ in range(2):
            bad, fork = _tool(m, "create_sandbox", from_snapshot=sid)
            assert not bad, fork
            forks.append(fork["sandbox_id"])
        bad, read = _tool(m, "sandbox_fs_read", sandbox_id=forks[0], path="notes.txt")
        assert not bad and read["content"] == "prepared\n", read
        _tool(m, "sandbox_fs_write", sandbox_id=forks[0], path="notes.txt", content="fork 0\n")
        bad, read = _tool(m, "sandbox_fs_read", sandbox_id=forks[1], path="notes.txt")
        assert read["content"] == "prepared\n", read
        bad, listed = _tool(m, "list_snapshots")
        assert not bad and sid in json.dumps(listed), listed
        bad, refused = _tool(m, "remove_snapshot", snapshot_id=sid)
        assert bad and refused["kind"] == "busy", refused
        for f in forks:
            assert not _tool(m, "remove_sandbox", sandbox_id=f, force=True)[0]
        forks = []
        bad, removed = _tool(m, "remove_snapshot", snapshot_id=sid)
        assert not bad, removed
        _tool(m, "remove_sandbox", session_id="mcp-snap", force=True)
    finally:
        for f in forks:
            try:
                daemon.call("sandbox.remove", sandbox_id=f, force=True)
            except Exception:
                pass
        m.proc.kill()
        m.proc.wait()
