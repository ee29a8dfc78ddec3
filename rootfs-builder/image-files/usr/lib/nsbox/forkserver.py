"""nsbox fork server: python3 /usr/lib/nsbox/forkserver.py [MODULE]...

One per sandbox, started by nsboxd as a service exec (same user, seccomp and
limits as a stateless call). It imports MODULEs (the image's manifest
"python_preload": numpy, pandas, matplotlib.pyplot...) once, then serves
stateless python.run calls: each is a fresh child of this process, so
nothing is imported again and nothing a call does survives it.

nsboxd writes a random token on stdin; the server listens on the abstract
unix socket "nsbox-forkserver-TOKEN" (abstract names belong to the
sandbox's network namespace) and says "ready" on stdout once its imports are
done. A call is the attach client (/usr/lib/nsbox/forkrun, a normal exec):
it sends its stdin, stdout, stderr and cwd (SCM_RIGHTS) with its umask,
run.py's arguments (SCRIPT REPORT [NAME [ARG...]]) and environment, and gets "A" (accepted) and then the
wait status of the call.

Per call the server forks C, a reaper (child subreaper), which forks U, the
call: U takes the client's fds and environment and runs
nsbox_runtime.run_stateless as run.py does. When U ends, C kills every
process left under it and sends U's status to the client. When the client
goes away first (the exec timed out or was killed) the server kills C; the
processes C left behind are then reparented to the server (a subreaper as
well), which kills every child of its own that is not a live C.

The C and U of the next calls (two) are forked ahead, between calls, so that
a call costs no fork of this large process; U reports its exit code to C
before its own teardown, which takes milliseconds.

PR_SET_DUMPABLE 0: code of the sandbox (same uid) cannot ptrace the server or
the C and U waiting for the next call, or write their memory through /proc
to plant state for later calls. C and U become dumpable once their call has
come, so a call's /proc/self is its own as in a plain run.

What the same uid may still change in another process and a fork inherits
(rlimits, nice, CPU affinity, scheduling policy, I/O priority, and for
sandbox root the OOM score) is made again what the client's, a fresh exec,
has: U compares itself with the client when its call comes and says "Y",
or "N" when it cannot undo a change (a lowered hard limit, a raised nice).
The server then hands the call to another spare; when one it has just
forked says "N", the change is in the server itself, which exits: nsboxd
starts a new one and the client runs the call the plain way."""
import array
import ctypes
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MAX_REQUEST = 1 << 20
# Calls' processes forked ahead. With one, made once the calls were over, a
# call that came right after another waited for its forks: 15.6 ms instead
# of 2.5 from the request to the call's code, for back-to-back print(1)s.
SPARES = 2
SOCKET_PREFIX = b"\0nsbox-forkserver-"

libc = ctypes.CDLL(None, use_errno=True)


def prctl(option, value):
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl %d" % option)


RLIMITS = [getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")]
# ioprio_get, ioprio_set: Python has no call for them.
IOPRIO_SYSCALLS = {"x86_64": (252, 251), "aarch64": (31, 30)}.get(os.uname().machine)
IOPRIO_WHO_PROCESS = 1


def ioprio(pid, value=None):
    if IOPRIO_SYSCALLS is None:
        return 0
    if value is None:
        r = libc.syscall(IOPRIO_SYSCALLS[0], IOPRIO_WHO_PROCESS, pid)
    else:
        r = libc.syscall(IOPRIO_SYSCALLS[1], IOPRIO_WHO_PROCESS, 0, value)
    if r < 0:
        raise OSError(ctypes.get_errno(), "ioprio")
    return r


def oom_score_adj(pid):
    with open("/proc/%d/oom_score_adj" % pid, "rb") as f:
        return int(f.read())


def match_client(pid):
    """Make this process's inheritable attributes the client's (pid): what
    other code of the sandbox may have changed in the server or a spare
    does not reach the call. False when a change cannot be undone."""
    try:
        for r in RLIMITS:
            want = resource.prlimit(pid, r)
            if resource.getrlimit(r) != want:
                resource.setrlimit(r, want)
        want = os.getpriority(os.PRIO_PROCESS, pid)
        if os.getpriority(os.PRIO_PROCESS, 0) != want:
            os.setpriority(os.PRIO_PROCESS, 0, want)
        want = os.sched_getaffinity(pid)
        if os.sched_getaffinity(0) != want:
            os.sched_setaffinity(0, want)
        want = os.sched_getscheduler(pid)
        if os.sched_getscheduler(0) != want:
            os.sched_setscheduler(0, want, os.sched_param(0))
        want = ioprio(pid)
        if ioprio(0) != want:
            ioprio(0, want)
        want = oom_score_adj(pid)
        if oom_score_adj(os.getpid()) != want:
            with open("/proc/self/oom_score_adj", "wb") as f:
                f.write(b"%d" % want)
        return True
    except (OSError, ValueError):
        return False


def children_by_parent():
    """{parent pid: [pids]} of this pid namespace (the kernel here may lack
    /proc/PID/task/TID/children): one scan of /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def kill_children(spare=()):
    """SIGKILL every child but those in spare. Descendants are reparented
    to us (a subreaper) as their parents die, and we reap and come back here
    on each death: that ends whole trees, setsid and double-forked daemons
    included."""
    for pid in children_by_parent().get(os.getpid(), ()):
        if pid not in spare:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def kill_descendants(signalled=()):
    """SIGKILL every descendant of ours, without waiting for any to end.
    A process with SIGKILL pending runs no more code and its forks fail; one
    it forked before it got the signal shows in the next scan: when a scan
    finds none not yet signalled, nothing of the tree runs code any more.
    signalled: descendants that have SIGKILL pending already."""
    signalled = set(signalled)
    while True:
        tree = children_by_parent()
        pending = [os.getpid()]
        new = []
        while pending:
            for pid in tree.get(pending.pop(), ()):
                pending.append(pid)
                if pid not in signalled:
                    new.append(pid)
        if not new:
            return
        for pid in new:
            signalled.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def parse_request(msg):
    """(umask, run.py's arguments, environment) of the attach client's
    request: "NSBOX2", umask, count, the arguments (SCRIPT REPORT [NAME
    [ARG...]]), then the environment, each NUL-terminated."""
    parts = msg.split(b"\0")
    if len(parts) < 4 or parts[0] != b"NSBOX2" or parts[-1] != b"":
        raise ValueError("malformed request")
    count = int(parts[2])
    if count < 2 or 3 + count > len(parts) - 1:
        raise ValueError("malformed request")
    args = [os.fsdecode(a) for a in parts[3:3 + count]]
    env = {}
    for entry in parts[3 + count:-1]:
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return int(parts[1], 8) & 0o777, args, env


def recv_with_fds(sock, nfds, size=MAX_REQUEST):
    """One message and the fds that came with it ("", [] at EOF)."""
    msg, anc, flags, _ = sock.recvmsg(size, socket.CMSG_SPACE(nfds * array.array("i").itemsize))
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != nfds:
        for fd in fds:
            os.close(fd)
        return b"", []
    return msg, fds


def run_call(u_end, done_r):
    """U: wait for a call, then become it; tell C its exit code through C's
    pipe done_r before it exits. Never returns."""
    code = 0
    try:
        # What does not depend on the call is done before it comes.
        os.setsid()  # as an exec's process: kill(0, ...) reaches the call only
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2 and int(name) != u_end.fileno():
                try:
                    os.close(int(name))
                except OSError:
                    pass
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            # Every call would otherwise draw the same "random" numbers: the
            # server's state, copied. (random reseeds itself after a fork.)
            numpy.random.seed()
        import nsbox_runtime
        figures = nsbox_runtime.capture_figures()
        # The paths every call takes, once with nothing of a call: their
        # copy-on-write faults and cold caches are paid now, not while the
        # call's client waits (0.3-0.4 ms each for the compile and the
        # /workspace scan, measured from inside the call). The scan's code
        # runs on this small directory: /workspace may hold 20000 files.
        compile("pass", "<nsbox>", "exec", dont_inherit=True)
        nsbox_runtime.snapshot(os.path.dirname(os.path.abspath(nsbox_runtime.__file__)))
        json.dumps({"files_produced": {}, "images": []})
        msg, fds = recv_with_fds(u_end, 4)
        if not fds:
            os._exit(0)  # never used: the server went away
        # The call's own: its /proc/self is its own, as in an exec. Until
        # now, waiting, no other process of the sandbox could ptrace it.
        prctl(PR_SET_DUMPABLE, 1)
        client = struct.unpack("=i", msg[:4])[0]
        if not match_client(client):
            u_end.send(b"N")
            os._exit(0)
        u_end.send(b"Y")
        umask, args, env = parse_request(msg[4:])
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target, inheritable=True)
        os.fchdir(fds[3])
        for fd in fds:  # only 0-2 stay open, as in an exec
            if fd > 2:
                os.close(fd)
        os.umask(umask)
        # Only what differs: the call's environment is mostly the server's
        # own (clear and refill took 0.57 ms of each call).
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        # The call's code runs once C has the client's connection: code that
        # stopped the server before it had handed that on would wait forever.
        if u_end.recv(1) != b"G":
            raise ConnectionError("the server went away while it handed the call over")
        u_end.close()
        code = nsbox_runtime.run_stateless(*nsbox_runtime.runner_args(args), figures=figures)
    except BaseException as e:  # nsbox's own failure: say so where the user looks
        try:
            os.write(2, ("nsbox: the fork server could not run the call: %r\n" % (e,)).encode())
        except OSError:
            pass
        code = 125
    # The call is over. Tearing down this process's copy of the server takes
    # milliseconds; its output ends now, and C reports the code at once.
    for fd in (0, 1, 2):
        try:
            os.close(fd)
        except OSError:
            pass
    # Through /proc: the call's code had only fds 0-2, as an exec's has.
    try:
        fd = os.open("/proc/%d/fd/%d" % (os.getppid(), done_r), os.O_WRONLY | os.O_CLOEXEC)
        os.write(fd, struct.pack("=i", code))
    except OSError:
        pass  # C learns the code when this process has ended
    os._exit(code)


def call_status(pid, done_r):
    """U's wait status: its exit code as soon as it says it (before its
    teardown), else (killed by a signal) when it has ended."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = None
    if pidfd is not None:
        poller = select.poll()
        poller.register(done_r, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        while True:
            try:
                ready = [fd for fd, _ in poller.poll()]
                break
            except InterruptedError:
                continue
        if done_r in ready:
            data = os.read(done_r, 4)
            if len(data) == 4:
                return (struct.unpack("=i", data)[0] & 0xFF) << 8  # as waitpid reports exit(code)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def reaper(c_end, u_end):
    """C: fork U ahead of its call; once the call's connection arrives, wait
    for U, end what U left behind and send U's status. Never returns."""
    code = 0
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        # Nothing of the server's goes on in here: its stdout is nsboxd's
        # line to it, and this process becomes readable to the call's code.
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        done_r, done_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            c_end.close()
            run_call(u_end, done_r)
        u_end.close()
        # done_w stays open here: done_r never reads as closed, only U's code.
        children_by_parent()  # its cold paths now, not in the call's tail (as U does)
        _, fds = recv_with_fds(c_end, 1, 16)
        if not fds:  # the server went away before it had a call for us
            os.kill(pid, signal.SIGKILL)
        # Dumpable only now, with a call: a spare waiting for the next call
        # cannot be ptraced by the sandbox's code to plant state in it. U
        # needs it to reach done_r through /proc.
        prctl(PR_SET_DUMPABLE, 1)
        conn = socket.socket(fileno=fds[0]) if fds else None
        status = call_status(pid, done_r)
        # U first, before a scan: then a scan that finds nothing but U is
        # the last (before, every call took two of /proc, ~0.5 ms each).
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_descendants(signalled=(pid,))
        if conn is not None:
            try:
                conn.send(struct.pack("=i", status))
            except OSError:
                pass
        while True:  # off the call's path now: the tree's teardown
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
    except BaseException:
        code = 1
    os._exit(code)


class Server:
    def __init__(self, listener):
        self.listener = listener
        self.calls = {}  # C's pid -> the client's connection
        self.conns = {}  # connection fd -> C's pid
        self.spares = []  # [(C's pid, socket to C, socket to U)]: the next calls' processes
        self.poll = select.poll()
        self.poll.register(listener, select.POLLIN)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(wake_w, False)
        self.poll.register(self.wake_r, select.POLLIN)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def make_spare(self):
        """Fork a next call's C and U now, ahead of it, so that a call
        costs no fork of this (large) process while its client waits."""
        to_c, c_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        to_u, u_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            for sock in (to_c, c_end, to_u, u_end):
                sock.close()
            return False
        if pid == 0:
            self.listener.close()
            os.close(self.wake_r)
            for sock in (to_c, to_u):
                sock.close()
            for _, other_c, other_u in self.spares:  # their C must see EOF when dropped
                other_c.close()
                other_u.close()
            for fd in list(self.conns):
                os.close(fd)
            reaper(c_end, u_end)
        c_end.close()
        u_end.close()
        self.spares.append((pid, to_c, to_u))
        return True

    def make_spares(self):
        """SPARES of them between calls: a call that comes right after
        another finds one ready while the used one is replaced. Made while a
        call runs, their forks (two of this process, ~3.4 ms each here) took
        CPU from it: an isolated print(1) took 0.5 ms longer."""
        while len(self.spares) < SPARES and self.make_spare():
            pass

    def drop_spare(self, spare):
        self.spares.remove(spare)
        _, to_c, to_u = spare
        to_c.close()  # C sees EOF, kills its U and exits
        to_u.close()

    def accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        fds = []
        try:
            client, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != os.getuid():
                return
            conn.setblocking(True)
            conn.settimeout(1.0)  # the client sends at once; never block the server longer
            msg, fds = recv_with_fds(conn, 4)
            if not fds or not msg.startswith(b"NSBOX2\0"):
                return
            conn.settimeout(None)
            for attempt in range(SPARES + 1):
                fresh = not self.spares
                if fresh and not self.make_spare():
                    return  # no fork possible (pids limit): the client runs the call itself
                spare = self.spares[0]
                pid, to_c, to_u = spare
                try:
                    to_u.sendmsg([struct.pack("=i", client) + msg],
                                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                    to_u.settimeout(1.0)  # a spare that was stopped: the next one
                    answer = to_u.recv(1)
                    to_u.settimeout(None)
                except OSError:  # the spare was killed or stopped: the next one, or a new one
                    answer = b""
                if answer == b"Y":
                    break
                self.drop_spare(spare)
                if answer == b"N" and fresh:
                    # Changed in this process itself, beyond undoing: a new
                    # server (nsboxd starts one) serves the next calls.
                    sys.exit(0)
            else:
                return
            # Accepted: once the client has this it never runs the call
            # itself, so no call can run twice.
            conn.send(b"A")
            try:
                to_c.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [conn.fileno()]))])
                to_u.send(b"G")
            except OSError:
                pass  # C or U is gone: the call's end is reported when C is reaped or by C
            self.spares.remove(spare)
            to_c.close()
            to_u.close()
            self.calls[pid] = conn
            self.conns[conn.fileno()] = pid
            self.poll.register(conn, select.POLLIN)
            conn = None  # kept
        except (OSError, ValueError):
            return
        finally:
            for fd in fds:
                os.close(fd)
            if conn is not None:
                conn.close()

    def client_gone(self, fd):
        """The client's connection closed: its exec is over (timed out or
        killed, or it has its status). Whatever runs of its call dies."""
        pid = self.conns.pop(fd)
        conn = self.calls.pop(pid)
        self.poll.unregister(fd)
        conn.close()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            spare = next((sp for sp in self.spares if sp[0] == pid), None)
            if spare is not None:
                self.drop_spare(spare)
                continue
            conn = self.calls.pop(pid, None)
            if conn is None:
                continue
            del self.conns[conn.fileno()]
            self.poll.unregister(conn)
            if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                # C itself was killed (by the call's own code): the call is.
                try:
                    conn.send(struct.pack("=i", signal.SIGKILL))
                except OSError:
                    pass
            conn.close()
        # Children that are not a live C: what a dead C left (or a call
        # that killed its C). They and their trees die.
        kill_children(spare=set(self.calls) | {sp[0] for sp in self.spares})

    def serve(self):
        while True:
            if not self.calls:  # between calls: their forks do not slow a call down
                self.make_spares()
            try:
                events = self.poll.poll()
            except InterruptedError:
                continue
            for fd, mask in events:
                if fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                elif fd == self.listener.fileno():
                    self.accept()
                elif fd in self.conns:
                    self.client_gone(fd)


def warm_up_matplotlib():
    """Draw one figure and render it as PNG, then forget it: matplotlib loads
    fonts and fills its caches on the first figure a process draws, which
    would otherwise be most of every plotting call's time."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        import io
        fig = plt.figure()
        fig.gca().plot([0, 1], [1, 0])
        fig.gca().set_title("nsbox")
        fig.savefig(io.BytesIO(), format="png")
        plt.close("all")
    except Exception as e:
        print("nsbox fork server: matplotlib warm-up: %s" % e, file=sys.stderr)


def main():
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    token = sys.stdin.buffer.readline().strip()
    if not token or not token.isalnum():
        sys.exit("nsbox fork server: no token on stdin")
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except Exception as e:  # a module the image lacks is not worth failing over
            print("nsbox fork server: import %s: %s" % (name, e), file=sys.stderr)
    warm_up_matplotlib()
    import runpy  # noqa: F401
    import traceback  # noqa: F401
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nsbox_runtime  # noqa: F401
    del sys.path[0]
    # The imported objects stay where they are: the collector walking them
    # in a call would copy every page it touches.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    listener.bind(SOCKET_PREFIX + token)
    listener.listen(64)
    listener.setblocking(False)
    server = Server(listener)
    os.write(1, b"ready\n")
    server.serve()


main()
