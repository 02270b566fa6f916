"""Typed views of husk's JSON: the verdict of an exec, a sandbox's record,
output events. Each keeps the raw object in ``.raw`` so nothing husk says is
lost when a field is not mirrored here."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


@dataclass(frozen=True)
class Output:
    """One captured stream (stdout or stderr) of an exec: bounded head+tail.

    ``data`` is the captured bytes; ``truncated`` says the middle was cut
    (``bytes`` is then the total the command wrote, more than ``len(data)``).
    """

    data: bytes
    bytes: int
    truncated: bool

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @classmethod
    def from_json(cls, obj: Optional[Dict[str, Any]]) -> "Output":
        if not obj:
            return cls(b"", 0, False)
        if obj.get("base64") is not None:
            data = base64.b64decode(obj["base64"])
        else:
            data = (obj.get("text") or "").encode("utf-8")
        return cls(data, int(obj.get("bytes", len(data))), bool(obj.get("truncated", False)))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ErrorInfo:
    """Why husk itself failed: the setup step, errno, message and a hint."""

    step: Optional[str]
    errno: Optional[int]
    message: str
    hint: Optional[str]

    @classmethod
    def from_json(cls, obj: Any) -> Optional["ErrorInfo"]:
        if obj is None:
            return None
        if isinstance(obj, str):
            return cls(None, None, obj, None)
        return cls(obj.get("step"), obj.get("errno"), str(obj.get("message", "")), obj.get("hint"))


@dataclass(frozen=True)
class Result:
    """One notebook-style result of ``run_code`` in a warm python sandbox:
    the value of the code's last expression (``is_main_result``), or what
    it passed to ``display()``, or an open matplotlib figure. ``data`` is
    its MIME bundle: ``text/plain`` always; ``text/html``, ``image/png``
    (base64), ``image/svg+xml``, ``application/json``, ... when the object
    offers them (docs/warm.md, Results)."""

    data: Dict[str, Any]
    is_main_result: bool = False

    @property
    def text(self) -> Optional[str]:
        return self.data.get("text/plain")

    @property
    def html(self) -> Optional[str]:
        return self.data.get("text/html")

    @property
    def png(self) -> Optional[bytes]:
        b = self.data.get("image/png")
        return base64.b64decode(b) if isinstance(b, str) else None

    @property
    def svg(self) -> Optional[str]:
        return self.data.get("image/svg+xml")

    @property
    def json(self) -> Any:
        return self.data.get("application/json")

    def formats(self) -> List[str]:
        return sorted(self.data)

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Result":
        return cls(dict(obj.get("data") or {}), bool(obj.get("is_main_result", False)))


@dataclass(frozen=True)
class CodeError:
    """The exception that ended ``run_code``'s code: its class name, its
    value (``str`` of it) and the traceback as python prints it (without
    husk's own frames)."""

    name: str
    value: str
    traceback: str

    @classmethod
    def from_json(cls, obj: Any) -> Optional["CodeError"]:
        if not isinstance(obj, dict):
            return None
        return cls(str(obj.get("name", "")), str(obj.get("value", "")), str(obj.get("traceback", "")))


@dataclass(frozen=True)
class ExecResult:
    """The verdict of one exec (``husk exec --json``), typed.

    ``termination`` is husk's closed cause: exited, signaled, wall_timeout,
    oom_killed, setup_failed, ... ``exit_code`` follows husk's contract
    (the command's code, 128+N for signal N, 124 timeout, 125 husk failed).
    """

    exit_code: int
    termination: str
    stdout: Output
    stderr: Output
    signal: Optional[int] = None
    signal_name: Optional[str] = None
    duration_ms: float = 0.0
    error: Optional[ErrorInfo] = None
    limits: Any = None
    resources: Any = None
    isolation: Any = None
    id: str = ""
    sandbox_id: Optional[str] = None
    #: ``--network allow=``: the egress proxy's accounting (for an exec, the
    #: sandbox's so far): destinations, denied attempts, totals.
    network: Any = None
    #: ``run_code``: how the code ran: ``{"mode": "fork"|"session"|"cold",
    #: "interrupted": bool, "restarted": bool, "restart_cause": ...,
    #: "placed_ahead": bool}`` (docs/warm.md); None for a command.
    warm: Any = None
    #: ``run_code`` in a warm python sandbox: the results (last expression,
    #: display() calls, figures), in order.
    results: List[Result] = field(default_factory=list)
    #: ``run_code`` in a warm python sandbox: the exception that ended the
    #: code (None when none).
    exception: Optional[CodeError] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "ExecResult":
        return cls(
            exit_code=int(v.get("exit_code", 125) if v.get("exit_code") is not None else 125),
            termination=str(v.get("termination", "setup_failed")),
            stdout=Output.from_json(v.get("stdout")),
            stderr=Output.from_json(v.get("stderr")),
            signal=v.get("signal"),
            signal_name=v.get("signal_name"),
            duration_ms=float(v.get("duration_ms") or 0.0),
            error=ErrorInfo.from_json(v.get("error")),
            limits=v.get("limits"),
            resources=v.get("resources"),
            isolation=v.get("isolation"),
            id=str(v.get("id") or ""),
            sandbox_id=v.get("sandbox_id"),
            network=v.get("network"),
            warm=v.get("warm"),
            results=[Result.from_json(r) for r in v.get("results") or [] if isinstance(r, dict)],
            exception=CodeError.from_json(v.get("exception")),
            raw=v,
        )

    @property
    def text(self) -> Optional[str]:
        """The text of the main result (the last expression's value), as a
        notebook's ``Out`` shows it; None when the code ended in a
        statement."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @property
    def ok(self) -> bool:
        return self.termination == "exited" and self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        return self.termination == "wall_timeout"

    @property
    def truncated(self) -> bool:
        return self.stdout.truncated or self.stderr.truncated


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox's record as ``husk create --json`` / ``husk inspect`` give it."""

    id: str
    name: Optional[str]
    state: Optional[str]
    backend: Optional[str]
    ttl_ms: Optional[int]
    lease_remaining_ms: Optional[int]
    workdir: Optional[str]
    labels: Dict[str, str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # A claim from a pool: True when a READY member was handed over, False
    # when the pool was empty and the sandbox was created cold; None otherwise.
    pooled: Optional[bool] = None
    #: ``publish=``: the ports as bound, ``[{"host_ip", "host_port",
    #: "port"}]`` (HOSTPORT 0: the one picked); [] without publish.
    published: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=str(r["id"]),
            name=r.get("name"),
            state=r.get("state"),
            backend=r.get("backend"),
            ttl_ms=r.get("ttl_ms"),
            lease_remaining_ms=r.get("lease_remaining_ms"),
            workdir=r.get("workdir"),
            labels=dict(r.get("labels") or {}),
            raw=r,
            pooled=r.get("pooled"),
            published=list(r.get("published") or []),
        )


@dataclass(frozen=True)
class OutputChunk:
    """One piece of output as the command wrote it (``Sandbox.stream``)."""

    stream: str  # "stdout" | "stderr"
    seq: int
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class FileEntry:
    """One entry of ``Sandbox.list_files``: type is file, dir, symlink or other."""

    name: str
    type: str
    size: int
    mode: int


StreamEvent = Union[OutputChunk, ExecResult]
Argv = Union[str, List[str]]
