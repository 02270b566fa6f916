"""``Sandbox``: one live husk sandbox, reached through ``husk serve`` when
one is running and through the husk CLI otherwise, with the same results."""

from __future__ import annotations

import io
import os
import random
import shlex
import tarfile
import threading
import time
from typing import Any, Dict, Generator, List, Optional, Union

from ._cli import CliTransport
from ._common import safe_extract, seconds, split_remote
from ._http import HttpTransport, default_socket
from .errors import CommandError, CommandTimeout, HuskError, SandboxNotFound, TransientError
from .types import Argv, ExecResult, FileEntry, OutputChunk, SandboxInfo, StreamEvent

Transport = Union[CliTransport, HttpTransport]

#: ``run_code``'s timeout when none is given, as E2B's code interpreter
#: has it: code that never ends must not hold the sandbox forever.
RUN_CODE_TIMEOUT = "300s"


def open_transport(
    transport: str = "auto",
    *,
    socket: Optional[str] = None,
    url: Optional[str] = None,
    token: Optional[str] = None,
    husk_bin: Optional[str] = None,
    state_dir: Optional[str] = None,
) -> Transport:
    """Chooses how to reach husk. ``"auto"``: ``husk serve`` when its socket
    (``socket``, HUSK_SOCKET, or ``<state dir>/api.sock``) or ``url``
    answers /v1/health, else the CLI. ``"serve"`` or ``"cli"`` force one."""
    if transport not in ("auto", "serve", "cli"):
        raise ValueError(f"transport must be auto, serve or cli, not {transport!r}")
    if transport in ("auto", "serve"):
        if socket is None and url is None and state_dir is not None and not os.environ.get("HUSK_SOCKET"):
            socket = os.path.join(state_dir, "api.sock")
        http = HttpTransport(socket_path=socket, url=url, token=token)
        if transport == "serve":
            http.health()
            return http
        if url or (http.socket_path and os.path.exists(http.socket_path)):
            try:
                http.health()
                return http
            except HuskError:
                pass
    return CliTransport(husk_bin=husk_bin, state_dir=state_dir)


def connect(*args: Any, **kw: Any) -> Transport:
    """Deprecated name of ``open_transport`` (it returns a transport, not a
    sandbox; ``Sandbox.connect(id)`` is the E2B-style handle on a sandbox)."""
    import warnings

    warnings.warn(
        "husk.connect() returns a transport, not a sandbox: use husk.open_transport(), "
        "or Sandbox.connect(sandbox_id) for a sandbox",
        DeprecationWarning,
        stacklevel=2,
    )
    return open_transport(*args, **kw)


class _ClassOrInstance:
    """A method that works on the class with an id (``Sandbox.kill(id)``)
    and on an instance (``sb.kill()``), as E2B's SDK has it."""

    def __init__(self, on_class: Any, on_instance: Any) -> None:
        self.on_class = on_class
        self.on_instance = on_instance
        self.__doc__ = on_class.__doc__

    def __get__(self, obj: Any, cls: Any) -> Any:
        import functools

        if obj is None:
            return functools.partial(self.on_class, cls)
        return functools.partial(self.on_instance, obj)


def _transport_of(transport: Union[str, "Transport"], connect_kw: Dict[str, Any]) -> "Transport":
    return transport if not isinstance(transport, str) else open_transport(transport, **connect_kw)


class Sandbox:
    """A live sandbox. Use as a context manager, or call ``close()``::

        with Sandbox.create(image="python", memory="512M", ttl="10m") as sb:
            r = sb.run_code("print(6 * 7)")
            print(r.stdout.text, r.exit_code)
    """

    def __init__(self, transport: Transport, info: SandboxInfo, heartbeat: Optional[float] = None) -> None:
        self._t = transport
        self.info = info
        self.id = info.id
        self._closed = False
        self._stop = threading.Event()
        self._hb: Optional[threading.Thread] = None
        self.heartbeat_error: Optional[BaseException] = None
        if heartbeat:
            self._hb = threading.Thread(target=self._heartbeat, args=(heartbeat,), daemon=True, name=f"husk-renew-{self.id}")
            self._hb.start()

    @property
    def transport(self) -> str:
        """"serve" or "cli"."""
        return self._t.name

    # ------------------------------------------------------------ creation --
    @classmethod
    def create(
        cls,
        image: Optional[str] = None,
        *,
        rootfs: Optional[str] = None,
        memory: Optional[str] = None,
        cpus: Optional[float] = None,
        pids: Optional[int] = None,
        network: Optional[str] = None,
        allow_hosts: Optional[List[str]] = None,
        add_hosts: Optional[Dict[str, str]] = None,
        egress_bytes: Union[str, int, None] = None,
        publish: Optional[List[str]] = None,
        ttl: Union[str, float, None] = "10m",
        max_lifetime: Union[str, float, None] = None,
        env: Optional[Dict[str, str]] = None,
        secret_env: Optional[Dict[str, str]] = None,
        labels: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        user: Optional[str] = None,
        runtime: Optional[str] = None,
        name: Optional[str] = None,
        concurrent: bool = False,
        ready_cmd: Optional[Argv] = None,
        ready_timeout: Union[str, float, None] = None,
        pool: Optional[str] = None,
        warm: Optional[str] = None,
        session: Optional[str] = None,
        heartbeat: Union[bool, float] = True,
        retries: int = 3,
        backoff: float = 0.2,
        transport: Union[str, Transport] = "auto",
        **connect_kw: Any,
    ) -> "Sandbox":
        """Creates a sandbox and returns once it is READY.

        ``pool``: claim a READY sandbox from this pool of ``husk serve``
        (``serve --pool NAME=...``) instead: the pool's spec is the
        sandbox's, so only ``name``, ``labels`` and ``ttl`` may go with it.
        It is this caller's alone and destroyed on ``close()``, never reused;
        ``info.pooled`` says whether a READY one was claimed (True) or the
        pool was empty and serve created it cold (False).

        ``warm="python[:MOD1,MOD2]"``: a warm interpreter waits in the
        sandbox with MODULES imported; each ``run_code`` forks a fresh child
        of it (clean state per call, the imports already done).
        ``session="python"|"bash"``: one interpreter whose state (variables
        and imports; cwd and exports) carries from one ``run_code`` to the
        next. At most one of them (docs/warm.md).

        ``heartbeat``: renew the lease in the background (every third of
        ``ttl``, or every N seconds when a number) until ``close()``, so an
        idle-but-alive client keeps its sandbox. Transient failures (busy
        host, resources briefly short, an overloaded server) are retried
        ``retries`` times with exponential backoff from ``backoff`` seconds.
        """
        t = _transport_of(transport, connect_kw)
        params: Dict[str, Any] = dict(
            image=image,
            rootfs=rootfs,
            memory=memory,
            cpus=cpus,
            pids=pids,
            network=network,
            allow_hosts=list(allow_hosts) if allow_hosts else None,
            add_hosts=dict(add_hosts) if add_hosts else None,
            egress_bytes=egress_bytes,
            publish=list(publish) if publish else None,
            ttl=ttl,
            max_lifetime=max_lifetime,
            env=env,
            secret_env=secret_env,
            labels=labels,
            workdir=workdir,
            user=user,
            runtime=runtime,
            name=name,
            concurrent=concurrent or None,
            ready_cmd=shlex.split(ready_cmd) if isinstance(ready_cmd, str) else ready_cmd,
            ready_timeout=ready_timeout,
            pool=pool,
            warm=warm,
            session=session,
        )
        params = {k: v for k, v in params.items() if v is not None}
        record = _retry(lambda: t.create(params), retries, backoff)
        info = SandboxInfo.from_json(record)
        interval: Optional[float] = None
        if heartbeat:
            if heartbeat is True:
                ttl_s = (info.ttl_ms / 1000.0) if info.ttl_ms else seconds(ttl or "10m")
                interval = max(ttl_s / 3.0, 0.05)
            else:
                interval = float(heartbeat)
        return cls(t, info, heartbeat=interval)

    @classmethod
    def attach(cls, sandbox_id: str, transport: Union[str, Transport] = "auto", **connect_kw: Any) -> "Sandbox":
        """A handle on an existing sandbox (no heartbeat; close() destroys it)."""
        t = _transport_of(transport, connect_kw)
        rec = t.inspect(sandbox_id)
        # serve answers a recently ended sandbox with its tombstone; the CLI
        # refuses it: either way there is nothing to attach to.
        if str(rec.get("state") or "").upper() == "DESTROYED":
            raise SandboxNotFound(str(rec.get("message") or f"sandbox {sandbox_id} has ended"), verdict=rec, step="lookup")
        return cls(t, SandboxInfo.from_json(rec))

    @classmethod
    def connect(cls, sandbox_id: str, transport: Union[str, Transport] = "auto", **connect_kw: Any) -> "Sandbox":
        """A handle on an existing sandbox by id, name or unique id prefix
        (E2B's ``Sandbox.connect``): ``attach``, and a paused sandbox is
        resumed, as E2B's connect does."""
        sb = cls.attach(sandbox_id, transport, **connect_kw)
        if str(sb.info.state or "").upper() == "PAUSED":
            sb.resume()
        return sb

    def _resume_class(cls, sandbox_id: str, transport: Union[str, Transport] = "auto", **connect_kw: Any) -> "Sandbox":  # type: ignore[misc]
        """``Sandbox.resume(id)``: resumes that sandbox (``husk resume``)
        and returns a handle on it. ``sb.resume()``: resumes this one.
        Resuming a sandbox that is not paused does nothing."""
        sb = cls.attach(sandbox_id, transport, **connect_kw)
        return sb._resume_instance()

    def _resume_instance(self) -> "Sandbox":
        self._t.resume(self.id)
        self.info = SandboxInfo.from_json(self._t.inspect(self.id))
        return self

    resume = _ClassOrInstance(_resume_class, _resume_instance)

    def pause(self, memory_reclaim: bool = False) -> str:
        """Freezes the sandbox until ``resume()`` (``husk pause``): its
        processes and memory stay, it uses no CPU, its lease does not run
        out; execs are refused until then. ``memory_reclaim``: also push its
        memory out (cgroup v2 only). Returns the id, as E2B's ``pause``."""
        self._t.pause(self.id, memory_reclaim)
        self.info = SandboxInfo.from_json(self._t.inspect(self.id))
        return self.id

    @classmethod
    def list(
        cls, labels: Optional[Dict[str, str]] = None, transport: Union[str, Transport] = "auto", **connect_kw: Any
    ) -> List[SandboxInfo]:
        """The live sandboxes (``husk ls``), only those with every label in
        ``labels`` when given."""
        t = _transport_of(transport, connect_kw)
        return [SandboxInfo.from_json(r) for r in t.list(labels)]

    def _kill_class(cls, sandbox_id: str, transport: Union[str, Transport] = "auto", **connect_kw: Any) -> bool:  # type: ignore[misc]
        """``Sandbox.kill(id)``: destroys that sandbox; False when there was
        none. ``sb.kill()``: ``close()``."""
        t = _transport_of(transport, connect_kw)
        try:
            t.destroy(sandbox_id)
        except SandboxNotFound:
            return False
        return True

    def _kill_instance(self) -> bool:
        was_open = not self._closed
        self.close()
        return was_open

    kill = _ClassOrInstance(_kill_class, _kill_instance)

    @property
    def sandbox_id(self) -> str:
        """The id (E2B's name for it)."""
        return self.id

    def is_running(self) -> bool:
        """Whether the sandbox is still there (not ended, not closed)."""
        if self._closed:
            return False
        try:
            rec = self._t.inspect(self.id)
        except SandboxNotFound:
            return False
        return str(rec.get("state") or "").upper() not in ("DESTROYED", "FAILED")

    # ---------------------------------------------------------------- exec --
    def exec(
        self,
        cmd: Argv,
        *,
        stdin: Union[bytes, str, None] = None,
        timeout: Union[str, float, None] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        output_limit: Union[int, str, None] = None,
        wait: bool = False,
        check: bool = False,
        secret_env: Optional[Dict[str, str]] = None,
    ) -> ExecResult:
        """Runs a command: an argv list, or a string run by ``sh -c``.
        Returns the verdict whatever the command's exit; raises ``HuskError``
        when husk itself failed (no such sandbox, busy, setup), and with
        ``check=True`` ``CommandError``/``CommandTimeout`` unless it exited 0.
        ``secret_env``: this command's secrets (in its environment, shown as
        ``[husk: secret NAME]`` in its output, never written down)."""
        opts = self._opts(cmd, stdin, timeout, env, cwd, user, output_limit, wait)
        if secret_env:
            opts["secret_env"] = {str(k): str(v) for k, v in secret_env.items()}
        r = ExecResult.from_json(self._t.exec(self.id, opts))
        return _checked(r, check)

    def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        *,
        timeout: Union[str, float, None] = RUN_CODE_TIMEOUT,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        output_limit: Union[int, str, None] = None,
        check: bool = False,
    ) -> ExecResult:
        """Runs source code (``husk exec --code``; never in argv: no size
        limit, not visible in the host's ps). In a sandbox created with
        ``warm`` or ``session`` its interpreter runs it (``language``, when
        given, must be that interpreter's); otherwise a fresh ``python3``,
        ``bash`` or ``sh`` does (language: python, the default, bash or sh).
        ``result.warm`` says how it ran (mode fork, session or cold); in a
        warm python sandbox ``result.results`` holds the value of its last
        expression (``result.text``), its display() calls and figures, and
        ``result.exception`` the exception that ended it.
        ``timeout``: 300 s unless given (None: none); past it the code is
        interrupted (``wall_timeout``). ``cwd``: where it runs;
        ``output_limit``: bytes captured per stream."""
        opts: Dict[str, Any] = dict(
            code=code, language=language, timeout=timeout, env=env, cwd=cwd, output_limit=output_limit
        )
        r = ExecResult.from_json(self._t.exec(self.id, {k: v for k, v in opts.items() if v is not None}))
        return _checked(r, check)

    def stream(
        self,
        cmd: Optional[Argv] = None,
        *,
        code: Optional[str] = None,
        language: Optional[str] = None,
        stdin: Union[bytes, str, None] = None,
        timeout: Union[str, float, None] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Generator[StreamEvent, None, None]:
        """Output as it happens: ``OutputChunk``s (stream, seq, data) in the
        order the command wrote them, then the ``ExecResult`` (the same
        verdict ``exec`` returns, with bounded head+tail capture)."""
        if (cmd is None) == (code is None):
            raise ValueError("give either cmd or code")
        if code is not None:
            if stdin is not None:
                raise ValueError("code is passed on stdin; stdin cannot be given with it")
            opts: Dict[str, Any] = dict(code=code, language=language, timeout=timeout, env=env, cwd=cwd, user=user)
            opts = {k: v for k, v in opts.items() if v is not None}
        else:
            opts = self._opts(cmd, stdin, timeout, env, cwd, user, None, False)
        for ev in self._t.exec_stream(self.id, opts):
            if "verdict" in ev:
                yield ExecResult.from_json(ev["verdict"])
                return
            yield _chunk(ev)

    @staticmethod
    def _opts(cmd, stdin, timeout, env, cwd, user, output_limit, wait) -> Dict[str, Any]:
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise ValueError("an empty command")
        opts: Dict[str, Any] = dict(
            argv=argv,
            stdin=stdin.encode() if isinstance(stdin, str) else stdin,
            timeout=timeout,
            env=env,
            cwd=cwd,
            user=user,
            output_limit=output_limit,
            wait=wait or None,
        )
        return {k: v for k, v in opts.items() if v is not None}

    # --------------------------------------------------------------- files --
    def write_file(self, path: str, data: Union[bytes, str], mode: Optional[int] = None) -> int:
        """Writes a file inside the sandbox (absolute path, or relative to
        its workdir); returns the bytes written."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        return self._t.write_file(self.id, self._abs(path), raw, mode)

    def read_file(self, path: str) -> bytes:
        return self._t.read_file(self.id, self._abs(path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_file(path).decode(encoding)

    def list_files(self, path: str = ".") -> List[FileEntry]:
        return [
            FileEntry(e["name"], e["type"], int(e.get("size", 0)), int(e.get("mode", 0)))
            for e in self._t.list_files(self.id, self._abs(path))
        ]

    def upload(self, local: str, remote: str) -> None:
        """Copies a host file or directory tree into the sandbox at ``remote``."""
        remote = self._abs(remote)
        if os.path.isdir(local):
            # The tree under remote's own name, unpacked into its parent
            # (which must exist); an existing remote directory is merged.
            parent, base = split_remote(remote)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as t:
                t.add(local, arcname=base)
            self._t.put_tar(self.id, parent, buf.getvalue())
        else:
            with open(local, "rb") as f:
                data = f.read()
            self._t.write_file(self.id, remote, data, os.stat(local).st_mode & 0o777)

    def download(self, remote: str, local: str) -> None:
        """Copies a file or directory tree out of the sandbox to ``local``.
        What the sandbox made is treated as hostile: nothing lands outside
        ``local``, links never point out of it, no devices or set-id bits."""
        remote = self._abs(remote)
        tar = self._t.get_tar(self.id, remote)
        import tempfile

        base = os.path.basename(remote.rstrip("/")) or "root"
        parent = os.path.dirname(os.path.abspath(local)) or "."
        with tempfile.TemporaryDirectory(dir=parent, prefix=".husk-download-") as tmp:
            safe_extract(tar, tmp)
            got = os.listdir(tmp)
            src = os.path.join(tmp, base) if got == [base] else tmp
            if os.path.isdir(src) and src == tmp:
                os.makedirs(local, exist_ok=True)
                for e in got:
                    os.replace(os.path.join(tmp, e), os.path.join(local, e))
            else:
                os.replace(src, local)

    def _abs(self, path: str) -> str:
        if path.startswith("/"):
            return path
        wd = self.info.workdir or "/"
        return os.path.normpath(os.path.join(wd, path))

    # ----------------------------------------------------------- lifecycle --
    def inspect(self) -> SandboxInfo:
        return SandboxInfo.from_json(self._t.inspect(self.id))

    def renew(self, ttl: Union[str, float, None] = None) -> Dict[str, Any]:
        return self._t.renew(self.id, ttl)

    def _heartbeat(self, interval: float) -> None:
        # A failed renewal is tried again soon, for as long as the sandbox
        # may exist: a serve restart (seconds of "connection refused") must
        # not turn into an expired sandbox a lease later. Only "there is no
        # such sandbox" ends it. heartbeat_error is the last failure, None
        # once a renewal succeeded again.
        wait = interval
        while not self._stop.wait(wait):
            try:
                self._t.renew(self.id, None)
            except SandboxNotFound as e:
                self.heartbeat_error = e
                return
            except HuskError as e:
                self.heartbeat_error = e
                wait = min(interval, 0.5)
                continue
            self.heartbeat_error = None
            wait = interval

    def close(self) -> None:
        """Destroys the sandbox (idempotent); returns when nothing of it remains."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._hb is not None:
            self._hb.join()
        try:
            self._t.destroy(self.id)
        except SandboxNotFound:
            pass

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, transport={self.transport!r})"


def _chunk(ev: Dict[str, Any]) -> OutputChunk:
    import base64

    if "bytes" in ev and isinstance(ev["bytes"], (bytes, bytearray)):
        data = bytes(ev["bytes"])
    elif ev.get("base64") is not None:
        data = base64.b64decode(ev["base64"])
    elif ev.get("data_b64") is not None:
        data = base64.b64decode(ev["data_b64"])
    else:
        data = str(ev.get("data", ev.get("text", ""))).encode("utf-8")
    return OutputChunk(str(ev.get("stream")), int(ev.get("seq", 0)), data)


def _checked(r: ExecResult, check: bool) -> ExecResult:
    if check and not r.ok:
        if r.timed_out:
            raise CommandTimeout(f"command timed out (exit {r.exit_code})", r)
        raise CommandError(f"command failed: {r.termination}, exit {r.exit_code}", r)
    return r


def _retry(op, retries: int, backoff: float):
    attempt = 0
    while True:
        try:
            return op()
        except TransientError:
            if attempt >= retries:
                raise
            # Full jitter: many clients retrying a busy host should not
            # arrive again together.
            time.sleep(random.uniform(0, backoff * (2**attempt)))
            attempt += 1


def default_socket_path() -> str:
    return default_socket()
