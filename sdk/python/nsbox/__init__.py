# SPDX-License-Identifier: Apache-2.0
"""nsbox: a Python SDK for nsboxd sandboxes (stdlib only).

    from nsbox import Sandbox
    with Sandbox.create() as sb:
        print(sb.run_code("x = 6 * 7\nx").result)      # '42'
        print(sb.commands.run("uname -a").stdout)
        sh = sb.shell.create()                          # a persistent shell session
        sh.run("cd /tmp && export X=1")
        print(sh.run("pwd; echo $X").stdout)            # '/tmp\n1\n'

The asyncio twin is nsbox.aio.AsyncSandbox. The socket is $NSBOX_SOCKET or
/run/nsbox/nsbox.sock unless socket= is given."""
from .errors import (BusyError, CommandExitError, CommandNotFoundError, CommandTimeoutError, InternalError,
                     InvalidParamsError, LimitReachedError, MethodNotFoundError, NotFoundError, NsboxConnectionError,
                     NsboxError, PermissionDeniedError, ProtocolError, SandboxGoneError, SandboxTimeoutError,
                     UnavailableError)
from .models import CommandResult, EntryInfo, Execution, ExecutionError, Image, ShellResult
from .sandbox import CommandHandle, Commands, Connection, Desktop, Files, Sandbox, Shell, ShellSession, Volume

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "Volume", "Commands", "Files", "CommandHandle", "Connection", "Shell", "ShellSession", "Desktop",
    "Execution", "ExecutionError", "Image", "CommandResult", "EntryInfo", "ShellResult",
    "NsboxError", "NotFoundError", "SandboxGoneError", "InvalidParamsError", "LimitReachedError", "BusyError",
    "SandboxTimeoutError", "UnavailableError", "PermissionDeniedError", "InternalError",
    "ProtocolError", "MethodNotFoundError", "NsboxConnectionError", "CommandExitError",
    "CommandNotFoundError", "CommandTimeoutError",
]
