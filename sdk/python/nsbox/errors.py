# SPDX-License-Identifier: Apache-2.0
"""Errors of the nsbox SDK: one class per protocol error kind (data.kind)."""


class NsboxError(Exception):
    """An error answered by nsboxd, or met talking to it.

    `code` is the JSON-RPC code, `kind` the protocol's data.kind (None when
    the daemon gave none), `data` the whole error data object."""

    def __init__(self, message, code=None, kind=None, data=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind
        self.data = data or {}


class NotFoundError(NsboxError):
    """No such sandbox, exec or path (or not the caller's)."""


class SandboxGoneError(NotFoundError):
    """The sandbox was removed (idle, asked, died), or the command named
    ended with its removal: `data` says when (`removed_at`) and why
    (`reason`); its files are gone."""


class InvalidParamsError(NsboxError, ValueError):
    """The request's parameters were refused."""


class LimitReachedError(NsboxError):
    """A limit was reached: sandbox count, size caps, output caps."""


class BusyError(NsboxError):
    """The sandbox is busy, e.g. removing it without force while an exec runs."""


class SandboxTimeoutError(NsboxError):
    """The daemon gave up waiting for something."""


class CommandTimeoutError(SandboxTimeoutError, TimeoutError):
    """A command (commands.run, a blocking shell.run) or code (run_code) ran
    past its timeout and was killed (a shell session's command interrupted,
    the session kept). `result` holds what it wrote until then: a
    CommandResult or ShellResult (timed_out=True) or an Execution (status
    "timeout")."""

    def __init__(self, what, timeout, result):
        super().__init__("%s timed out after %s s and was killed%s" % (what, timeout, _said(result)),
                         kind="timeout")
        self.timeout = timeout
        self.result = result


class UnavailableError(NsboxError):
    """The daemon cannot do it now (shutting down, feature absent on this host)."""


class PermissionDeniedError(NsboxError):
    """The caller may not do this."""


class InternalError(NsboxError):
    """nsboxd failed; its log says why."""


class ProtocolError(NsboxError):
    """A JSON-RPC level error: parse error, invalid request, unknown method."""


class MethodNotFoundError(ProtocolError):
    """The daemon does not know the method (an older nsboxd)."""


class NsboxConnectionError(NsboxError, ConnectionError):
    """The daemon's socket could not be reached, or closed mid-request."""


class CommandExitError(NsboxError):
    """A command checked with `check=True` did not exit with 0."""

    def __init__(self, result):
        super().__init__("command exited with %s: %s" % (
            result.exit_code if result.exit_code is not None else "signal %s" % result.signal,
            _tail(result.stderr)), kind="exit")
        self.result = result


class CommandNotFoundError(CommandExitError, FileNotFoundError):
    """commands.run could not start the command: no such program (exit_code
    127) or not executable (126), as `result.stderr` says. A str command runs
    under /bin/sh, which reports a missing program as an exit of 127 instead."""

    def __init__(self, result):
        super().__init__(result)
        self.exit_code = result.exit_code


def _said(result):
    text = _tail(getattr(result, "stderr", ""), 200)
    return ": " + text if text else ""


def _tail(text, n=500):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = (text or "").strip()
    return text[-n:]


KINDS = {
    "not_found": NotFoundError,
    "gone": SandboxGoneError,
    "invalid_params": InvalidParamsError,
    "limit_reached": LimitReachedError,
    "busy": BusyError,
    "timeout": SandboxTimeoutError,
    "unavailable": UnavailableError,
    "permission_denied": PermissionDeniedError,
    "internal": InternalError,
}

CODES = {
    -32700: ProtocolError,
    -32600: ProtocolError,
    -32601: MethodNotFoundError,
    -32602: InvalidParamsError,
    -32603: InternalError,
}


def error_from_reply(error):
    """The exception for a JSON-RPC error object."""
    if not isinstance(error, dict):
        return ProtocolError("malformed error reply: %r" % (error,))
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    kind = data.get("kind")
    code = error.get("code")
    cls = KINDS.get(kind) or CODES.get(code) or NsboxError
    return cls(str(error.get("message") or "nsboxd error"), code=code, kind=kind, data=data)
