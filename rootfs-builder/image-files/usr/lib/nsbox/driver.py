# SPDX-License-Identifier: Apache-2.0
"""nsbox stateful driver: one long-lived interpreter per sandbox.

Requests arrive on stdin, answers leave on the original stdout, each framed
as b"<length>\\n" + JSON. The user's code sees fds 1 and 2 pointing at files
that the driver reads back after each call, so output from C code and child
processes is captured too, and can never corrupt the frames."""
import ast
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nsbox_runtime  # noqa: E402

del sys.path[0]

MAX_OUTPUT = 1 << 20


def read_frame(stream):
    header = stream.readline()
    if not header:
        return None
    length = int(header)
    body = stream.read(length)
    if len(body) != length:
        return None
    return json.loads(body)


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = b"%d\n" % len(body) + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


class Capture:
    """fds 1 and 2 redirected into files that are drained after each call."""

    def __init__(self):
        for fd, name in ((1, "stdout"), (2, "stderr")):
            path = "/tmp/.nsbox-driver-%d-%s" % (os.getpid(), name)
            tmp = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            os.dup2(tmp, fd)
            os.close(tmp)
            os.unlink(path)

    def reset(self):
        for fd in (1, 2):
            if os.lseek(fd, 0, os.SEEK_CUR):  # most calls print nothing: nothing to clear
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)

    def collect(self, fd, most):
        """(text, bytes kept, bytes dropped): the first `most` bytes the call wrote on fd."""
        size = os.lseek(fd, 0, os.SEEK_CUR)
        if size == 0:
            return "", 0, 0
        data = os.pread(fd, min(size, most), 0) if most > 0 else b""
        return data.decode("utf-8", "replace"), len(data), size - len(data)


def processes():
    """{pid: parent pid} of the processes this sandbox's pid namespace shows."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                out[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


def kill_call_processes(before):
    """SIGKILL every process an interrupted call started: new descendants of
    this interpreter, and new orphans, which the exec's supervisor (our
    parent, the subreaper of this exec's tree) inherited when a double fork
    or setsid cut them loose. Processes of earlier calls (in `before`) and of
    other execs are left alone. A few rounds, for processes forked while we
    kill."""
    me, supervisor = os.getpid(), os.getppid()
    for _ in range(20):
        children = {}
        for pid, ppid in processes().items():
            children.setdefault(ppid, []).append(pid)
        victims = []
        pending = [p for p in children.get(me, []) + children.get(supervisor, []) if p != me]
        while pending:
            pid = pending.pop()
            if pid in before:
                continue
            victims.append(pid)
            pending.extend(children.get(pid, []))
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in victims:
            try:  # our own children: reap them (the supervisor reaps its own)
                os.waitpid(pid, 0)
            except OSError:
                pass


def run_cell(code, namespace, figures):
    """Execute code; the value of a trailing expression is the result."""
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), namespace)
    if last is not None:
        value = eval(compile(last, "<cell>", "eval"), namespace)
        if value is not None:
            namespace["_"] = value
            return repr(value)
    return None


def main():
    os.environ.setdefault("MPLBACKEND", "Agg")
    protocol_out = os.dup(1)
    stdin = os.fdopen(os.dup(0), "rb")
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    capture = Capture()
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    figures = nsbox_runtime.FigureCapture()
    figures.install_import_hook()
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    sigint = []
    in_cell = []

    def on_sigint(signum, frame):
        # Only the user's code is interrupted: a SIGINT that lands while the
        # driver reads, snapshots or answers is remembered, never raised
        # there (it would end the interpreter and lose every variable).
        sigint.append(True)
        if in_cell:
            signal.default_int_handler(signum, frame)

    def interruptible_cell(code):
        in_cell.append(True)
        try:
            if sigint:  # came between the request and here
                raise KeyboardInterrupt
            return run_cell(code, namespace, figures)
        finally:
            in_cell.clear()

    signal.signal(signal.SIGINT, on_sigint)
    write_frame(protocol_out, {"ready": True, "pid": os.getpid()})
    while True:
        request = read_frame(stdin)
        if request is None:
            return
        capture.reset()
        figures.reset()
        before = nsbox_runtime.snapshot()
        before_processes = set(processes())
        started = time.monotonic()
        status, result, interrupted, exit_code = "ok", None, False, None
        sigint.clear()
        try:
            result = interruptible_cell(request.get("code", ""))
        except KeyboardInterrupt as e:
            status, interrupted = "error", True
            sys.stderr.write(nsbox_runtime.user_traceback(e, "<cell>"))
        except SystemExit as e:  # the interpreter stays; the call ends as a script's would
            exit_code = nsbox_runtime.exit_code_of(e)
            status = "ok" if exit_code == 0 else "error"
        except BaseException as e:
            status = "error"
            sys.stderr.write(nsbox_runtime.user_traceback(e, "<cell>"))
        if interrupted or sigint:
            # The call was interrupted (its timeout, or its client left): the
            # interpreter and its variables stay, but nothing the call started
            # outlives it, even where the code caught the KeyboardInterrupt.
            # The user's code has given the driver back control: nsboxd's
            # grace for a code that ignores SIGINT ends here, the clean-up
            # below has a bound of its own.
            write_frame(protocol_out, {"id": request.get("id"), "stopped": True})
            kill_call_processes(before_processes)
        try:
            figures.save_open_figures()
        except BaseException as e:
            sys.stderr.write("nsbox: saving figures failed: %s\n" % e)
        sys.stdout.flush()
        sys.stderr.flush()
        # max_output_bytes (nsboxd checked it) bounds stdout and stderr together.
        most = request.get("max_output_bytes", MAX_OUTPUT)
        out, kept, out_cut = capture.collect(1, most)
        err, _, err_cut = capture.collect(2, most - kept)
        write_frame(protocol_out, {
            "id": request.get("id"),
            "status": status,
            "exit_code": exit_code,
            "interrupted": interrupted,
            "stdout": out,
            "stderr": err,
            "truncated": bool(out_cut or err_cut),
            "output_dropped_bytes": out_cut + err_cut,
            "result": result,
            "images": figures.images,
            "files_produced": nsbox_runtime.produced(before, nsbox_runtime.snapshot()),
            "execution_time_ms": int((time.monotonic() - started) * 1000),
        })


main()
