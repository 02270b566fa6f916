"""Exceptions. Every one raised for a husk failure carries what husk said:
``verdict`` (the raw verdict-shaped JSON, when there was one), ``step``,
``errno``, ``hint``."""

from __future__ import annotations

from typing import Any, Dict, Optional, Union


class HuskError(Exception):
    """husk could not do what was asked (exit 125, HTTP error, bad input)."""

    def __init__(
        self,
        message: str,
        *,
        verdict: Optional[Dict[str, Any]] = None,
        step: Optional[str] = None,
        errno: Union[str, int, None] = None,
        hint: Optional[str] = None,
        status: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.verdict = verdict
        self.step = step
        self.errno = errno
        self.hint = hint
        self.status = status

    def __str__(self) -> str:
        s = self.message
        if self.step:
            s = f"{s} (step: {self.step})"
        if self.hint:
            s = f"{s}; hint: {self.hint}"
        return s


class SandboxNotFound(HuskError):
    """No live sandbox by that id or name (it may have expired or been removed)."""


class SandboxBusy(HuskError):
    """Another exec runs in the sandbox (create it with concurrent=True, or wait)."""


class NameTaken(HuskError):
    """``create(name=...)``: another live sandbox has that name (serve's 409
    step ``sandbox``). Not ``SandboxBusy``: waiting does not help."""


class TransientError(HuskError):
    """A failure worth retrying (busy host, resources briefly short, server
    overloaded). ``Sandbox.create`` retries these with bounded backoff."""


class CommandError(HuskError):
    """``exec(..., check=True)``: the command did not exit 0. ``result`` is its
    ``ExecResult``."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message, verdict=getattr(result, "raw", None))
        self.result = result


class CommandTimeout(CommandError):
    """``exec(..., check=True)``: the command ran past its timeout (exit 124)."""


class NotReady(HuskError):
    """``create(ready_cmd=...)``: the readiness check failed or timed out, and
    the sandbox was destroyed. ``check`` is the check's own verdict (an
    ``ExecResult``: exit code, output), ``sandbox_id`` the sandbox that went."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        verdict = self.verdict or {}
        self.sandbox_id = verdict.get("sandbox_id")
        raw = verdict.get("ready_check")
        self.check = None
        if isinstance(raw, dict):
            from .types import ExecResult

            self.check = ExecResult.from_json(raw)


class FileError(HuskError):
    """A file operation failed inside the sandbox (no such file, not a
    directory, permission, a read-only path)."""


# errnos that say "try again" rather than "this cannot work". husk names
# them symbolically ("EAGAIN", as verdicts do); numbers are accepted too.
_TRANSIENT_ERRNOS = {"EINTR", "EAGAIN", "EWOULDBLOCK", "ENOMEM", "EBUSY", "EMFILE", "ENFILE", "ENOBUFS"}


def is_transient_errno(errno: Any) -> bool:
    """Whether husk's ``errno`` (a symbolic name, or a number) says the
    failure may pass if tried again."""
    if isinstance(errno, bool) or errno is None:
        return False
    if isinstance(errno, int):
        import errno as _errno

        errno = _errno.errorcode.get(errno)
    return str(errno).upper() in _TRANSIENT_ERRNOS


def from_error_json(obj: Dict[str, Any], status: Optional[int] = None) -> HuskError:
    """The exception for a verdict-shaped error (``{"termination":
    "setup_failed", "error": {step, errno, message, hint}}``), or the
    older ``{"error": msg, "step", "hint"}`` shape."""
    err = obj.get("error")
    if isinstance(err, dict):
        step, errno, message, hint = err.get("step"), err.get("errno"), err.get("message", ""), err.get("hint")
    else:
        step, errno, message, hint = obj.get("step"), obj.get("errno"), str(err or obj), obj.get("hint")
    message = str(message or "husk failed")
    kw: Dict[str, Any] = dict(verdict=obj, step=step, errno=errno, hint=hint, status=status)
    if status == 429:  # --max-concurrent requests in progress (step "busy" too)
        return TransientError(message, **kw)
    # 409 is also a taken name (step "sandbox"): only step "busy" is busy.
    if step == "busy" or (status == 409 and step is None):
        return SandboxBusy(message, **kw)
    if "is taken by sandbox" in message and step in ("sandbox", "lookup", None):
        return NameTaken(message, **kw)
    if step == "copy":
        return FileError(message, **kw)
    if step == "ready_check":
        return NotReady(message, **kw)
    gone = any(w in message for w in ("no sandbox", " expired at ", " was removed at ", " failed at "))
    if status == 404 or step == "lookup" or (step == "sandbox" and gone):
        return SandboxNotFound(message, **kw)
    if status in (429, 503) or is_transient_errno(errno):
        return TransientError(message, **kw)
    return HuskError(message, **kw)
