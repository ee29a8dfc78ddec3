# SPDX-License-Identifier: Apache-2.0
"""nsbox stateful driver: one long-lived interpreter per sandbox.

Requests arrive on stdin, answers leave on the original stdout, each framed
as b"<length>\\n" + JSON. The user's code sees fds 1 and 2 pointing at files
that the driver reads back after each call, so output from C code and child
processes is captured too, and can never corrupt the frames. A streamed
call's output is read from those files while it runs and sent as output
frames; a file, unlike a pipe, never blocks the code when no one reads.

Code runs in a context: the main one, or a named one with its own globals
and working directory (E2B's code contexts). Contexts share the process,
its modules and its environment: a context costs its namespace, not an
interpreter."""
import ast
import codecs
import collections
import io
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nsbox_runtime  # noqa: E402

del sys.path[0]

MAX_OUTPUT = 1 << 20
# Named contexts one interpreter keeps; a call for one more is refused.
MAX_CONTEXTS = 32
# How often a streamed call's output files are looked at while it runs.
STREAM_POLL_SECONDS = 0.02


def read_frame(stream):
    header = stream.readline()
    if not header:
        return None
    length = int(header)
    body = stream.read(length)
    if len(body) != length:
        return None
    return json.loads(body)


frame_lock = threading.Lock()


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = b"%d\n" % len(body) + body
    with frame_lock:  # the streaming thread writes frames too
        while data:
            n = os.write(fd, data)
            data = data[n:]


class Streamer(threading.Thread):
    """While a streamed call runs, what it writes on fds 1 and 2 (the
    capture files) goes out as {"id", "output": "stdout"|"stderr", "data"}
    frames, at most `most` bytes of both together; the rest is counted.
    A figure the call shows goes out as {"id", "image": path} right after
    the output written before it. Only this thread sends while the call
    runs: a SIGINT (the call's timeout) lands in the call's thread, never
    in the middle of a frame."""

    def __init__(self, send, call_id, most):
        super().__init__(daemon=True)
        self.send, self.call_id, self.budget = send, call_id, most
        self.sent = [0, 0]
        self.dropped = 0
        self.decoders = [codecs.getincrementaldecoder("utf-8")("replace") for _ in range(2)]
        self.shown = collections.deque()  # (path, output sizes when it was shown)
        self.done = threading.Event()
        self.wake = threading.Event()

    def image(self, path):
        """figures.on_image, in the call's thread."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.shown.append((path, [os.fstat(1).st_size, os.fstat(2).st_size]))
        self.wake.set()

    def output(self, upto=None, final=False):
        for i, name in enumerate(("stdout", "stderr")):
            size = os.fstat(i + 1).st_size if upto is None else upto[i]
            data = b""
            if size > self.sent[i]:
                n = min(size - self.sent[i], self.budget)
                data = os.pread(i + 1, n, self.sent[i]) if n > 0 else b""
                self.budget -= len(data)
                self.dropped += size - self.sent[i] - len(data)
                self.sent[i] = size
            text = self.decoders[i].decode(data, final)
            if text:
                self.send({"id": self.call_id, "output": name, "data": text})

    def pump(self, final=False):
        while self.shown:
            path, upto = self.shown.popleft()
            self.output(upto)
            self.send({"id": self.call_id, "image": path})
        self.output(final=final)

    def run(self):
        while not self.done.is_set():
            self.wake.wait(STREAM_POLL_SECONDS)
            self.wake.clear()
            self.pump()

    def finish(self):
        """After the call, in its thread: the rest goes out."""
        self.done.set()
        self.wake.set()
        self.join()
        self.pump(final=True)


def fresh_namespace():
    return {"__name__": "__main__", "__builtins__": __builtins__}


class Context:
    """A namespace and the directory its code runs in (kept from call to
    call, as a process keeps its cwd)."""

    def __init__(self, cwd):
        self.start_cwd = self.cwd = cwd
        self.namespace = fresh_namespace()

    def reset(self):
        self.namespace.clear()
        self.namespace.update(fresh_namespace())
        self.cwd = self.start_cwd


def set_environment(env):
    """Apply a call's env to os.environ; returns what undoes it."""
    before = {}
    for key, value in env.items():
        before.setdefault(key, os.environ.get(key))
        os.environ[key] = value
    return before


def restore_environment(before):
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def error_of(e, traceback_text):
    return {"name": type(e).__name__, "value": str(e), "traceback": traceback_text}


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


def reset_context(contexts, request):
    """{"reset": NAME ("" the main one), "remove": bool}: its variables go
    (and its cwd is the one it began with); a removed one goes altogether."""
    name = request.get("reset") or ""
    context = contexts.get(name)
    if context is not None and name and request.get("remove"):
        del contexts[name]
    elif context is not None:
        context.reset()
    return {"id": request.get("id"), "reset": True, "found": context is not None}


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
    contexts = {"": Context(os.getcwd())}
    sigint = []
    in_cell = []

    def on_sigint(signum, frame):
        # Only the user's code is interrupted: a SIGINT that lands while the
        # driver reads, snapshots or answers is remembered, never raised
        # there (it would end the interpreter and lose every variable).
        sigint.append(True)
        if in_cell:
            signal.default_int_handler(signum, frame)

    def interruptible_cell(request, context, entered, undo_env):
        in_cell.append(True)
        try:
            if sigint:  # came between the request and here
                raise KeyboardInterrupt
            os.chdir(request.get("cwd") or context.cwd)
            entered.append(True)
            undo_env.update(set_environment(request.get("env") or {}))
            return run_cell(request.get("code", ""), context.namespace, figures)
        finally:
            in_cell.clear()

    def send(frame):
        write_frame(protocol_out, frame)

    signal.signal(signal.SIGINT, on_sigint)
    send({"ready": True, "pid": os.getpid()})
    while True:
        request = read_frame(stdin)
        if request is None:
            return
        if "reset" in request:
            send(reset_context(contexts, request))
            continue
        name = request.get("context") or ""
        context = contexts.get(name)
        if context is None and len(contexts) > MAX_CONTEXTS:
            send({"id": request.get("id"), "refused": "this sandbox's interpreter has %d code contexts, "
                  "the most it keeps: remove one first" % MAX_CONTEXTS})
            continue
        if context is None:
            context = Context(request.get("cwd") or nsbox_runtime.WORKSPACE)
        capture.reset()
        figures.reset()
        before = nsbox_runtime.snapshot()
        before_processes = set(processes())
        started = time.monotonic()
        status, result, interrupted, exit_code, error = "ok", None, False, None, None
        # max_output_bytes (nsboxd checked it) bounds stdout and stderr together.
        most = request.get("max_output_bytes", MAX_OUTPUT)
        streamer = Streamer(send, request.get("id"), most) if request.get("stream") else None
        # A streamed call's traceback is its error's, not a line of its stderr.
        traceback_out = io.StringIO() if streamer else sys.stderr
        if streamer:
            figures.on_image = streamer.image
            streamer.start()
        entered, undo_env = [], {}
        sigint.clear()
        try:
            result = interruptible_cell(request, context, entered, undo_env)
        except KeyboardInterrupt as e:
            status, interrupted = "error", True
            error = error_of(e, nsbox_runtime.user_traceback(e, "<cell>"))
            traceback_out.write(error["traceback"])
        except SystemExit as e:  # the interpreter stays; the call ends as a script's would
            exit_code = nsbox_runtime.exit_code_of(e)
            status = "ok" if exit_code == 0 else "error"
        except BaseException as e:
            status = "error"
            error = error_of(e, nsbox_runtime.user_traceback(e, "<cell>"))
            traceback_out.write(error["traceback"])
        if interrupted or sigint:
            # The call was interrupted (its timeout, or its client left): the
            # interpreter and its variables stay, but nothing the call started
            # outlives it, even where the code caught the KeyboardInterrupt.
            # The user's code has given the driver back control: nsboxd's
            # grace for a code that ignores SIGINT ends here, the clean-up
            # below has a bound of its own.
            send({"id": request.get("id"), "stopped": True})
            kill_call_processes(before_processes)
        restore_environment(undo_env)
        # A context is kept once a call has entered its directory (a new
        # one whose cwd does not exist is not made), and keeps where the
        # call left it; between calls the process is in the main one's.
        if entered:
            contexts[name] = context
            try:
                context.cwd = os.getcwd()
            except OSError:
                pass
        try:
            os.chdir(contexts[""].cwd)
        except OSError:
            pass
        try:
            figures.save_open_figures()
        except BaseException as e:
            sys.stderr.write("nsbox: saving figures failed: %s\n" % e)
        figures.on_image = None
        sys.stdout.flush()
        sys.stderr.flush()
        if streamer:
            streamer.finish()
            out, err = "", traceback_out.getvalue()
            out_cut, err_cut = streamer.dropped, 0
        else:
            out, kept, out_cut = capture.collect(1, most)
            err, _, err_cut = capture.collect(2, most - kept)
        send({
            "id": request.get("id"),
            "status": status,
            "exit_code": exit_code,
            "interrupted": interrupted,
            "stdout": out,
            "stderr": err,
            "truncated": bool(out_cut or err_cut),
            "output_dropped_bytes": out_cut + err_cut,
            "result": result,
            "error": error,
            "images": [] if streamer else figures.images,  # streamed ones went as they came
            "files_produced": nsbox_runtime.produced(before, nsbox_runtime.snapshot()),
            "execution_time_ms": int((time.monotonic() - started) * 1000),
        })


main()
