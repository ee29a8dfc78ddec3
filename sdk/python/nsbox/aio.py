# SPDX-License-Identifier: Apache-2.0
"""The asyncio twin: AsyncSandbox has Sandbox's methods as coroutines, over
asyncio.open_unix_connection (a pool of them: gathered calls run at once).
Callbacks may be plain functions or coroutine functions.

    async with await AsyncSandbox.create() as sb:
        r = await sb.commands.run("echo hi", on_stdout=print)
"""
import asyncio
import functools
import inspect
import itertools
import json

from . import _connect, _core
from .errors import NotFoundError, NsboxConnectionError, NsboxError, ProtocolError, error_from_reply


class AsyncConnection:
    def __init__(self, socket=None, timeout=None, connect_timeout=10):
        self.path = _core.socket_path(socket)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._reader = self._writer = None

    async def open(self):
        # asyncio's own connect is non-blocking: a full listen queue (EAGAIN)
        # would pass for a connect in progress. The bounded blocking connect
        # runs in a thread instead.
        try:
            sock = await asyncio.get_running_loop().run_in_executor(
                None, _connect.connect, self.path, _connect.budget(self.connect_timeout))
        except OSError as e:
            raise _connect.connection_error(self.path, e) from e
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(sock=sock, limit=_core.MAX_LINE)
        except BaseException:
            sock.close()
            raise
        return self

    async def close(self):
        if self._writer is not None:
            w, self._writer, self._reader = self._writer, None, None
            w.close()
            try:
                await w.wait_closed()
            except OSError:
                pass

    def reusable(self):
        """Open, and not closed by nsboxd while idle (client_idle_timeout_seconds)."""
        if self._writer is None or self._writer.is_closing() or self._reader.at_eof():
            return False
        sock = self._writer.get_extra_info("socket")
        return sock is not None and not _connect.stale(sock)  # the EOF the loop has not read yet

    def _drop(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = self._reader = None

    async def call(self, method, params=None, on_notify=None):
        async with self._lock:
            if self._writer is None:
                await self.open()
            rid = next(self._ids)
            msg = {"jsonrpc": "2.0", "id": rid, "method": method}
            if params is not None:
                msg["params"] = params
            try:
                self._writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
                await self._writer.drain()
                callback_error = None
                while True:
                    line = await asyncio.wait_for(self._reader.readline(), self.timeout)
                    if not line:
                        raise NsboxConnectionError("nsboxd closed the connection during %s" % method)
                    reply = json.loads(line)
                    if "id" not in reply:
                        if on_notify is not None and callback_error is None:
                            try:
                                r = on_notify(reply)
                                if inspect.isawaitable(r):
                                    await r
                            except Exception as e:  # raised once the reply is in
                                callback_error = e
                        continue
                    if reply["id"] == rid or (reply["id"] is None and "error" in reply):
                        break
            except (OSError, ValueError, asyncio.TimeoutError) as e:
                self._drop()
                if isinstance(e, NsboxError):
                    raise
                if isinstance(e, ValueError):
                    raise ProtocolError("unreadable reply from nsboxd: %s" % e) from e
                raise NsboxConnectionError("talking to nsboxd (%s): %s" % (method, e)) from e
            except BaseException:
                self._drop()  # cancelled mid-reply: the stream is out of step
                raise
            if callback_error is not None:
                raise callback_error
            if "error" in reply:
                raise error_from_reply(reply["error"])
            return reply.get("result")


class AsyncConnectionPool:
    """The connections of one AsyncSandbox, as nsbox.sandbox.ConnectionPool:
    each call on its own connection, so gathered calls run at once."""
    MAX_IDLE = 4

    def __init__(self, socket=None, timeout=None, connect_timeout=10):
        self.path = _core.socket_path(socket)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._idle = []

    async def _take(self):
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable():
                return conn
            await conn.close()
        return await AsyncConnection(self.path, self.timeout, self.connect_timeout).open()

    async def call(self, method, params=None, on_notify=None):
        conn = await self._take()
        try:
            return await conn.call(method, params, on_notify)
        finally:
            if conn._writer is not None and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
            else:
                conn._drop()

    async def close(self):
        """Close the idle connections; a later call opens one again."""
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


async def drive(conn, gen):
    value = exc = None
    while True:
        try:
            op = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value = exc = None
        if isinstance(op, _core.Call):
            try:
                value = await conn.call(op.method, op.params, op.on_notify)
            except NsboxError as e:
                exc = e
        elif isinstance(op, _core.Invoke):
            value = op.fn(*op.args)
            if inspect.isawaitable(value):
                value = await value
        elif isinstance(op, _core.Sleep):
            await asyncio.sleep(op.seconds)
        else:
            raise TypeError("unknown operation %r" % (op,))


def _async(gen_fn):
    @functools.wraps(gen_fn)
    async def method(self, *args, **kwargs):
        return await drive(self._conn, gen_fn(self, *args, **kwargs))
    return method


def _asyncify(cls, core):
    for name, fn in vars(core).items():
        if callable(fn) and not name.startswith("_"):
            setattr(cls, name, _async(fn))
    return cls


class AsyncCommandHandle(_core.HandleCore):
    pass


class AsyncCommands(_core.CommandsCore):
    _handle_cls = AsyncCommandHandle


class AsyncFiles(_core.FilesCore):
    pass


class AsyncShellSession(_core.ShellSessionCore):
    pass


class AsyncShell(_core.ShellCore):
    _session_cls = AsyncShellSession


class AsyncDesktop(_core.DesktopCore):
    pass


class AsyncBrowser(_core.BrowserCore):
    """sb.browser, awaitable: cdp_url(), screenshot(), navigate(url)."""


class _Creating:
    """What AsyncSandbox.create() returns: await it, or use it directly in `async with`."""

    def __init__(self, coro):
        self._coro = coro
        self._sandbox = None

    def __await__(self):
        return self._coro.__await__()

    async def __aenter__(self):
        self._sandbox = await self._coro
        return await self._sandbox.__aenter__()

    async def __aexit__(self, *exc):
        return await self._sandbox.__aexit__(*exc)


class AsyncSandbox(_core.SandboxCore):
    _commands_cls = AsyncCommands
    _files_cls = AsyncFiles
    _shell_cls = AsyncShell
    _desktop_cls = AsyncDesktop
    _browser_cls = AsyncBrowser

    @classmethod
    def create(cls, session_id=None, image=None, memory=None, network=None, env=None, labels=None,
               idle_timeout=None, socket=None, keep=None, pids=None, cpus=None, disk=None, seccomp_profile=None,
               from_snapshot=None, idle_action=None, paused_timeout=None, mounts=None, secrets=None):
        params = _core.create_params(session_id=session_id, image=image, memory=memory, pids=pids, cpus=cpus,
                                     disk=disk, network=network, env=env, labels=labels,
                                     idle_timeout=idle_timeout, seccomp_profile=seccomp_profile,
                                     from_snapshot=from_snapshot, idle_action=idle_action,
                                     paused_timeout=paused_timeout, mounts=mounts, secrets=secrets)
        return _Creating(cls._open(socket, "sandbox.create", params, keep))

    @classmethod
    async def connect(cls, sandbox_id, socket=None, keep=True):
        return await cls._open(socket, "sandbox.info", {"sandbox_id": sandbox_id}, keep)

    @classmethod
    async def _open(cls, socket, method, params, keep):
        pool = AsyncConnectionPool(socket)
        try:
            return cls(pool, await pool.call(method, params), keep=keep)
        except BaseException:
            await pool.close()
            raise

    @staticmethod
    async def list(socket=None, include_inactive=False):
        conn = await AsyncConnection(socket).open()
        try:
            return (await conn.call("sandbox.list", {"include_inactive": include_inactive}))["sandboxes"]
        finally:
            await conn.close()

    @staticmethod
    async def create_volume(name, size, socket=None):
        conn = await AsyncConnection(socket).open()
        try:
            return await conn.call("volume.create", _core.volume_params(name, size))
        finally:
            await conn.close()

    @staticmethod
    async def list_volumes(socket=None):
        conn = await AsyncConnection(socket).open()
        try:
            return (await conn.call("volume.list"))["volumes"]
        finally:
            await conn.close()

    @staticmethod
    async def remove_volume(name, socket=None):
        conn = await AsyncConnection(socket).open()
        try:
            return await conn.call("volume.remove", {"name": name})
        finally:
            await conn.close()

    @staticmethod
    async def server_info(socket=None):
        conn = await AsyncConnection(socket).open()
        try:
            return await conn.call("server.info")
        finally:
            await conn.close()

    async def close(self):
        await self._conn.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        try:
            if not self.keep:
                try:
                    await self.remove(force=True)
                except NotFoundError:
                    pass  # removed already (kill(), reaped): what exit wants
                except NsboxError:
                    if exc[0] is None:
                        raise
        finally:
            await self.close()


class AsyncVolume(_core.VolumeCore):
    """nsbox.Volume's asyncio twin: `async with AsyncVolume("data") as v:
    await v.files.read("/a.txt")`."""
    _files_cls = AsyncFiles

    def __init__(self, name, socket=None, owner=None):
        super().__init__(AsyncConnectionPool(socket), name, owner)

    async def close(self):
        await self._conn.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


_asyncify(AsyncSandbox, _core.SandboxCore)
_asyncify(AsyncCommands, _core.CommandsCore)
_asyncify(AsyncFiles, _core.FilesCore)
_asyncify(AsyncCommandHandle, _core.HandleCore)
_asyncify(AsyncShell, _core.ShellCore)
_asyncify(AsyncShellSession, _core.ShellSessionCore)
_asyncify(AsyncDesktop, _core.DesktopCore)
_asyncify(AsyncBrowser, _core.BrowserCore)
