# husk's warm interpreter shim (docs/warm.md). husk runs it inside a live
# sandbox as `python3 -c BOOT MODE LANG [MODULES...]` (crate::warm::BOOT
# reads this source as the first message on stdin), confined like any
# exec, with fd 0 a SOCK_SEQPACKET control socket whose other end only
# husk holds (nothing in the sandbox's filesystem names it). Each call
# arrives as one message with six fds attached: the request (a memfd: one
# JSON header line, then the code), the call's stdin, stdout, stderr, its
# status socket, on which husk's sync records (src/sync.rs) go back, and
# its results (an empty memfd: the notebook-style results of a python call
# go there as JSON lines, which husk reads after the call, bounded).
#
# fork mode: the shim is the init of a pid namespace of its own, so a child
# it forks can neither name it nor signal it (SIGKILL from inside a pid
# namespace never reaches its init), and it is non-dumpable, so no /proc/1/mem
# or ptrace. Each call is a fresh child: it sends its pidfd, waits until husk
# has moved it into the exec's cgroup, then runs the code in a clean
# __main__. The shim reaps it and reports how it ended. The next call's
# child is forked ahead (a spare) and husk's supervisor moves it into the
# next exec's leaf ahead too, so the call's path has neither the fork nor
# the cgroup move (whose RCU wait is ~10 ms after an idle spell).
#
# session mode: the shim keeps one interpreter (python: its globals; bash: a
# bash child fed through a file per call) and runs each call itself.
import os, sys, socket, struct, json, signal, select

MODE, LANG = sys.argv[1], sys.argv[2]
MODULES = sys.argv[3:]

REC = struct.Struct("=Ii8Q")
# fork() attempts (5 ms apart) while a fork bomb's zombies free their pids.
FORK_TRIES = 400
RELEASE, EXITED, SIGNALED, JOINED, INTERRUPTED = 1, 4, 5, 9, 14
# request, stdin, stdout, stderr, status, results
CALL_FDS = 6
# Frames of this file are cut from a call's traceback (crate::warm::BOOT
# compiles the shim under this name).
SHIM_FILE = "<husk-warm-shim>"


def rec(tag, a=0):
    return REC.pack(tag, a, *([0] * 8))


def set_dumpable_0():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


# `python3 -c` puts '' (the working directory, which calls may write)
# first on sys.path: a file a call leaves there (`csv.py`) would be what
# the next call's `import csv` runs. It goes last instead: the standard
# library and site-packages come first, a module of the call's own in its
# working directory still imports (docs/warm.md, What a call leaves).
if sys.path and sys.path[0] == "":
    sys.path.append(sys.path.pop(0))

# The control socket moves off fd 0, which each call's stdin takes.
ctl = socket.socket(fileno=os.dup(0))
null = os.open("/dev/null", os.O_RDWR)
os.dup2(null, 0)


def say(obj):
    ctl.send(json.dumps(obj).encode())


try:
    set_dumpable_0()
    # Nothing a call sends may stop the shim: the calls run in children
    # (fork) or with their own handlers (session).
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_IGN)
    os.dup2(null, 1)
    os.dup2(null, 2)
    import traceback, builtins, time, secrets, gc, ast, base64, warnings
    for m in MODULES:
        __import__(m)
    # What the zygote holds now is never collected in its children: a
    # collection there would write to (and so copy) every page of it.
    gc.freeze()
except BaseException as e:
    say({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    sys.exit(1)


def recv_message():
    """One message from husk on the control socket: its word and fds."""
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctl, 4096, 8)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)  # husk's end is gone: so is the sandbox
        return data, fds


def recv_call():
    while True:
        _word, fds = recv_message()
        if len(fds) != CALL_FDS:
            for fd in fds:
                os.close(fd)
            continue
        return fds


def joined(status, pid=None):
    """Answers a call on its status channel with the pidfd of the process
    that runs it (this one, or a bash session's shell): husk exec moves it
    into the call's cgroup leaf and watches it through it."""
    st = socket.socket(fileno=status)
    me = os.pidfd_open(pid or os.getpid())
    socket.send_fds(st, [rec(JOINED)], [me])
    os.close(me)
    return st


def released(st):
    """Waits for husk exec's `Release`: the call's process is in the
    call's cgroup leaf. False when husk exec gave up (it is gone, or the
    move failed): nothing of the call may run then."""
    try:
        msg = st.recv(256)
    except OSError:
        return False
    return len(msg) == REC.size and REC.unpack(msg)[0] == RELEASE


def read_request(fd):
    os.lseek(fd, 0, 0)
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    raw = b"".join(chunks)
    head, _, code = raw.partition(b"\n")
    return json.loads(head), code


def apply_env(head):
    os.environ.clear()
    for k, v in head.get("env", []):
        os.environ[k] = v
    cwd = head.get("cwd")
    if cwd:
        os.chdir(cwd)


class CallTimeout(BaseException):
    pass


class Results:
    """Where a python call's notebook-style results go (docs/warm.md,
    Results): the value of its last expression, what it passed to
    display(), its open matplotlib figures, and its exception, as JSON
    lines on the call's results memfd. husk reads at most the exec's output
    limit of it; what the code writes there itself is its own output, no
    more trusted than its stdout."""

    def __init__(self, fd):
        self.fd = fd

    def write(self, obj):
        if self.fd < 0:
            return
        try:
            line = json.dumps(obj, default=repr).encode() + b"\n"
            while line:
                line = line[os.write(self.fd, line):]
        except (OSError, ValueError, TypeError):
            pass

    def value(self, obj, main):
        self.write({"type": "result" if main else "display", "is_main_result": main, "data": bundle(obj)})

    def figures(self):
        """Open matplotlib figures become PNG results (and are closed), as
        a notebook's inline backend shows them, without a savefig."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            for n in plt.get_fignums():
                self.value(plt.figure(n), False)
            plt.close("all")
        except Exception:
            pass

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


NO_RESULTS = Results(-1)
# The call's results while it runs (display() writes there).
CURRENT = [NO_RESULTS]


def bundle(obj):
    """A MIME bundle for `obj`, as IPython's display formatter builds one:
    _repr_mimebundle_ first, then the _repr_*_ methods, text/plain last."""
    data = {}
    if isinstance(obj, type):
        return {"text/plain": repr(obj)}
    try:
        m = getattr(obj, "_repr_mimebundle_", None)
        if callable(m):
            r = m()
            r = r[0] if isinstance(r, tuple) else r
            if isinstance(r, dict):
                data.update({k: v for k, v in r.items() if isinstance(k, str)})
    except Exception:
        pass
    for meth, mime in (
        ("_repr_html_", "text/html"),
        ("_repr_markdown_", "text/markdown"),
        ("_repr_svg_", "image/svg+xml"),
        ("_repr_png_", "image/png"),
        ("_repr_jpeg_", "image/jpeg"),
        ("_repr_latex_", "text/latex"),
        ("_repr_json_", "application/json"),
        ("_repr_javascript_", "application/javascript"),
    ):
        if mime in data:
            continue
        try:
            f = getattr(obj, meth, None)
            r = f() if callable(f) else None
        except Exception:
            r = None
        r = r[0] if isinstance(r, tuple) else r
        if r is not None:
            data[mime] = r
    if "image/png" not in data and hasattr(obj, "savefig") and type(obj).__module__.startswith("matplotlib"):
        try:
            import io
            buf = io.BytesIO()
            obj.savefig(buf, format="png")
            data["image/png"] = buf.getvalue()
        except Exception:
            pass
    for mime in ("image/png", "image/jpeg"):
        if isinstance(data.get(mime), (bytes, bytearray)):
            data[mime] = base64.b64encode(data[mime]).decode()
    try:
        data["text/plain"] = repr(obj)
    except Exception as e:
        data["text/plain"] = "<repr failed: %s>" % type(e).__name__
    return data


def display(*objs, **_kw):
    """IPython's display(): each object becomes a result of the call."""
    for o in objs:
        CURRENT[0].value(o, False)


builtins.display = display
# Figures come back as results: plt.show() has nothing to show on Agg.
warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")


def user_tb(tb):
    """The traceback from the call's own first frame (the shim's cut)."""
    while tb is not None and tb.tb_frame.f_code.co_filename == SHIM_FILE:
        tb = tb.tb_next
    return tb


def report(e, results):
    """Prints the exception as python3 would (without the shim's frames)
    and records it as the call's structured error."""
    lines = traceback.format_exception(type(e), e, user_tb(e.__traceback__))
    text = "".join(lines)
    try:
        sys.stderr.write(text)
    except BaseException:
        pass
    results.write({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": text})


def run_python(code, g, results=NO_RESULTS):
    """Runs `code` as `python3 -` would; the exit status. With `results`,
    the value of a last expression statement is the call's main result
    (a notebook cell's Out), as IPython does it."""
    CURRENT[0] = results
    try:
        tree = compile(code, "<code>", "exec", ast.PyCF_ONLY_AST)
        last = None
        if results is not NO_RESULTS and tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<code>", "exec"), g)
        if last is not None:
            value = eval(compile(last, "<code>", "eval"), g)
            if value is not None:
                results.value(value, True)
        results.figures()
        return 0
    except CallTimeout:
        raise
    except SystemExit as e:
        c = e.code
        if c is None:
            return 0
        if isinstance(c, int):
            return c & 0xFF
        print(c, file=sys.stderr)
        return 1
    except BaseException as e:
        report(e, results)
        return 1
    finally:
        CURRENT[0] = NO_RESULTS
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except BaseException:
                pass


def fresh_main():
    return {"__name__": "__main__", "__builtins__": builtins, "__doc__": None, "__package__": None, "__spec__": None}


def status_of(st):
    if os.WIFSIGNALED(st):
        return rec(SIGNALED, os.WTERMSIG(st))
    return rec(EXITED, os.WEXITSTATUS(st) if os.WIFEXITED(st) else 1)


# ---------------------------------------------------------------- fork mode

def first_to_go():
    """The OOM killer takes this process (and what it forks) before the
    interpreter: a call's processes rank above it (oom_score_adj 1000, which
    no one needs a privilege to set), so a call that runs its sandbox out
    of memory (a fork bomb's many small children) loses its own processes,
    not the zygote or the session the next calls need. Left at 0 the
    zygote, whose file pages a fresh fork does not map yet, outranked
    them (issue 31, item 5)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass  # no /proc: the kernel's own ranking


def detach(keep):
    """A fresh child's first steps, before any call's code: its own
    session, no fd but `keep` (not the control socket, nor another call's
    status socket, nor the shim's pidfds), default signal handling, first
    to go at an OOM."""
    os.setsid()
    signal.set_wakeup_fd(-1)  # the zygote's, closed below
    first_to_go()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    for s in range(1, signal.NSIG):
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(s, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def run_call(fds):
    req, stdin, stdout, stderr, status, results = fds
    for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
        os.dup2(fd, target)
    for fd in (stdin, stdout, stderr):
        if fd > 2:
            os.close(fd)
    st = joined(status)
    # Nothing of the call runs before husk placed this process.
    if not released(st):
        os._exit(125)
    st.close()
    head, code = read_request(req)
    apply_env(head)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False, buffering=1 if os.isatty(1) else -1)
    sys.stderr = open(2, "w", closefd=False, buffering=1)
    sys.argv = ["-"]
    os._exit(run_python(code, fresh_main(), Results(results)))


def fresh_child(fds):
    """A child forked for a call that found no placed spare."""
    detach({0, 1, 2, *fds})
    run_call(fds)


def only_child(f, arg):
    """Runs a child's part: whatever it raises, the child ends here and
    never returns into the shim's loop."""
    try:
        f(arg)
    finally:
        os._exit(126)


def prewarm():
    """A spare goes once through what a call does (a request read, the
    environment set, stdio opened, code compiled and run) while it waits:
    after a fork, the pages those steps write are copied on first write.
    Taking those faults here cut a print(1) call's own steps from 1.1-2.0
    ms to 0.56-0.90 ms (six calls each, timed inside; docs/warm.md)."""
    fd = os.memfd_create("husk-prewarm")
    head = {"env": list(os.environ.items()), "cwd": os.getcwd()}
    os.write(fd, json.dumps(head).encode() + b"\n" + b"pass\n")
    head, code = read_request(fd)
    apply_env(head)
    for f, mode in ((0, "r"), (1, "w"), (2, "w")):
        open(f, mode, closefd=False).close()
    run_python(code, fresh_main())


def spare_main(sock):
    """A child forked ahead of the next call: detached like any call's
    child, it waits for the call's fds, which only the shim can send."""
    detach({0, 1, 2, sock.fileno()})
    try:
        prewarm()
    except Exception:
        pass  # only a head start: the call does it all again
    while True:
        try:
            _data, fds, _flags, _addr = socket.recv_fds(sock, 64, CALL_FDS)
        except InterruptedError:
            continue
        break
    sock.close()
    if len(fds) != CALL_FDS:
        os._exit(0)  # the shim let this spare go
    run_call(fds)


def usable(spare):
    """Whether a spare still waits: not stopped, not dead. (Through its
    pidfd: the shim's /proc is the sandbox's, whose pids are not those of
    the shim's own pid namespace.)"""
    try:
        flags = os.WSTOPPED | os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PIDFD, spare.pidfd, flags) is None
    except OSError:
        return False


class Spare:
    """The child forked ahead: husk (the supervisor) moves it into the next
    exec's cgroup leaf off any call's path and answers `placed SEQ`; only
    then may a call go to it (docs/warm.md, Pre-forked children)."""

    def __init__(self, seq):
        self.seq, self.placed, self.leaf = seq, False, None
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            only_child(spare_main, theirs)
        theirs.close()
        self.pidfd = os.pidfd_open(self.pid)
        try:
            socket.send_fds(ctl, [b"spare %d" % seq], [self.pidfd])
        except OSError:
            pass  # husk's end is gone; the next recv says so

    def drop(self, poller, kill=False):
        """Lets an unused spare go (the reaping loop reaps it)."""
        if kill:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except OSError:
                pass
        poller.unregister(self.pidfd)
        os.close(self.pidfd)
        self.sock.close()


def zygote():
    say({"ok": True, "pid": os.getpid()})
    calls = {}  # pid -> (status socket fd, its pidfd)
    poller = select.poll()
    poller.register(ctl.fileno(), select.POLLIN)
    seq = 0

    def new_spare():
        nonlocal seq
        seq += 1
        try:
            s = Spare(seq)
        except OSError:
            return None  # no fork now (the pids limit): calls fork afresh
        poller.register(s.pidfd, select.POLLIN)
        return s

    def fork_call(fds):
        # Right after a call that ran into the pids limit (a fork bomb),
        # its killed processes still hold their pids as zombies until this
        # loop reaps them (orphans come to the zygote): reap and retry for
        # a while rather than give the next call up at once ("ended the
        # call before it started").
        tries = FORK_TRIES
        while True:
            try:
                pid = os.fork()
                break
            except BlockingIOError:
                tries -= 1
                if tries <= 0:
                    raise
                reap()
                select.select([], [], [], 0.005)
        if pid == 0:
            only_child(fresh_child, fds)
        try:
            return pid, os.pidfd_open(pid)
        except OSError:
            return pid, -1

    def reap():
        """Reaps every child, ours and the orphans pid 1 inherits."""
        nonlocal spare
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in calls:
                sfd, pfd = calls.pop(pid)
                try:
                    os.write(sfd, status_of(st))
                except OSError:
                    pass
                os.close(sfd)
                if pfd >= 0:
                    poller.unregister(pfd)
                    os.close(pfd)
            elif spare is not None and pid == spare.pid:
                # An unused spare died (a call killed it): the next call
                # forks afresh.
                spare.drop(poller)
                spare = None

    # Orphans the zygote inherits as pid 1 (what a call left, killed with
    # its leaf) hold their pids until they are reaped: SIGCHLD wakes the
    # loop (a wakeup fd), so they are reaped at once, and the next spare is
    # forked as soon as their pids are free, not at the next call, whose
    # fork would fail (EAGAIN) at the pids limit.
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    poller.register(wake_r, select.POLLIN)
    spare = new_spare()

    while True:
        events = poller.poll()
        reap()
        for fd, _ in events:
            if fd == wake_r:
                try:
                    os.read(wake_r, 4096)
                except OSError:
                    pass
                continue
            if fd != ctl.fileno():
                continue
            word, fds = recv_message()
            if word.startswith(b"placed "):
                # `placed SEQ LEAF`: the leaf the supervisor moved it into.
                parts = word.split()
                if spare is not None and parts[1:2] == [b"%d" % spare.seq]:
                    spare.placed = True
                    spare.leaf = parts[2] if len(parts) > 2 else None
                continue
            if len(fds) != CALL_FDS:
                for f in fds:
                    os.close(f)
                continue
            pid, pfd = -1, -1
            if spare is not None and spare.placed and not usable(spare):
                # A call stopped it (SIGSTOP: calls share its uid): a
                # stopped spare would hang the call. Let it go.
                spare.drop(poller, kill=True)
                spare = None
            # `call LEAF`: the spare runs only the call whose leaf it is in.
            # Another call (concurrent calls race for it) gets a fresh
            # child: a spare that ran a call in another exec's leaf would
            # be killed with that leaf's leftovers when that exec ends.
            # (Without cgroup leaves both words are a bare `placed SEQ` and
            # `call`.)
            mine = spare is not None and spare.placed and word == b" ".join([b"call"] + [spare.leaf] * bool(spare.leaf))
            if mine:
                try:
                    socket.send_fds(spare.sock, [b"call"], fds)
                    pid, pfd = spare.pid, spare.pidfd
                    spare.sock.close()
                except OSError:
                    spare.drop(poller)  # it died (a call may kill it): fork afresh
                spare = None
            if pid < 0:
                try:
                    pid, pfd = fork_call(fds)
                except OSError:
                    pass  # closing its status socket tells husk exec
                if pfd >= 0:
                    poller.register(pfd, select.POLLIN)
            for f in fds[:4] + fds[5:]:
                os.close(f)
            if pid < 0:
                os.close(fds[4])
            else:
                calls[pid] = (fds[4], pfd)
        reap()
        # The next spare is forked once no call runs: forking competes
        # with the call for the CPU (a fork of a zygote with numpy
        # imported takes ~0.6 ms), and a call has no use for it.
        if spare is None and not calls:
            spare = new_spare()


# ------------------------------------------------------------- session mode

def on_alarm(_sig, _frame):
    raise CallTimeout()


def python_session():
    g = fresh_main()
    saved = (os.dup(1), os.dup(2))
    signal.signal(signal.SIGALRM, on_alarm)
    me = os.getpid()
    current = []  # the call's status socket, while it runs

    def forked_by_the_call():
        # A process the call forks (os.fork, multiprocessing) is the
        # call's, in its leaf: it holds neither the control socket (it
        # would take the next calls) nor the call's status channel (husk
        # exec would wait for it to close).
        for s in [ctl] + current:
            try:
                s.close()
            except OSError:
                pass
        first_to_go()

    def reap(*_):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    os.register_at_fork(after_in_child=forked_by_the_call)
    say({"ok": True, "pid": me})
    while True:
        # Between calls the session reaps what its calls forked (husk exec
        # kills them with the call's leaf): zombies would hold pids. Not
        # during a call, whose code may wait for its children itself.
        signal.signal(signal.SIGCHLD, reap)
        reap()
        req, stdin, stdout, stderr, status, results = recv_call()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        st = joined(status)
        # husk exec moves the session into the call's leaf first: what the
        # call forks is born there, and killed with it when the call ends.
        if not released(st):
            for fd in (req, stdin, stdout, stderr, results):
                os.close(fd)
            st.close()
            continue
        current[:] = [st]
        head, code = read_request(req)
        for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=-1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        timeout = head.get("timeout_ms")
        interrupted = False
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, timeout / 1000.0)
        out = Results(results)
        try:
            code_rc = run_python(code, g, out)
        except CallTimeout:
            code_rc = 124
            interrupted = True
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            out.close()
        if os.getpid() != me:
            # A child the call forked, whose code ended: it is not the
            # session and must not go on as one.
            os._exit(code_rc)
        current.clear()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if interrupted:
            try:
                os.write(2, b"husk: the call ran past its timeout and was interrupted; the session's state is kept\n")
            except OSError:
                pass
        for target, fd in ((1, saved[0]), (2, saved[1])):
            os.dup2(fd, target)
        os.dup2(null, 0)
        try:
            if interrupted:
                st.send(rec(INTERRUPTED, 0))
            st.send(rec(EXITED, code_rc))
        except OSError:
            pass
        st.close()


def bash_session():
    work = "/tmp/.husk-session-%d" % os.getpid()
    os.makedirs(work, mode=0o700, exist_ok=True)
    script = os.path.join(work, "call.sh")

    def start():
        r_out, w_out = os.pipe()
        r_err, w_err = os.pipe()
        r_in, w_in = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.dup2(r_in, 0)
            os.dup2(w_out, 1)
            os.dup2(w_err, 2)
            os.closerange(3, 1024)
            import ctypes
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the shim
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            first_to_go()
            os.execvp("bash", ["bash", "--noprofile", "--norc"])
        for f in (r_in, w_out, w_err):
            os.close(f)
        return pid, w_in, r_out, r_err

    bash = start()
    say({"ok": True, "pid": os.getpid()})
    while True:
        req, stdin, stdout, stderr, status, results = recv_call()
        os.close(results)  # a bash call has no results but its output
        # The shell is the call's process: husk exec moves it into the
        # call's leaf, so what the call starts is killed with the leaf.
        st = joined(status, bash[0])
        if not released(st):
            for fd in (req, stdin, stdout, stderr):
                os.close(fd)
            st.close()
            continue
        head, code = read_request(req)
        with open(script, "wb") as f:
            f.write(code)
        token = "__husk_%s__" % secrets.token_hex(16)
        mark = ("\n" + token).encode()
        pid, w_in, r_out, r_err = bash
        # The call's code is sourced from a file with stdin from /dev/null:
        # it cannot read the shell's own command stream. Each stream ends
        # with the marker (stdout's carries the status).
        line = '. %s </dev/null; printf "\\n%s%%d\\n" $? ; printf "\\n%s\\n" >&2\n' % (script, token, token)
        os.close(stdin)
        try:
            os.write(w_in, line.encode())
        except OSError:
            pass
        timeout = head.get("timeout_ms")
        deadline = time.monotonic() + timeout / 1000.0 if timeout else None
        pending = {r_out: b"", r_err: b""}
        sinks = {r_out: stdout, r_err: stderr}
        open_ = {r_out, r_err}
        rc, interrupted, died = None, False, False

        def emit(f, data):
            if data:
                try:
                    os.write(sinks[f], data)
                except OSError:
                    pass

        while open_ and not died:
            wait = None if deadline is None else max(0, deadline - time.monotonic())
            ready, _, _ = select.select(list(open_), [], [], wait)
            if not ready:
                interrupted = True
                break
            for f in ready:
                b = os.read(f, 65536)
                if not b:
                    died = True
                    emit(f, pending[f])
                    pending[f] = b""
                    open_.discard(f)
                    continue
                buf = pending[f] + b
                i = buf.find(mark)
                if i >= 0:
                    if f == r_out:
                        digits = buf[i + len(mark):].split(b"\n", 1)[0]
                        rc = int(digits) if digits.isdigit() else 1
                    emit(f, buf[:i])
                    pending[f] = b""
                    open_.discard(f)
                else:
                    # Hold back what could be the marker's beginning.
                    cut = max(0, len(buf) - len(mark))
                    emit(f, buf[:cut])
                    pending[f] = buf[cut:]
        if died and not interrupted:
            for f in list(open_):
                emit(f, pending[f])
        restarted = False
        if interrupted or died:
            # A shell past its timeout (or gone: `exit`) cannot be trusted
            # to be between commands: end its whole session, start afresh.
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _, wst = os.waitpid(pid, 0)
            if died and not interrupted:
                rc = os.WEXITSTATUS(wst) if os.WIFEXITED(wst) else 128 + os.WTERMSIG(wst)
            for f in (w_in, r_out, r_err):
                os.close(f)
            bash = start()
            restarted = True
        if interrupted:
            rc = 124
            try:
                os.write(stderr, b"husk: the call ran past its timeout and was interrupted; the bash session was restarted (cwd and exports are reset)\n")
            except OSError:
                pass
        os.close(stdout)
        os.close(stderr)
        try:
            if interrupted:
                st.send(rec(INTERRUPTED, 1 if restarted else 0))
            elif restarted:
                st.send(rec(INTERRUPTED, 2))
            st.send(rec(EXITED, rc if rc is not None else 1))
        except OSError:
            pass
        st.close()


if MODE == "fork":
    zygote()
elif LANG == "python":
    python_session()
else:
    bash_session()
