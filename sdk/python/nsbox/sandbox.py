# SPDX-License-Identifier: Apache-2.0
"""The synchronous client: a Sandbox's calls each take a connection of its
pool, so calls from several threads run at once."""
import functools
import itertools
import json
import threading
import time

from . import _connect, _core
from .errors import NotFoundError, NsboxConnectionError, NsboxError, ProtocolError, error_from_reply


class Connection:
    """A JSON-RPC connection to nsboxd: one JSON object per line."""

    def __init__(self, socket=None, timeout=None, connect_timeout=10):
        self.path = _core.socket_path(socket)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._sock = self._file = None
        self._open()

    def _open(self):
        try:
            s = _connect.connect(self.path, _connect.budget(self.connect_timeout))
        except OSError as e:
            raise _connect.connection_error(self.path, e) from e
        s.settimeout(self.timeout)
        self._sock, self._file = s, s.makefile("rb")

    def close(self):
        if self._sock is not None:
            self._file.close()
            self._sock.close()
            self._sock = self._file = None

    def reusable(self):
        """Open, and nothing waiting to be read: a connection nsboxd closed
        while it was idle (client_idle_timeout_seconds) reads as EOF."""
        return self._sock is not None and not _connect.stale(self._sock)

    def call(self, method, params=None, on_notify=None):
        """The result of one request; notifications before the reply go to on_notify."""
        with self._lock:
            if self._sock is None:
                self._open()
            rid = next(self._ids)
            msg = {"jsonrpc": "2.0", "id": rid, "method": method}
            if params is not None:
                msg["params"] = params
            try:
                self._sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
                callback_error = None
                while True:
                    line = self._file.readline()
                    if not line:
                        raise NsboxConnectionError("nsboxd closed the connection during %s" % method)
                    reply = json.loads(line)
                    if "id" not in reply:
                        if on_notify is not None and callback_error is None:
                            try:
                                on_notify(reply)
                            except BaseException as e:  # raised once the reply is in
                                callback_error = e
                        continue
                    if reply["id"] == rid or (reply["id"] is None and "error" in reply):
                        break
            except (OSError, ValueError) as e:
                # The line stream is out of step (timeout, reset, garbage): start afresh next time.
                self.close()
                if isinstance(e, NsboxError):
                    raise
                if isinstance(e, ValueError):
                    raise ProtocolError("unreadable reply from nsboxd: %s" % e) from e
                raise NsboxConnectionError("talking to nsboxd (%s): %s" % (method, e)) from e
            except BaseException:
                self.close()  # e.g. KeyboardInterrupt mid-reply
                raise
            if callback_error is not None:
                raise callback_error
            if "error" in reply:
                raise error_from_reply(reply["error"])
            return reply.get("result")


class ConnectionPool:
    """The connections of one Sandbox: a call takes an idle one or opens a new
    one and gives it back when its reply is in, so calls from several threads
    run at once, each on its own connection (stream notifications carry no
    request id, so one connection serves one call at a time). At most
    MAX_IDLE stay open between calls."""
    MAX_IDLE = 4

    def __init__(self, socket=None, timeout=None, connect_timeout=10):
        self.path = _core.socket_path(socket)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._idle = []

    def _take(self):
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return Connection(self.path, self.timeout, self.connect_timeout)
            if conn.reusable():
                return conn
            conn.close()

    def _give(self, conn):
        with self._lock:
            if conn._sock is not None and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def call(self, method, params=None, on_notify=None):
        conn = self._take()
        try:
            return conn.call(method, params, on_notify)
        finally:
            self._give(conn)

    def close(self):
        """Close the idle connections; a later call opens one again."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def drive(conn, gen):
    """Run one operation generator of nsbox._core to its end."""
    value = exc = None
    while True:
        try:
            op = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value = exc = None
        if isinstance(op, _core.Call):
            try:
                value = conn.call(op.method, op.params, op.on_notify)
            except NsboxError as e:
                exc = e
        elif isinstance(op, _core.Invoke):
            value = op.fn(*op.args)
        elif isinstance(op, _core.Sleep):
            time.sleep(op.seconds)
        else:
            raise TypeError("unknown operation %r" % (op,))


def _sync(gen_fn):
    @functools.wraps(gen_fn)
    def method(self, *args, **kwargs):
        return drive(self._conn, gen_fn(self, *args, **kwargs))
    return method


def _syncify(cls, core):
    for name, fn in vars(core).items():
        if callable(fn) and not name.startswith("_"):
            setattr(cls, name, _sync(fn))
    return cls


class CommandHandle(_core.HandleCore):
    """A background command: wait(), output(), status(), kill(signal)."""


class Commands(_core.CommandsCore):
    """sb.commands: run(), list(), connect()."""
    _handle_cls = CommandHandle


class Files(_core.FilesCore):
    """sb.files: read, write, list, stat, exists, remove, mkdir, rename, symlink, chmod (binary-safe)."""


class ShellSession(_core.ShellSessionCore):
    """One persistent shell session: run(), check(), terminate()."""


class Shell(_core.ShellCore):
    """sb.shell: create(), run(), check(), terminate(), list() of shell sessions."""
    _session_cls = ShellSession


class Desktop(_core.DesktopCore):
    pass


class Browser(_core.BrowserCore):
    """sb.browser: cdp_url(), screenshot() -> PNG bytes, navigate(url)."""


class Sandbox(_core.SandboxCore):
    """A sandbox of nsboxd.

        with Sandbox.create() as sb:
            print(sb.run_code("1 + 1").result)
    """
    _commands_cls = Commands
    _files_cls = Files
    _shell_cls = Shell
    _desktop_cls = Desktop
    _browser_cls = Browser

    @classmethod
    def create(cls, session_id=None, image=None, memory=None, network=None, env=None, labels=None,
               idle_timeout=None, socket=None, keep=None, pids=None, cpus=None, disk=None, seccomp_profile=None,
               from_snapshot=None, idle_action=None, paused_timeout=None, mounts=None, secrets=None):
        """Create a sandbox (or, with session_id, get that session's live one).
        memory and disk: bytes or "512M"-style strings. Idle for idle_timeout
        seconds (300), it is paused (idle_action "pause") and removed after
        paused_timeout seconds paused (86400); idle_action="remove" removes
        it at once. mounts: [{"volume": NAME, "path": "/data"}, {"host_path":
        "/home/me/project", "path": "/workspace/project", "read_only": False}]
        (docs/volumes.md). The end of a `with`
        block removes the sandbox, except a session's (kept: the session name
        is there to find it again); keep=True or keep=False decides instead.
        secrets: {NAME: {"value": ..., "hosts": [...], "header": "Authorization:
        Bearer {value}"}}: the sandbox sees only the placeholder in its env
        NSBOX_SECRET_NAME; the egress proxy sends the value to hosts in that
        header (without one, in the Authorization header the sandbox wrote
        the placeholder in) over HTTP and HTTPS (docs/secrets.md)."""
        params = _core.create_params(session_id=session_id, image=image, memory=memory, pids=pids, cpus=cpus,
                                     disk=disk, network=network, env=env, labels=labels,
                                     idle_timeout=idle_timeout, seccomp_profile=seccomp_profile,
                                     from_snapshot=from_snapshot, idle_action=idle_action,
                                     paused_timeout=paused_timeout, mounts=mounts, secrets=secrets)
        return cls._open(socket, "sandbox.create", params, keep)

    @classmethod
    def _open(cls, socket, method, params, keep):
        pool = ConnectionPool(socket)
        try:
            return cls(pool, pool.call(method, params), keep=keep)
        except BaseException:
            pool.close()
            raise

    @classmethod
    def connect(cls, sandbox_id, socket=None, keep=True):
        """An existing sandbox by id (kept at the end of a `with` unless keep=False)."""
        return cls._open(socket, "sandbox.info", {"sandbox_id": sandbox_id}, keep)

    @staticmethod
    def list(socket=None, include_inactive=False):
        """The caller's sandboxes (sandbox.list entries)."""
        conn = Connection(socket)
        try:
            return conn.call("sandbox.list", {"include_inactive": include_inactive})["sandboxes"]
        finally:
            conn.close()

    @staticmethod
    def create_volume(name, size, socket=None):
        """A named volume of `size` (bytes or "10G"), kept across sandboxes and
        restarts of nsboxd; mount it with create(mounts=[{"volume": name, "path": ...}])."""
        conn = Connection(socket)
        try:
            return conn.call("volume.create", _core.volume_params(name, size))
        finally:
            conn.close()

    @staticmethod
    def list_volumes(socket=None):
        """The caller's volumes (volume.list entries)."""
        conn = Connection(socket)
        try:
            return conn.call("volume.list")["volumes"]
        finally:
            conn.close()

    @staticmethod
    def remove_volume(name, socket=None):
        """Remove a volume (BusyError while a sandbox mounts it)."""
        conn = Connection(socket)
        try:
            return conn.call("volume.remove", {"name": name})
        finally:
            conn.close()

    @staticmethod
    def server_info(socket=None):
        conn = Connection(socket)
        try:
            return conn.call("server.info")
        finally:
            conn.close()

    def close(self):
        """Close the connections; the sandbox stays."""
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if not self.keep:
                try:
                    self.remove(force=True)
                except NotFoundError:
                    pass  # removed already (kill(), reaped): what exit wants
                except NsboxError:
                    if exc[0] is None:
                        raise
        finally:
            self.close()


class Volume(_core.VolumeCore):
    """A volume's files without a sandbox (volume.fs.*), paths from its root:

        with Volume("data") as v:
            v.files.write("/notes/a.txt", "hello")
            print(v.files.list("/notes"))

    Files are stored as the sandbox user's, seen so by every sandbox that
    mounts the volume; symlinks in it are never followed (docs/volumes.md)."""
    _files_cls = Files

    def __init__(self, name, socket=None, owner=None):
        super().__init__(ConnectionPool(socket), name, owner)

    def close(self):
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_syncify(Sandbox, _core.SandboxCore)
_syncify(Commands, _core.CommandsCore)
_syncify(Files, _core.FilesCore)
_syncify(CommandHandle, _core.HandleCore)
_syncify(Shell, _core.ShellCore)
_syncify(ShellSession, _core.ShellSessionCore)
_syncify(Desktop, _core.DesktopCore)
_syncify(Browser, _core.BrowserCore)
