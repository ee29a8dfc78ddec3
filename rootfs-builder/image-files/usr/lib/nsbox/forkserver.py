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
script, report path and environment, and gets "A" (accepted) and then the
wait status of the call.

Per call the server forks C, a reaper (child subreaper), which forks U, the
call: U takes the client's fds and environment and runs
nsbox_runtime.run_stateless as run.py does. When U ends, C kills every
process left under it and sends U's status to the client. When the client
goes away first (the exec timed out or was killed) the server kills C; the
processes C left behind are then reparented to the server (a subreaper as
well), which kills every child of its own that is not a live C.

PR_SET_DUMPABLE 0: code of the sandbox (same uid) cannot ptrace the server or
write its memory through /proc to plant state for later calls. C makes
itself dumpable again, so a call's /proc/self is its own as in a plain run."""
import array
import ctypes
import gc
import os
import select
import signal
import socket
import struct
import sys

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MAX_REQUEST = 1 << 20
SOCKET_PREFIX = b"\0nsbox-forkserver-"

libc = ctypes.CDLL(None, use_errno=True)


def prctl(option, value):
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl %d" % option)


def children_of(pid):
    """Pids whose parent is pid (the kernel here may lack
    /proc/PID/task/TID/children): one scan of this pid namespace's /proc."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(name))
    return out


def kill_children(spare=()):
    """SIGKILL every child but those in spare, and reap what has ended.
    Descendants are reparented to us (a subreaper) as their parents die,
    and a process with SIGKILL pending cannot fork: repeated, this ends a
    whole tree, setsid and double-forked daemons included."""
    me = os.getpid()
    for pid in children_of(me):
        if pid not in spare:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_call(fds, env, umask, script, report):
    """U: become the call. Never returns."""
    try:
        os.setsid()  # as an exec's process: kill(0, ...) reaches the call only
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target, inheritable=True)
        os.fchdir(fds[3])
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        os.umask(umask)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.environ.clear()
        os.environ.update(env)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            # Every call would otherwise draw the same "random" numbers: the
            # server's state, copied. (random reseeds itself after a fork.)
            numpy.random.seed()
        import nsbox_runtime
        code = nsbox_runtime.run_stateless(script, report)
    except BaseException as e:  # nsbox's own failure: say so where the user looks
        try:
            os.write(2, ("nsbox: the fork server could not run the call: %r\n" % (e,)).encode())
        except OSError:
            pass
        code = 125
    os._exit(code)


def reaper(conn, fds, env, umask, script, report):
    """C: run U, end what U left behind, send U's status. Never returns."""
    code = 0
    try:
        prctl(PR_SET_DUMPABLE, 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            run_call(fds, env, umask, script, report)
        for fd in fds:
            os.close(fd)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        while True:
            kill_children()
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        try:
            conn.send(struct.pack("=i", status))
        except OSError:
            pass
    except BaseException:
        code = 1
    os._exit(code)


class Server:
    def __init__(self, listener):
        self.listener = listener
        self.calls = {}  # C's pid -> the client's connection
        self.conns = {}  # connection fd -> C's pid
        self.poll = select.poll()
        self.poll.register(listener, select.POLLIN)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(wake_w, False)
        self.poll.register(self.wake_r, select.POLLIN)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        fds = []
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid != os.getuid():
                return
            conn.setblocking(True)
            conn.settimeout(1.0)  # the client sends at once; never block the server longer
            msg, anc, flags, _ = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(4 * array.array("i").itemsize))
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 4:
                return
            parts = msg.split(b"\0")
            if len(parts) < 5 or parts[0] != b"NSBOX1" or parts[-1] != b"":
                return
            umask = int(parts[1], 8) & 0o777
            script, report = os.fsdecode(parts[2]), os.fsdecode(parts[3])
            env = {}
            for entry in parts[4:-1]:
                key, sep, value = entry.partition(b"=")
                if sep and key:
                    env[os.fsdecode(key)] = os.fsdecode(value)
            conn.settimeout(None)
            # Accepted before the fork: once the client has this it never
            # runs the call itself, so no call can run twice.
            conn.send(b"A")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self.listener.close()
                os.close(self.wake_r)
                for fd in list(self.conns):
                    os.close(fd)
                reaper(conn, fds, env, umask, script, report)
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
        kill_children(spare=self.calls)

    def serve(self):
        while True:
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
    import json  # noqa: F401
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
