# SPDX-License-Identifier: Apache-2.0
"""nsbox fork server: python3 /usr/lib/nsbox/forkserver.py [MODULE]...

One per sandbox, started by nsboxd as a service exec (same user, seccomp and
limits as a stateless call). It imports MODULEs (the image's manifest
"python_preload": numpy, pandas, matplotlib.pyplot...) once, then serves
stateless python.run calls: each is a fresh child of this process, so
nothing is imported again and nothing a call does survives it.

It is two templates. Before the MODULEs, it forks the light one: a server
of its own that has loaded only what the server needs and LIGHT_PRELOAD,
and whose forks cost the sandbox a fraction of the CPU of the heavy one's
(this process, once it has imported the MODULEs). The heavy one takes every
call first and sends the client to the light one ("L") when forkroute finds
that every import of the call's code is of a module the light one has
loaded: the heavy one would not run it faster. The two live and die
together (PR_SET_PDEATHSIG; the heavy one exits when the light one ends).

nsboxd writes a random token on stdin; the server listens on the abstract
unix sockets "nsbox-forkserver-TOKEN" and "nsbox-forkserver-light-TOKEN"
(abstract names belong to the sandbox's network namespace) and says "ready"
on stdout once its imports are done. A call is the attach client (/usr/lib/nsbox/forkrun, a normal exec):
it sends its stdin, stdout, stderr and cwd (SCM_RIGHTS) with its umask,
run.py's arguments (SCRIPT REPORT [NAME [ARG...]]) and environment, and gets "A" (accepted) and then the
wait status of the call.

The server keeps two reapers C (child subreapers, forked from it) that are
not busy with a call. Each C serves one call at a time, for as long as the
server keeps it: it forks U, the next call's process, ahead of the call and
hands the server a line to it. U takes the client's fds and environment and
runs nsbox_runtime.run_stateless as run.py does. When U ends, C kills every
process left under it, says "D" to the server, sends U's status to the
client, reaps, and forks its next U. When the client goes away first (the
exec timed out or was killed) the server kills C; the processes C left
behind are then reparented to the server (a subreaper as well), which kills
every child of its own that is not a live C. A call thus costs one fork of
this large process and one teardown, done between calls (a C per call, as
before, cost two of each: ~8.5 ms of the sandbox's CPU each pair here).
A call that finds no spare ready (calls back to back) waits for a C that
is forking its next U rather than making a new C, which would make that
one too many once ready: the same one fork and one teardown per call.
U says its exit code, before its own teardown (milliseconds), on an
abstract socket C makes for that call, whose peer C checks to be U.

A call lives as long as its client's process, not its connection (a
pidfd): the client may be code of the sandbox that passed its connection
to the call itself. A C that has not forked its next U REAPER_GRACE after
its call is killed; one taken for a call the server could not accept ends.

PR_SET_DUMPABLE 0: code of the sandbox (same uid) cannot ptrace the server,
a C (which outlives its calls, so it never becomes dumpable), or a U
waiting for the next call, or write their memory through /proc to plant
state for later calls. U becomes dumpable once its call has come, so a
call's /proc/self is its own as in a plain run.

What the same uid may still change in another process and a fork inherits
(rlimits, nice, CPU affinity, scheduling policy, I/O priority, and for
sandbox root the OOM score) is made again what the client's, a fresh exec,
has (the OOM score once the client's supervisor has raised it, see
client_oom_score):
U compares itself with the client when its call comes and says "Y",
or "N" when it cannot undo a change (a lowered hard limit, a raised nice).
The server then hands the call to another spare; when one it has just
forked says "N", the change is in the server itself, which exits: nsboxd
starts a new one and the client runs the call the plain way."""
import array
import ctypes
import errno
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MAX_REQUEST = 1 << 20
# Calls' processes forked ahead. With one, made once the calls were over, a
# call that came right after another waited for its forks: 15.6 ms instead
# of 2.5 from the request to the call's code, for back-to-back print(1)s.
SPARES = 2
SOCKET_PREFIX = b"\0nsbox-forkserver-"
LIGHT_PREFIX = b"\0nsbox-forkserver-light-"
# Small modules of the standard library that calls often import: the light
# template has them loaded, so the calls that import only these (and what
# the server loaded for itself) run there (see forkroute).
LIGHT_PRELOAD = ("math", "random", "datetime", "collections", "itertools", "functools", "re", "string")
# A C that has not said "R" (its next U is ready) this long after it began
# or ended a call is stuck (stopped by other sandbox code, or waiting for a
# process that does not end): it is let go, and killed.
REAPER_GRACE = 10.0
# A call that finds no spare ready waits this long at most for a C that is
# forking its next U (see wait_for_spare) before the server forks a new C.
SPARE_WAIT = 0.25
SO_PEERPIDFD = 77  # Linux 6.5; before it, pidfd_open of the peer's pid

libc = ctypes.CDLL(None, use_errno=True)
# The OOM score of this server's supervisor, read in main: that of every
# supervisor of the sandbox (each a fork of its init, at the same score for
# its life). An exec's process starts at its supervisor's score and is
# raised to an exec's only once its execve is done (runtime/supervisor.c,
# release_oom_protection); see client_oom_score.
SUPERVISOR_OOM_SCORE = None
# How long a call waits for its client's supervisor to raise the client:
# less than the server waits for the call's answer (Server.accept, 1 s).
RAISE_WAIT = 0.8


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


def client_oom_score(pid):
    """The client's OOM score as an exec's, once its supervisor has raised
    it. The client, forkrun, a small C program, may connect and be read
    before its supervisor has run (a busy machine): a call then got the
    supervisor's score (0 instead of 1000 where nsboxd lacks
    CAP_SYS_RESOURCE). The raise always moves it (to 1000 above the
    supervisor's, or to 1000), and nothing in the sandbox can write
    forkrun's: a score still equal to the supervisor's is not raised yet."""
    score = oom_score_adj(pid)
    if SUPERVISOR_OOM_SCORE is None or SUPERVISOR_OOM_SCORE >= 1000:
        return score
    deadline = time.monotonic() + RAISE_WAIT
    while score == SUPERVISOR_OOM_SCORE and time.monotonic() < deadline:
        time.sleep(0.001)
        score = oom_score_adj(pid)
    return score


def match_client(pid):
    """Make this process's inheritable attributes the client's (pid): what
    other code of the sandbox may have changed in the server or a spare
    does not reach the call. b"Y", b"N" when a change cannot be undone, b"X"
    when the client is gone."""
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
        want = client_oom_score(pid)
        if oom_score_adj(os.getpid()) != want:
            with open("/proc/self/oom_score_adj", "wb") as f:
                f.write(b"%d" % want)
        return b"Y"
    except (ProcessLookupError, FileNotFoundError):
        return b"X"
    except (OSError, ValueError):
        return b"N"


def close_fds_but(keep):
    """Close every fd above 2 but keep's: what this process inherited of
    other calls and clients is not kept (nor passed on to its forks)."""
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) != keep:
            try:
                os.close(int(name))
            except OSError:
                pass


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name: state, ppid..."""
    with open("/proc/%s/stat" % pid, "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def children_by_parent():
    """{parent pid: [pids]} of this pid namespace (the kernel here may lack
    /proc/PID/task/TID/children): one scan of /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(proc_stat(name)[1])
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


def recv_with_fds(sock, nfds, size=MAX_REQUEST, exact=True, flags=0):
    """One message and the nfds fds that came with it (at most nfds if not
    exact); "", [] at EOF or when the fds are not those."""
    msg, anc, flags, _ = sock.recvmsg(size, socket.CMSG_SPACE(nfds * array.array("i").itemsize), flags)
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) > nfds or (exact and len(fds) != nfds):
        for fd in fds:
            os.close(fd)
        return b"", []
    return msg, fds


def run_call(u_end, report_to):
    """U: wait for a call, then become it; tell C its exit code on C's
    abstract socket report_to before it exits. Never returns."""
    code = 0
    try:
        # What does not depend on the call is done before it comes.
        os.setsid()  # as an exec's process: kill(0, ...) reaches the call only
        close_fds_but(u_end.fileno())
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
        answer = match_client(client)
        u_end.send(answer)
        if answer != b"Y":
            os._exit(0)
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
            os._exit(0)  # not taken after all (its client left, or the server): nothing of it ran
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
    # A new socket: the call's code had only fds 0-2, as an exec's has.
    try:
        report = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        report.connect(report_to)
        report.send(struct.pack("=i", code))
    except OSError:
        pass  # C learns the code when this process has ended
    os._exit(code)


def call_status(pid, reports):
    """U's wait status: its exit code as soon as it says it on reports (a
    listening socket) before its teardown, else (killed by a signal) when
    it has ended."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = None  # no early report: U's end only (waiting for a report could outwait U)
    poller = select.poll()
    poller.register(reports, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while pidfd is not None:
            try:
                ready = [fd for fd, _ in poller.poll()]
            except InterruptedError:
                continue
            if reports.fileno() not in ready:
                break
            status = read_report(reports, pid)
            if status is not None:
                return status
            if pidfd in ready:  # U has ended: connections that are not U's wait no more
                break
    finally:
        if pidfd is not None:
            os.close(pidfd)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def read_report(reports, pid):
    """An exit code said by pid on reports, as waitpid reports exit(code);
    None when the one who connected was another process of the sandbox."""
    try:
        conn, _ = reports.accept()
    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
        return None
    with conn:
        try:
            if struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0] != pid:
                return None
            conn.settimeout(1.0)
            data = conn.recv(4)
        except OSError:
            return None
    if len(data) != 4:
        return None
    return (struct.unpack("=i", data)[0] & 0xFF) << 8


def reaper(c_end):
    """C: a call at a time, for as long as the server keeps it: fork U ahead
    of its call and hand the server a line to it; once the call's
    connection arrives, wait for U, end what U left behind and send U's
    status. Never returns."""
    code = 0
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        # Nothing of the server's goes on in here: its stdout is nsboxd's
        # line to it.
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Forked from the server at any time, even in the middle of taking
        # a call: nothing of the server's clients and calls stays open here.
        close_fds_but(c_end.fileno())
        children_by_parent()  # its cold paths once, not in the first call's tail
        # This process stays non-dumpable: it outlives its calls, and their
        # code must not be able to ptrace it.
        while serve_one_call(c_end):
            pass
    except BaseException:
        code = 1
    os._exit(code)


def serve_one_call(c_end):
    """One call in C. False when the server has let this C go."""
    # Where U says its exit code: a name only U and this process know (a
    # listing of the sandbox's sockets shows it, so the peer's pid is
    # checked), new for each call, so nothing queued in it outlives one.
    name = b"\0nsbox-forkserver-call-" + os.urandom(16).hex().encode()
    reports = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    reports.bind(name)
    reports.listen(8)
    reports.setblocking(False)
    with reports:
        return serve_call(c_end, reports, name)


def serve_call(c_end, reports, name):
    to_u, u_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        c_end.close()
        reports.close()
        to_u.close()
        run_call(u_end, name)
    u_end.close()
    try:
        # The server talks to U itself: the call, U's answer, "G".
        c_end.sendmsg([b"R"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [to_u.fileno()]))])
        to_u.close()
        _, fds = recv_with_fds(c_end, 1, 16)
    except OSError:
        fds = []
    if not fds:  # the server let us go, or went away, before it had a call for us
        os.kill(pid, signal.SIGKILL)
        return False
    conn = socket.socket(fileno=fds[0])
    status = call_status(pid, reports)
    # U first, before a scan: then a scan that finds nothing but U is
    # the last (before, every call took two of /proc, ~0.5 ms each).
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_descendants(signalled=(pid,))
    try:
        # The server first: then the client's leaving, once it has the
        # status, is not taken for a call that must be killed.
        c_end.send(b"D")
    except OSError:
        pass
    try:
        conn.send(struct.pack("=i", status))
    except OSError:
        pass
    conn.close()
    while True:  # off the call's path now: the tree's teardown
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    return True


def stopped(pid):
    """Whether pid is stopped (other code of the sandbox may SIGSTOP it)."""
    try:
        return proc_stat(pid)[0] in (b"T", b"t")
    except (OSError, IndexError):
        return True


class Server:
    def __init__(self, listener, light=None):
        self.listener = listener
        # The heavy template's: its light template (pid, its modules: see
        # start_light), which serves the calls that forkroute gives it:
        # their client is told so ("L").
        self.light, self.light_modules = light or (None, None)
        self.reapers = {}  # C's pid -> socket to C: every live C
        self.by_fd = {}  # that socket's fd -> C's pid
        self.spares = []  # [(C's pid, socket to its U)]: a C whose U waits for the next call
        self.pending = {}  # C's pid -> since when it has been forking its next U
        self.calls = {}  # C's pid -> (the client's connection, the client process's pidfd)
        self.client_fds = {}  # either fd -> C's pid: the call ends when either says the client left
        # fds closed since the last poll: their events in its answer are
        # stale, and the number may be a new connection's already.
        self.closed = set()
        self.reserve = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)  # see accept
        self.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.poll = select.poll()
        self.poll.register(listener, select.POLLIN)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(wake_w, False)
        self.poll.register(self.wake_r, select.POLLIN)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def make_reaper(self):
        """Fork a C: it forks the next call's U ahead of it (so a call costs
        no fork of this large process while its client waits), says "R"
        with a line to U, and serves calls one after another."""
        try:
            to_c, c_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        except OSError:
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            to_c.close()
            c_end.close()
            return None
        if pid == 0:
            reaper(c_end)  # which first closes every other fd: other Cs see EOF when let go
        c_end.close()
        self.reapers[pid] = to_c
        self.pending[pid] = time.monotonic()
        self.by_fd[to_c.fileno()] = pid
        self.poll.register(to_c, select.POLLIN)
        return pid

    def make_reapers(self):
        """SPARES Cs not busy with a call: a call that comes right after
        another finds a U ready while the used C forks its next one. Made
        while a call runs, forks of this process (~3.4 ms each here) took
        CPU from it: an isolated print(1) took 0.5 ms longer."""
        while len(self.reapers) - len(self.calls) < SPARES and self.make_reaper() is not None:
            pass

    def end_stuck_reapers(self):
        """Let go and kill the Cs past REAPER_GRACE without an "R"."""
        now = time.monotonic()
        for pid in [pid for pid, since in self.pending.items() if now - since > REAPER_GRACE]:
            self.end_reaper(pid)

    def next_deadline(self):
        """Poll timeout (ms) until a C waited on would be stuck, or None."""
        if not self.pending:
            return None
        return max(0, int((min(self.pending.values()) + REAPER_GRACE - time.monotonic()) * 1000) + 1)

    def end_reaper(self, pid):
        self.let_go(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def let_go(self, pid):
        """C sees EOF: it kills its U and exits (reaped as any child)."""
        self.pending.pop(pid, None)
        to_c = self.reapers.pop(pid, None)
        if to_c is not None:
            self.poll.unregister(to_c)
            del self.by_fd[to_c.fileno()]
            self.closed.add(to_c.fileno())
            to_c.close()
        for spare in [sp for sp in self.spares if sp[0] == pid]:
            self.spares.remove(spare)
            spare[1].close()

    def from_reaper(self, pid):
        """C's messages: "R" with a line to its next U, "D" once its call
        is over (before the client has its status)."""
        to_c = self.reapers.get(pid)
        while pid in self.reapers:
            try:
                msg, fds = recv_with_fds(to_c, 1, 16, exact=False, flags=socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                msg, fds = b"", []
            if msg == b"D" and not fds:
                self.call_over(pid)
                self.pending[pid] = time.monotonic()
            elif msg == b"R" and fds and pid not in self.calls:
                self.pending.pop(pid, None)
                to_u = socket.socket(fileno=fds[0])
                if len(self.spares) < SPARES:
                    self.spares.append((pid, to_u))
                else:
                    to_u.close()
                    self.let_go(pid)
            else:  # EOF, or nonsense: C is gone or broken
                for fd in fds:
                    os.close(fd)
                if pid in self.calls:
                    try:
                        os.kill(pid, signal.SIGKILL)  # its call ends as C's death (see reap)
                    except ProcessLookupError:
                        pass
                self.let_go(pid)

    def call_over(self, pid):
        conn, pidfd = self.calls.pop(pid, (None, None))
        if conn is not None:
            for fd in (conn.fileno(), pidfd):
                del self.client_fds[fd]
                self.poll.unregister(fd)
                self.closed.add(fd)
            conn.close()
            os.close(pidfd)

    def take_spare(self):
        """A C with its U ready, or None. Made now if none waits and none
        gets ready within SPARE_WAIT; a C that other code of the sandbox
        stopped is passed over."""
        deadline = time.monotonic() + SPARE_WAIT
        while True:
            while self.spares:
                pid, to_u = self.spares.pop(0)
                if not stopped(pid):
                    return pid, to_u, False
                self.give_back((pid, to_u, False))
            if not self.wait_for_spare(deadline):
                break
        pid = self.make_reaper()
        if pid is None:
            return None
        to_c = self.reapers[pid]
        try:
            to_c.settimeout(2.0)
            msg, fds = recv_with_fds(to_c, 1, 16)
            to_c.settimeout(None)
        except OSError:
            msg, fds = b"", []
        if msg != b"R" or not fds:
            for fd in fds:
                os.close(fd)
            self.end_reaper(pid)
            return None
        self.pending.pop(pid, None)
        return pid, socket.socket(fileno=fds[0]), True

    def wait_for_spare(self, deadline):
        """Whether a C that was forking its next U (its call just over)
        became a spare before deadline. Calls back to back find none
        ready; such a C is ready sooner than a new one (a fork of this
        process, then the new C's fork of its U), and once a new one is
        made, the C that gets ready is one too many and goes, torn down:
        each back-to-back call paid two forks and two teardowns more of
        the sandbox's own CPU time, taken from the calls' code."""
        while not self.spares:
            coming = [pid for pid in self.pending if pid not in self.calls and not stopped(pid)]
            left = deadline - time.monotonic()
            if not coming or left <= 0:
                return False
            poller = select.poll()
            for pid in coming:
                poller.register(self.reapers[pid], select.POLLIN)
            try:
                ready = poller.poll(int(left * 1000) + 1)
            except InterruptedError:
                continue
            for fd, _ in ready:
                if fd in self.by_fd:
                    self.from_reaper(self.by_fd[fd])
        return True

    def accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError:
            # No fd left for it (EMFILE: other sandbox code may lower this
            # process's limits, or many calls run): the connection would stay
            # queued and wake the loop forever. With the fd kept in reserve
            # it is taken and closed: its client runs the call itself.
            # When the limit is lower than at start, other code lowered it:
            # a new server (nsboxd starts one) takes over.
            try:
                os.close(self.reserve)
                try:
                    self.listener.accept()[0].close()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    pass
                self.reserve = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                sys.exit(0)
            if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < self.nofile:
                sys.exit(0)
            return
        fds = []
        pidfd = None
        spare = None
        try:
            client, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != os.getuid():
                return
            # The call lives as long as the client process, not its
            # connection: a client could pass the connection itself to the
            # call as one of its fds, and the server would never see it close.
            try:
                pidfd = struct.unpack("i", conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4))[0]
            except OSError as e:
                if e.errno != errno.ENOPROTOOPT:
                    return  # the client is gone (reaped): its pid may be another's already
                # Before Linux 6.5: by pid, which a client reaped this very
                # moment could have passed on to another process.
                pidfd = os.pidfd_open(client)
            conn.setblocking(True)
            conn.settimeout(1.0)  # the client sends at once; never block the server longer
            msg, fds = recv_with_fds(conn, 4)
            if not fds or not msg.startswith(b"NSBOX2\0"):
                return
            if self.light is not None:
                _, args, _ = parse_request(msg)
                if not forkroute.needs_heavy(args[0], args[2] if len(args) > 2 else None,
                                             os.readlink("/proc/self/fd/%d" % fds[3]), self.light_modules):
                    conn.send(b"L")
                    return
            conn.settimeout(None)
            for attempt in range(SPARES + 1):
                spare = self.take_spare()
                if spare is None:
                    return  # no fork possible (pids limit): the client runs the call itself
                pid, to_u, fresh = spare
                try:
                    to_u.sendmsg([struct.pack("=i", client) + msg],
                                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                    to_u.settimeout(1.0)  # a U that was stopped: the next one
                    answer = to_u.recv(1)
                    to_u.settimeout(None)
                except OSError:  # U was killed or stopped: the next one, or a new one
                    answer = b""
                if answer == b"Y" and select.select([pidfd], [], [], 0)[0]:
                    answer = b"X"  # the client ended meanwhile: the pid U matched may be another's
                if answer == b"Y":
                    break
                self.give_back(spare)
                spare = None
                if answer == b"X":
                    return  # the client is gone
                if answer == b"N" and fresh:
                    # Changed in this process itself, beyond undoing: a new
                    # server (nsboxd starts one) serves the next calls.
                    sys.exit(0)
            else:
                return
            # Accepted: once the client has this it never runs the call
            # itself, so no call can run twice.
            conn.send(b"A")
            spare = None  # the call's now: it ends as calls do
            try:
                self.reapers[pid].sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                    array.array("i", [conn.fileno()]))])
                to_u.send(b"G")
            except (OSError, KeyError):
                pass  # C or U is gone: the call's end is reported when C is reaped or by C
            to_u.close()
            self.calls[pid] = (conn, pidfd)
            for fd in (conn.fileno(), pidfd):
                self.client_fds[fd] = pid
                self.poll.register(fd, select.POLLIN)
            conn = pidfd = None  # kept
        except (OSError, ValueError):
            return
        finally:
            if spare is not None:  # taken, not used: its U has the request, so it goes
                self.give_back(spare)
            for fd in fds:
                os.close(fd)
            if conn is not None:
                conn.close()
            if pidfd is not None:
                os.close(pidfd)

    def give_back(self, spare):
        """A spare taken but not used for a call: C and U end."""
        pid, to_u, _ = spare
        to_u.close()
        self.end_reaper(pid)

    def client_gone(self, pid):
        """The client's connection closed or its process ended: its exec is
        over (timed out or killed, or it has its status). Whatever runs of
        its call dies."""
        self.from_reaper(pid)  # a "D" already sent: the call is over, C stays
        if pid not in self.calls:
            return
        self.call_over(pid)
        self.end_reaper(pid)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == self.light:
                # Killed by sandbox code, or changed beyond undoing (see
                # accept): the pair ends, and nsboxd starts a new one.
                sys.exit(0)
            self.from_reaper(pid)  # what it said before it died: a "D" ends its call
            self.let_go(pid)
            if pid in self.calls:
                # C died with a call (killed by the call's own code): the call is.
                try:
                    self.calls[pid][0].send(struct.pack("=i", signal.SIGKILL))
                except OSError:
                    pass
                self.call_over(pid)
        # Children that are not a live C: what a dead C left (or a call
        # that killed its C). They and their trees die.
        kill_children(spare=set(self.reapers) | {self.light})

    def serve(self):
        while True:
            self.end_stuck_reapers()
            if not self.calls:  # between calls: their forks do not slow a call down
                self.make_reapers()
            try:
                events = self.poll.poll(self.next_deadline())
            except InterruptedError:
                continue
            # Cs first: a "D" is read before the client's leaving after it.
            events.sort(key=lambda event: event[0] not in self.by_fd)
            self.closed.clear()
            for fd, mask in events:
                if fd in self.closed:
                    continue
                if fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                elif fd == self.listener.fileno():
                    self.accept()
                elif fd in self.by_fd:
                    self.from_reaper(self.by_fd[fd])
                elif fd in self.client_fds:
                    self.client_gone(self.client_fds[fd])


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


def preload(names):
    for name in names:
        try:
            __import__(name)
        except Exception as e:  # a module the image lacks is not worth failing over
            print("nsbox fork server: import %s: %s" % (name, e), file=sys.stderr)


def listen(name):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    listener.bind(name)
    listener.listen(64)
    listener.setblocking(False)
    return listener


def start_light(token):
    """Fork the light template, before the heavy imports: a server of its
    own, on the socket "nsbox-forkserver-light-TOKEN" (bound here, before
    this one says "ready", so nothing else of the sandbox can take the
    name), for the calls this one sends there (see Server.accept). It dies
    with this process (PR_SET_PDEATHSIG), and this one ends when it dies
    (Server.reap). (Its pid, {name: the names in it} of each module it has
    loaded), or None."""
    try:
        listener = listen(LIGHT_PREFIX + token)
    except OSError as e:
        print("nsbox fork server: light template: %s" % e, file=sys.stderr)
        return None
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        listener.close()
        return None
    if pid == 0:
        try:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() == parent:
                prctl(PR_SET_CHILD_SUBREAPER, 1)
                Server(listener).serve()
        finally:
            os._exit(0)
    listener.close()
    return pid, {name: frozenset(getattr(module, "__dict__", ())) for name, module in sys.modules.items()}


def main():
    global SUPERVISOR_OOM_SCORE
    SUPERVISOR_OOM_SCORE = oom_score_adj(os.getppid())
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    token = sys.stdin.buffer.readline().strip()
    if not token or not token.isalnum():
        sys.exit("nsbox fork server: no token on stdin")
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import runpy  # noqa: F401
    import traceback  # noqa: F401
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nsbox_runtime  # noqa: F401
    global forkroute
    import forkroute
    del sys.path[0]
    preload(LIGHT_PRELOAD)
    # The imported objects stay where they are: the collector walking them
    # in a call would copy every page it touches.
    gc.collect()
    gc.freeze()
    light = start_light(token)
    preload(sys.argv[1:])
    warm_up_matplotlib()
    gc.collect()
    gc.freeze()
    server = Server(listen(SOCKET_PREFIX + token), light=light)
    os.write(1, b"ready\n")
    server.serve()


main()
