# SPDX-License-Identifier: Apache-2.0
"""The SDK's operations, written once without I/O.

Each operation is a generator that yields what it needs done (a JSON-RPC
call, a user callback to invoke, a pause) and receives the outcome; the sync
client (nsbox.sandbox) and the asyncio twin (nsbox.aio) each drive the same
generators over their own socket. Protocol errors are thrown into the
generator as NsboxError, so an operation may catch the ones it expects."""
import base64
import codecs
import os
import posixpath
import re
import secrets
import signal as _signal
import sys
import time

from .errors import (CommandNotFoundError, CommandTimeoutError, NotFoundError, NsboxConnectionError,
                     SandboxTimeoutError)
from .models import CommandResult, EntryInfo, Execution, ShellResult

DEFAULT_SOCKET = "/run/nsbox/nsbox.sock"
# A reply may hold 64 MiB of file content as base64, plus JSON framing.
MAX_LINE = 128 << 20


def socket_path(socket=None):
    return socket or os.environ.get("NSBOX_SOCKET") or DEFAULT_SOCKET


def _take_output(params, decoders, parts, callbacks):
    """An exec.output notification's text: decoded into its stream's parts,
    and handed to that stream's callback (whose answer is returned)."""
    chunk = decoders[params["stream"]].feed(params.get("data"))
    if chunk:
        parts[params["stream"]].append(chunk)
        if callbacks[params["stream"]] is not None:
            return callbacks[params["stream"]](chunk)
    return None


class Call:
    """A JSON-RPC request; on_notify sees each notification that comes before its reply."""
    __slots__ = ("method", "params", "on_notify")

    def __init__(self, method, params=None, on_notify=None):
        self.method, self.params, self.on_notify = method, params, on_notify


class Invoke:
    """A user callback: the asyncio driver awaits it when it returns an awaitable."""
    __slots__ = ("fn", "args")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


class Sleep:
    __slots__ = ("seconds",)

    def __init__(self, seconds):
        self.seconds = seconds


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)


def parse_size(value):
    """Bytes from an int or a string like "512M", "1G", "256MiB"."""
    if value is None or isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError("not a size: %r (use bytes or e.g. \"512M\")" % (value,))
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


class Decoder:
    """Output chunks as they come off the wire (base64 or text) to bytes, or
    to text decoded incrementally so that a character split between two
    chunks is not mangled."""

    def __init__(self, binary, wire_base64=True):
        self.binary, self.wire_base64 = binary, wire_base64
        self.text = None if binary else codecs.getincrementaldecoder("utf-8")("replace")
        self.received = 0  # bytes of the stream so far: where exec.output takes it up

    def feed(self, data):
        if not data:
            return b"" if self.binary else ""
        raw = base64.b64decode(data) if self.wire_base64 else data.encode("utf-8", "surrogatepass")
        self.received += len(raw)
        return raw if self.binary else self.text.decode(raw)

    def finish(self):
        return b"" if self.binary else self.text.decode(b"", final=True)


# How nsboxd's stderr begins when the command could not be started at all (no
# such program: exit 127; not executable: 126). nsboxd sends that message as
# text even when the exec asked for base64.
_START_ERROR = "nsbox: cannot run the command: "


def _start_error(r):
    """nsboxd's message when the exec could not start its command, else None."""
    text = r.get("stderr")
    if r.get("exit_code") not in (126, 127) or not isinstance(text, str):
        return None
    if not text.startswith(_START_ERROR) and r.get("encoding") == "base64":
        try:  # as it would come from an nsboxd that encodes it
            text = base64.b64decode(text, validate=True).decode("utf-8")
        except ValueError:
            return None
    return text if text.startswith(_START_ERROR) else None


def _as_output(text, binary):
    return text.encode("utf-8") if binary else text


def exec_output(r, binary, wire_base64):
    """(stdout, stderr) of an exec reply (sandbox.exec, exec.status, exec.output)."""
    start_error = _start_error(r)
    out = []
    for name in ("stdout", "stderr"):
        if name == "stderr" and start_error is not None:
            out.append(_as_output(start_error, binary))
            continue
        d = Decoder(binary, wire_base64)
        out.append(d.feed(r.get(name)) + d.finish())
    return out


def _join(parts, binary):
    return (b"" if binary else "").join(parts)


def _b64(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.b64encode(bytes(data)).decode("ascii")


def _drop_none(d):
    return {k: v for k, v in d.items() if v is not None}


# Runs "$@" with stdin from the file "$0", unlinked once open: stdin that is
# not UTF-8 goes through a file written with fs.write (base64), since
# sandbox.exec takes stdin as a JSON string.
_STDIN_FROM_FILE = 'exec 0<"$0" || exit 125; rm -f -- "$0"; exec "$@"'


def create_params(session_id=None, image=None, memory=None, pids=None, cpus=None, disk=None, network=None,
                  env=None, labels=None, idle_timeout=None, seccomp_profile=None, from_snapshot=None,
                  idle_action=None, paused_timeout=None, mounts=None, secrets=None):
    limits = _drop_none({"memory_bytes": parse_size(memory), "pids": pids, "cpus": cpus,
                         "disk_bytes": parse_size(disk)})
    return _drop_none({"session_id": session_id, "image": image, "limits": limits or None, "network": network,
                       "env": env, "labels": labels, "idle_timeout_seconds": idle_timeout,
                       "seccomp_profile": seccomp_profile, "from_snapshot": from_snapshot,
                       "idle_action": idle_action, "paused_timeout_seconds": paused_timeout,
                       "mounts": [dict(m) for m in mounts] if mounts else None,
                       "secrets": secrets})


def volume_params(name, size):
    return {"name": name, "size": parse_size(size)}


class SandboxCore:
    """What Sandbox and AsyncSandbox share: state and operations."""
    _commands_cls = None  # set by each flavour
    _files_cls = None
    _shell_cls = None
    _desktop_cls = None
    _browser_cls = None

    def __init__(self, conn, reply, keep=None):
        self._conn = conn
        self.sandbox_id = reply["sandbox_id"]
        self.session_id = reply.get("session_id")
        self.existing = bool(reply.get("existing"))
        # A session's sandbox is there to be found again by its name (the next
        # turn of an agent, another process): the end of a `with` block keeps
        # it whether or not that block made it, unless keep=False says so.
        self.keep = bool(self.session_id) if keep is None else keep
        self.created = reply
        self._execs_kept = None  # server.info says nsboxd keeps foreground execs (live restore): asked once
        self.commands = self._commands_cls(self)
        self.files = self._files_cls(self)
        self.shell = self._shell_cls(self)
        self.desktop = self._desktop_cls(self)
        self.browser = self._browser_cls(self)

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.sandbox_id)

    _fs_prefix = "fs."
    _fs_home = "/workspace"

    def _p(self, **params):
        return dict(sandbox_id=self.sandbox_id, **_drop_none(params))

    def _alive_call(self):
        return Call("sandbox.info", self._p())

    def info(self):
        """sandbox.info: state, limits and stats."""
        return (yield Call("sandbox.info", self._p()))

    def remove(self, force=True):
        """Remove the sandbox (every process killed, its files gone)."""
        return (yield Call("sandbox.remove", self._p(force=force)))

    def kill(self):
        """Remove the sandbox at once, whatever runs in it."""
        return (yield Call("sandbox.remove", self._p(force=True)))

    def run_code(self, code, stateful=True, timeout=30, requirements=None, files=None, env=None, context=None,
                 on_stdout=None, on_stderr=None):
        """Run Python code (python.run). stateful=True keeps variables between
        calls; files ({path: str|bytes}) are written into /workspace first;
        env ({NAME: value}) is the code's for this call; context (stateful)
        names a context of the interpreter, with globals and a cwd of its own;
        on_stdout/on_stderr get the output as the code writes it."""
        sent = {path: content if isinstance(content, str) else {"content": _b64(content), "encoding": "base64"}
                for path, content in (files or {}).items()}
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        decoders = {name: Decoder(False, wire_base64=False) for name in callbacks}
        parts = {name: [] for name in callbacks}
        shown = []
        stream = on_stdout is not None or on_stderr is not None

        def on_notify(msg):
            p = msg.get("params")
            if not isinstance(p, dict):
                return None
            if msg.get("method") == "python.image":  # a figure shown while a stateful call runs
                shown.append({"type": "image", "image": p})
                return None
            if msg.get("method") != "exec.output" or p.get("stream") not in decoders:
                return None
            return _take_output(p, decoders, parts, callbacks)

        r = yield Call("python.run", self._p(code=code, stateful=stateful, timeout_seconds=timeout,
                                             requirements=list(requirements) if requirements else None,
                                             files=sent or None, env=env, context=context,
                                             stream=True if stream else None), on_notify if stream else None)
        if stream:  # the reply holds only what was not streamed (a stateful call's traceback, nsboxd's notes)
            r = dict(r, stdout="".join(parts["stdout"]) + decoders["stdout"].finish() + (r.get("stdout") or ""),
                     stderr="".join(parts["stderr"]) + decoders["stderr"].finish() + (r.get("stderr") or ""),
                     outputs=shown + (r.get("outputs") or []))
        execution = Execution.from_reply(r)
        if execution.status == "timeout":
            raise CommandTimeoutError("code", timeout, execution)
        return execution

    def pause(self, force=False):
        """Freeze every process of the sandbox (sandbox.pause); force: even with
        work running. A later request that needs its processes resumes it."""
        return (yield Call("sandbox.pause", self._p(force=force)))

    def resume(self):
        return (yield Call("sandbox.resume", self._p()))

    def snapshot(self, name=None):
        """A copy of the sandbox's files (sandbox.snapshot): {snapshot_id, ...}.
        Sandbox.create(from_snapshot=its snapshot_id) starts a sandbox with them."""
        return (yield Call("sandbox.snapshot", self._p(name=name)))

    def pip_install(self, packages, index_url=None, find_links=None):
        """pip install inside the sandbox (package.install)."""
        if isinstance(packages, str):
            packages = [packages]
        r = yield Call("package.install", self._p(packages=list(packages), index_url=index_url,
                                                  find_links=find_links))
        return CommandResult.from_reply(r, r.get("stdout") or "", r.get("stderr") or "")

    def expose(self, port):
        """Make the sandbox's TCP port reachable from the host: its URL."""
        r = yield Call("sandbox.expose", self._p(port=int(port)))
        return r["url"]

    def unexpose(self, port):
        return (yield Call("sandbox.unexpose", self._p(port=int(port))))


# How long a foreground command whose nsboxd went away waits for the next one.
TAKE_BACK_WAIT = 30


def _take_back(exec_id, decoders, parts, callbacks):
    """nsboxd went away during a foreground command it keeps (live restore):
    wait for the next nsboxd and follow the command's output (exec.output)
    from the bytes already had to its end, each byte once. Returns the last
    answer, which says how it ended."""
    sys.stderr.write("nsbox: nsboxd went away during the command, which runs on (live restore); "
                     "waiting up to %d s for nsboxd to come back\n" % TAKE_BACK_WAIT)
    give_up = time.monotonic() + TAKE_BACK_WAIT
    while True:
        since = {name: d.received for name, d in decoders.items()}
        try:
            r = yield Call("exec.output", {"exec_id": exec_id, "since": since, "wait_ms": 10000})
        except NsboxConnectionError:
            if time.monotonic() >= give_up:
                raise
            yield Sleep(0.2)
            continue
        give_up = time.monotonic() + TAKE_BACK_WAIT  # a later stop gets its own wait
        for name in decoders:
            chunk = decoders[name].feed(r.get(name))
            decoders[name].received = (r.get("next") or {}).get(name, decoders[name].received)
            if chunk:
                parts[name].append(chunk)
                if callbacks[name] is not None:
                    yield Invoke(callbacks[name], chunk)
        if not r.get("more") and not r.get("running"):
            return dict(r, stdout=None, stderr=None)


class CommandsCore:
    _handle_cls = None

    def __init__(self, sandbox):
        self._sandbox = sandbox

    @property
    def _conn(self):
        return self._sandbox._conn

    def run(self, cmd, cwd=None, env=None, user=None, timeout=30, stdin=None, background=False,
            on_stdout=None, on_stderr=None, binary=False, max_output_bytes=None, check=False):
        """Run a command: a string (under /bin/sh -c) or an argv list.

        Foreground: a CommandResult; on_stdout/on_stderr get each chunk as it
        arrives (str, or bytes with binary=True). background=True: a handle
        at once (timeout=None leaves the daemon's default). stdin may be str
        or bytes."""
        sb = self._sandbox
        argv = None
        if isinstance(cmd, (list, tuple)):
            argv = [str(a) for a in cmd]
            if not argv:
                raise ValueError("empty argv")
        elif not isinstance(cmd, str):
            raise TypeError("cmd must be a str (shell command) or a list (argv)")
        stdin_text = None
        if stdin is not None:
            if isinstance(stdin, str):
                stdin_text = stdin
            else:
                data = bytes(stdin)
                try:
                    stdin_text = data.decode("utf-8")
                except UnicodeDecodeError:
                    path = "/tmp/.nsbox-stdin-" + secrets.token_hex(8)
                    yield Call("fs.write", sb._p(path=path, content=_b64(data), encoding="base64", mode=0o644))
                    argv = ["/bin/sh", "-c", _STDIN_FROM_FILE, path] + (argv or ["/bin/sh", "-c", cmd])
        if timeout is not None:
            timeout = max(1, int(timeout + 0.999))
        params = sb._p(argv=argv, command=None if argv else cmd, cwd=cwd, env=env, user=user,
                       timeout_seconds=timeout, stdin=stdin_text, max_output_bytes=max_output_bytes,
                       encoding="base64")
        if background:
            params["background"] = True
            r = yield Call("sandbox.exec", params)
            return self._handle_cls(sb, r["exec_id"], pid=r.get("pid"), binary=binary, wire_base64=True)
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        decoders = {name: Decoder(binary) for name in callbacks}
        parts = {name: [] for name in callbacks}
        stream = on_stdout is not None or on_stderr is not None

        started = {}

        def on_notify(msg):
            if msg.get("method") == "exec.started" and isinstance(msg.get("params"), dict):
                started.update(msg["params"])
            p = msg.get("params") if msg.get("method") == "exec.output" else None
            if not isinstance(p, dict) or p.get("stream") not in decoders:
                return None
            return _take_output(p, decoders, parts, callbacks)

        if stream:
            params["stream"] = True
        if sb._execs_kept is None:
            info = yield Call("server.info")
            sb._execs_kept = "exec-kept" in (info.get("features") or [])
        if sb._execs_kept:
            params["notify_started"] = True  # its id, to take it back should nsboxd stop
        try:
            r = yield Call("sandbox.exec", params, on_notify)
        except NsboxConnectionError:
            if not started.get("kept") or not isinstance(started.get("exec_id"), str):
                raise
            r = yield from _take_back(started["exec_id"], decoders, parts, callbacks)
        start_error = _start_error(r)
        for name in ("stdout", "stderr"):
            if name == "stderr" and start_error is not None:
                chunk = _as_output(start_error, binary)
            else:
                chunk = decoders[name].feed(r.get(name)) + decoders[name].finish()
            if chunk:
                parts[name].append(chunk)
                if callbacks[name] is not None:
                    yield Invoke(callbacks[name], chunk)
        result = CommandResult.from_reply(r, _join(parts["stdout"], binary), _join(parts["stderr"], binary))
        if start_error is not None:
            raise CommandNotFoundError(result)
        if result.timed_out:
            raise CommandTimeoutError("command %r" % (cmd,), timeout, result)
        return result.check() if check else result

    def list(self):
        """Background commands of the sandbox (exec.list), as handles."""
        r = yield Call("exec.list", self._sandbox._p())
        return [self._handle_cls(self._sandbox, e["exec_id"], info=e) for e in r.get("execs", [])]

    def connect(self, exec_id, binary=False):
        """A handle on a background command started elsewhere."""
        r = yield Call("exec.status", {"exec_id": exec_id})
        return self._handle_cls(self._sandbox, exec_id, binary=binary,
                                wire_base64=r.get("encoding") == "base64", info=r)


class HandleCore:
    """A background command."""

    def __init__(self, sandbox, exec_id, pid=None, binary=False, wire_base64=True, info=None):
        self._sandbox = sandbox
        self.exec_id = exec_id
        self.pid = pid
        self.binary = binary
        self.wire_base64 = wire_base64 if info is None or "encoding" not in info \
            else info["encoding"] == "base64"
        self.info = info or {}

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.exec_id)

    @property
    def _conn(self):
        return self._sandbox._conn

    def _decoded(self, r):
        return exec_output(r, self.binary, self.wire_base64)

    def status(self):
        """exec.status: a CommandResult with .running, output so far."""
        r = yield Call("exec.status", {"exec_id": self.exec_id})
        return CommandResult.from_reply(r, *self._decoded(r))

    def output(self):
        """(stdout, stderr) so far."""
        r = yield Call("exec.output", {"exec_id": self.exec_id})
        return tuple(self._decoded(r))

    def kill(self, signal=_signal.SIGKILL):
        """Send a signal (default SIGKILL) to the command: True if it still runs."""
        r = yield Call("exec.kill", {"exec_id": self.exec_id, "signal": int(signal)})
        return bool(r.get("running"))

    def wait(self, timeout=None, on_stdout=None, on_stderr=None, poll_interval=0.05):
        """Wait for the command to end, passing new output to the callbacks: its CommandResult."""
        deadline = None if timeout is None else time.monotonic() + timeout
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        decoders = {name: Decoder(self.binary, self.wire_base64) for name in callbacks}
        parts = {name: [] for name in callbacks}
        since = {"stdout": 0, "stderr": 0}
        delay = poll_interval
        while True:
            r = yield Call("exec.output", {"exec_id": self.exec_id, "since": since})
            for name in callbacks:
                chunk = decoders[name].feed(r.get(name))
                if chunk:
                    parts[name].append(chunk)
                    if callbacks[name] is not None:
                        yield Invoke(callbacks[name], chunk)
            since = dict(r.get("next") or since)
            if r.get("more"):
                continue  # the tail kept past the head: asked for at once
            if not r.get("running"):
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise SandboxTimeoutError("exec %s still runs after %s s" % (self.exec_id, timeout),
                                          kind="timeout")
            yield Sleep(delay)
            delay = min(delay * 1.5, 0.5)
        st = yield Call("exec.status", {"exec_id": self.exec_id})
        start_error = _start_error(st)
        for name in callbacks:
            tail = decoders[name].finish()
            if name == "stderr" and start_error is not None:  # exec.output does not hold it
                tail += _as_output(start_error, self.binary)
            if tail:
                parts[name].append(tail)
                if callbacks[name] is not None:
                    yield Invoke(callbacks[name], tail)
        return CommandResult.from_reply(st, _join(parts["stdout"], self.binary), _join(parts["stderr"], self.binary))


class FilesCore:
    """The files of a sandbox (fs.*) or of a volume without one (volume.fs.*):
    the owner's _p() names it, _fs_prefix its methods."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    def _call(self, op, **params):
        return Call(self._sandbox._fs_prefix + op, self._sandbox._p(**params))

    @property
    def _conn(self):
        return self._sandbox._conn

    def read(self, path, binary=False, max_bytes=None):
        """A file's content: str (UTF-8, invalid bytes replaced) or bytes."""
        r = yield self._call("read", path=path, encoding="base64", max_bytes=max_bytes)
        if r.get("truncated") and max_bytes is None:
            from .errors import LimitReachedError
            raise LimitReachedError("%s is larger than fs.read returns by default (%s bytes read of %s); "
                                    "pass max_bytes" % (path, len(base64.b64decode(r.get("content") or "")),
                                                        r.get("size")), kind="limit_reached")
        data = base64.b64decode(r.get("content") or "")
        return data if binary else data.decode("utf-8", "replace")

    def write(self, path, data, mode=None, append=False):
        """Write str (as UTF-8) or bytes; parents are created. The fs.write result."""
        return (yield self._call("write", path=path, content=_b64(data), encoding="base64", mode=mode,
                                 append=append or None))

    def list(self, path=None):
        """A directory's entries (a sandbox's /workspace, a volume's root by default)."""
        path = path or self._sandbox._fs_home
        r = yield self._call("list", path=path)
        base = r.get("path") or path
        return [EntryInfo(name=e.get("name"), path=posixpath.join(base, e.get("name", "")), type=e.get("type"),
                          size=e.get("size"), mode=e.get("mode"), mtime=e.get("mtime"), raw=e)
                for e in r.get("entries", [])]

    def stat(self, path):
        return (yield self._call("stat", path=path))

    def exists(self, path):
        try:
            yield self._call("stat", path=path)
            return True
        except NotFoundError:
            # not_found also means "no such sandbox" (or volume): that one is raised.
            yield self._sandbox._alive_call()
            return False

    def remove(self, path, recursive=False):
        return (yield self._call("remove", path=path, recursive=recursive))

    def mkdir(self, path, parents=True):
        return (yield self._call("mkdir", path=path, parents=parents))

    def rename(self, src, dst, overwrite=False):
        """Move src to dst in one rename(2) (fs.rename); dst's parent must
        exist. An existing dst is replaced only with overwrite=True."""
        return (yield self._call("rename", to=dst, overwrite=overwrite, **{"from": src}))

    def symlink(self, target, path, overwrite=False):
        """Make path a symlink to target (stored as given; the sandbox
        resolves it in its own root). overwrite=True replaces a file or link
        at path, never a directory."""
        return (yield self._call("symlink", target=target, path=path, overwrite=overwrite))

    def chmod(self, path, mode):
        """Set a file's or directory's permission bits (0o1777 at most)."""
        return (yield self._call("chmod", path=path, mode=int(mode)))


class VolumeCore:
    """What Volume and AsyncVolume share: a volume's files without a sandbox
    (volume.fs.*), paths from the volume's root; root may name another
    user's volume with owner."""
    _files_cls = None  # set by each flavour
    _fs_prefix = "volume.fs."
    _fs_home = "/"

    def __init__(self, conn, name, owner=None):
        self._conn = conn
        self.name = name
        self.owner = owner
        self.files = self._files_cls(self)

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.name)

    def _p(self, **params):
        return dict(volume=self.name, **_drop_none(dict(params, owner=self.owner)))

    def _alive_call(self):
        return Call("volume.fs.stat", self._p(path="/"))


# nsboxd's timeout of a blocking shell.run that gives none.
SHELL_TIMEOUT = 30


def _shell_result(r, binary):
    out = []
    for name in ("stdout", "stderr"):
        d = Decoder(binary, r.get("encoding") == "base64")
        out.append(d.feed(r.get(name)) + d.finish())
    return ShellResult.from_reply(r, *out)


class DesktopCore:
    """sb.desktop: computer use on a sandbox made from the desktop image
    (desktop.*): its screen, screenshots as PNG bytes, mouse and keyboard.
    x and y are pixels of the screen, 0, 0 top left."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    @property
    def _conn(self):
        return self._sandbox._conn

    def start(self, width=None, height=None):
        """Start the desktop (or find it running): a dict with width, height,
        novnc_url (to watch it from the host; None without network) and the ports."""
        return (yield Call("desktop.start", self._sandbox._p(width=width, height=height)))

    def screenshot(self):
        """The screen as PNG bytes."""
        r = yield Call("desktop.screenshot", self._sandbox._p())
        return base64.b64decode(r["data"])

    def click(self, x=None, y=None, button="left", double=False):
        yield Call("desktop.click", self._sandbox._p(x=x, y=y, button=button, double=double))

    def move(self, x, y):
        yield Call("desktop.move", self._sandbox._p(x=x, y=y))

    def scroll(self, direction="down", amount=3, x=None, y=None):
        yield Call("desktop.scroll", self._sandbox._p(direction=direction, amount=amount, x=x, y=y))

    def type(self, text):
        """Type text as it is (newlines as Enter), into the focused window."""
        yield Call("desktop.type", self._sandbox._p(text=text))

    def key(self, keys):
        """Press xdotool keys in turn: "ctrl+l", "Return", or a list of them."""
        if not isinstance(keys, str):
            keys = " ".join(keys)
        yield Call("desktop.key", self._sandbox._p(keys=keys))


class ShellCore:
    """sb.shell: persistent shell sessions (shell.*). A session is a bash that
    keeps its cwd, variables and functions between commands; one command runs
    in it at a time."""
    _session_cls = None

    def __init__(self, sandbox):
        self._sandbox = sandbox

    @property
    def _conn(self):
        return self._sandbox._conn

    def create(self, name=None, cwd=None, env=None):
        """Start a session (a name is chosen when none is given): its handle."""
        r = yield Call("shell.create", self._sandbox._p(name=name, cwd=cwd, env=env))
        return self._session_cls(self._sandbox, r["session"], info=r)

    def run(self, session, command, timeout=None, blocking=True, cwd=None, binary=False, max_output_bytes=None):
        """Run a command line in the session: blocking, its ShellResult
        (timeout default 30 s: past it the command is interrupted and
        CommandTimeoutError raised, the session stays); blocking=False, at
        once with running=True (poll with check())."""
        r = yield Call("shell.run", self._sandbox._p(session=session, command=command, timeout_seconds=timeout,
                                                      blocking=blocking, cwd=cwd, encoding="base64",
                                                      max_output_bytes=max_output_bytes))
        result = _shell_result(r, binary)
        if result.timed_out:
            raise CommandTimeoutError("shell command %r" % (command,),
                                      SHELL_TIMEOUT if timeout is None else timeout, result)
        return result

    def check(self, session, since=None, binary=False):
        """The session's current or last command: running, exit_code, output
        (after since={"stdout": n, "stderr": m}, the `next` of a previous check)."""
        r = yield Call("shell.check", self._sandbox._p(session=session, since=since))
        return _shell_result(r, binary)

    def terminate(self, session):
        """Kill the session's shell and whatever it runs."""
        r = yield Call("shell.terminate", self._sandbox._p(session=session))
        return bool(r.get("terminated"))

    def list(self):
        """The sandbox's sessions: dicts with session, ready, running, command_id, cwd."""
        r = yield Call("shell.list", self._sandbox._p())
        return r.get("sessions", [])


class ShellSessionCore:
    """One shell session: run(), check(), terminate() without naming it."""

    def __init__(self, sandbox, name, info=None):
        self._sandbox = sandbox
        self.name = name
        self.info = info or {}

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.name)

    @property
    def _conn(self):
        return self._sandbox._conn

    def run(self, command, timeout=None, blocking=True, cwd=None, binary=False, max_output_bytes=None):
        return (yield from ShellCore.run(self._sandbox.shell, self.name, command, timeout=timeout,
                                         blocking=blocking, cwd=cwd, binary=binary,
                                         max_output_bytes=max_output_bytes))

    def check(self, since=None, binary=False):
        return (yield from ShellCore.check(self._sandbox.shell, self.name, since=since, binary=binary))

    def terminate(self):
        return (yield from ShellCore.terminate(self._sandbox.shell, self.name))


class BrowserCore:
    """sb.browser: the headless Chromium of a sandbox made from the browser
    image (Sandbox.create(image="browser")); it starts on first use."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    @property
    def _conn(self):
        return self._sandbox._conn

    def cdp_url(self, timeout=None):
        """ws://127.0.0.1:PORT/devtools/browser/... for Playwright's connect_over_cdp
        (the sandbox needs network: the endpoint is an exposed port)."""
        r = yield Call("browser.start", self._sandbox._p(timeout_seconds=timeout))
        return r["cdp_url"]

    def screenshot(self, url=None, full_page=False, width=None, height=None, timeout=None):
        """A PNG (bytes) of the browser's page, after loading url if given."""
        r = yield Call("browser.screenshot", self._sandbox._p(url=url, full_page=full_page or None, width=width,
                                                               height=height, timeout_seconds=timeout))
        return base64.b64decode(r["png"])

    def navigate(self, url, timeout=None):
        """Load url and wait for it: {url, title, network_refused?}."""
        r = yield Call("browser.navigate", self._sandbox._p(url=url, timeout_seconds=timeout))
        r.pop("sandbox_id", None)
        return r
