# SPDX-License-Identifier: Apache-2.0
"""Result objects of the SDK: plain attributes over the daemon's reply
(the reply itself stays in `.raw`)."""
import base64
import dataclasses
import re
from typing import Any, Dict, List, Optional, Union


@dataclasses.dataclass
class Image:
    """A figure a run produced (matplotlib), as bytes."""
    mime: str
    data: bytes
    path: Optional[str] = None


@dataclasses.dataclass
class ExecutionError:
    """Why a run_code call failed: the exception's name, value and traceback."""
    name: str
    value: str
    traceback: str


@dataclasses.dataclass
class Execution:
    """The result of `run_code` (python.run)."""
    status: str
    stdout: str
    stderr: str
    exit_code: Optional[int]
    result: Optional[str]
    images: List[Image]
    files_produced: Dict[str, int]
    execution_time_ms: Optional[float]
    error: Optional[ExecutionError]
    raw: Dict[str, Any] = dataclasses.field(repr=False)

    @property
    def text(self):
        """E2B's name for the repr of the last expression."""
        return self.result

    @property
    def ok(self):
        return self.status == "ok"

    @classmethod
    def from_reply(cls, r):
        images = []
        for out in r.get("outputs") or []:
            if isinstance(out, dict) and out.get("type") == "image":
                img = out.get("image") or {}
                images.append(Image(mime=img.get("mime", "image/png"),
                                    data=base64.b64decode(img.get("data") or ""), path=img.get("path")))
        status = r.get("status", "error")
        stderr = r.get("stderr") or ""
        error = None
        if status == "timeout":
            error = ExecutionError("TimeoutError", "the code ran past its timeout", stderr)
        elif isinstance(r.get("error"), dict):  # a stateful call's exception, as the interpreter saw it
            e = r["error"]
            error = ExecutionError(e.get("name") or "Error", e.get("value") or "", e.get("traceback") or stderr)
        elif status != "ok":
            error = _parse_traceback(stderr, r)
        return cls(status=status, stdout=r.get("stdout") or "", stderr=stderr, exit_code=r.get("exit_code"),
                   result=r.get("result"), images=images, files_produced=r.get("files_produced") or {},
                   execution_time_ms=r.get("execution_time_ms"), error=error, raw=r)


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|[A-Z]\w*))(?::\s?(.*))?$")


def _parse_traceback(stderr, r):
    """The last `Name: value` line of a Python traceback."""
    lines = [ln for ln in stderr.rstrip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _EXC_LINE.match(ln)
        if m:
            return ExecutionError(m.group(1), m.group(2) or "", stderr)
    if r.get("oom_killed"):
        return ExecutionError("MemoryError", "killed: out of memory", stderr)
    return ExecutionError("Error", lines[-1] if lines else "exit code %s" % r.get("exit_code"), stderr)


@dataclasses.dataclass
class CommandResult:
    """The result of a command (sandbox.exec / exec.status). stdout and
    stderr are str, or bytes when the command ran with binary=True."""
    exec_id: Optional[str]
    exit_code: Optional[int]
    signal: Optional[int]
    stdout: Union[str, bytes]
    stderr: Union[str, bytes]
    truncated: bool
    timed_out: bool
    oom_killed: bool
    duration_ms: Optional[float]
    running: bool
    raw: Dict[str, Any] = dataclasses.field(repr=False)

    @property
    def ok(self):
        return self.exit_code == 0

    def check(self):
        """Raise CommandExitError unless the command exited with 0; else self."""
        from .errors import CommandExitError
        if not self.ok:
            raise CommandExitError(self)
        return self

    @classmethod
    def from_reply(cls, r, stdout, stderr):
        return cls(exec_id=r.get("exec_id"), exit_code=r.get("exit_code"), signal=r.get("signal"),
                   stdout=stdout, stderr=stderr, truncated=bool(r.get("truncated")),
                   timed_out=bool(r.get("timed_out")), oom_killed=bool(r.get("oom_killed")),
                   duration_ms=r.get("duration_ms"), running=bool(r.get("running")), raw=r)


@dataclasses.dataclass
class EntryInfo:
    """One entry of files.list (fs.list)."""
    name: str
    path: str
    type: str
    size: int
    mode: int
    mtime: Any
    raw: Dict[str, Any] = dataclasses.field(repr=False)


@dataclasses.dataclass
class ShellResult:
    """A command of a shell session (shell.run / shell.check). stdout and
    stderr are str, or bytes with binary=True; with since= (check), only
    the output after those offsets. running is True while a non-blocking
    command (or a blocking one past its timeout) still runs; `next` holds
    the offsets to pass as since= to the next check."""
    session: str
    command_id: Optional[str]
    running: bool
    exit_code: Optional[int]
    stdout: Union[str, bytes]
    stderr: Union[str, bytes]
    cwd: Optional[str]
    duration_ms: Optional[float]
    timed_out: bool
    truncated: bool
    next: Dict[str, int]
    raw: Dict[str, Any] = dataclasses.field(repr=False)

    @property
    def ok(self):
        return self.exit_code == 0

    @classmethod
    def from_reply(cls, r, stdout, stderr):
        return cls(session=r.get("session"), command_id=r.get("command_id"), running=bool(r.get("running")),
                   exit_code=r.get("exit_code"), stdout=stdout, stderr=stderr, cwd=r.get("cwd"),
                   duration_ms=r.get("duration_ms"), timed_out=bool(r.get("timed_out")),
                   truncated=bool(r.get("truncated")), next=dict(r.get("next") or {}), raw=r)
