"""nsbox: a Python SDK for nsboxd sandboxes (stdlib only).

    from nsbox import Sandbox
    with Sandbox.create() as sb:
        print(sb.run_code("x = 6 * 7\nx").result)      # '42'
        print(sb.commands.run("uname -a").stdout)

The asyncio twin is nsbox.aio.AsyncSandbox. The socket is $NSBOX_SOCKET or
/run/nsbox/nsbox.sock unless socket= is given."""
from .errors import (BusyError, CommandExitError, InternalError, InvalidParamsError, LimitReachedError,
                     MethodNotFoundError, NotFoundError, NsboxConnectionError, NsboxError, PermissionDeniedError,
                     ProtocolError, SandboxTimeoutError, UnavailableError)
from .models import CommandResult, EntryInfo, Execution, ExecutionError, Image
from .sandbox import CommandHandle, Commands, Connection, Files, Sandbox

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "Commands", "Files", "CommandHandle", "Connection",
    "Execution", "ExecutionError", "Image", "CommandResult", "EntryInfo",
    "NsboxError", "NotFoundError", "InvalidParamsError", "LimitReachedError", "BusyError",
    "SandboxTimeoutError", "UnavailableError", "PermissionDeniedError", "InternalError",
    "ProtocolError", "MethodNotFoundError", "NsboxConnectionError", "CommandExitError",
]
