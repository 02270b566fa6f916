"""Small pieces both transports share: durations, the code-by-stdin argv,
bounded capture, the NDJSON exec stream, and file operations over tar."""

from __future__ import annotations

import base64
import json
import posixpath
import re
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .errors import FileError, HuskError, SandboxBusy, SandboxNotFound, TransientError, from_error_json

# Code goes on stdin, never in argv: argv is bounded (E2BIG at ~256 KB) and
# visible to every process on the host through ps.
CODE_ARGV = {
    "python": ["python3", "-"],
    "python3": ["python3", "-"],
    "bash": ["bash", "-s"],
    "sh": ["sh", "-s"],
}

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def seconds(d: Union[int, float, str]) -> float:
    """A duration in husk's syntax ("500ms", "30s", "10m") or in seconds."""
    if isinstance(d, (int, float)):
        return float(d)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-z]*)\s*", d)
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"not a duration: {d!r} (use e.g. 500ms, 30s, 10m, 1h, or a number of seconds)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def duration_arg(d: Union[int, float, str]) -> str:
    """A duration as husk's flags take it."""
    if isinstance(d, str):
        seconds(d)  # refuse garbage here, with the value named
        return d.strip()
    if d <= 0:
        raise ValueError(f"a duration must be positive, not {d!r}")
    return f"{int(round(float(d) * 1000))}ms"


class Capture:
    """Bounded head+tail capture of a stream, as husk's own (src/capture.rs):
    the first half of the limit and the last half are kept, the total is
    counted, and a cut is marked in the text."""

    def __init__(self, limit: int) -> None:
        self.head_cap = (limit + 1) // 2
        self.tail_cap = limit - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def to_json(self) -> Dict[str, Any]:
        head, tail = bytes(self.head), bytes(self.tail)
        truncated = self.total > len(head) + len(tail)
        if truncated:
            # Cut on character boundaries, as husk does.
            try:
                head.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.end == len(head):
                    head = head[: e.start]
            skip = 0
            while skip < 3 and skip < len(tail) and (tail[skip] & 0xC0) == 0x80:
                skip += 1
            tail = tail[skip:]
            dropped = self.total - len(head) - len(tail)
            data = head + f"\n[husk: {dropped} bytes truncated]\n".encode() + tail
        else:
            data = head + tail
        try:
            return {"text": data.decode("utf-8"), "base64": None, "bytes": self.total, "truncated": truncated}
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
            return {"text": text, "base64": base64.b64encode(data).decode(), "bytes": self.total, "truncated": truncated}


def one_file_tar(name: str, data: bytes, mode: Any) -> bytes:
    """A tar holding one regular file."""
    import io
    import tarfile
    import time

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode if mode is not None else 0o644
        info.mtime = int(time.time())
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def safe_extract(tar_bytes: bytes, dest: str) -> None:
    """Extracts a tar that came out of a sandbox: what a sandbox made is
    hostile, so no member may land outside dest (absolute names, '..',
    links pointing out), and no devices, fifos or set-id bits."""
    import io
    import os
    import tarfile

    root = os.path.realpath(dest)

    def inside(p: str) -> bool:
        full = os.path.realpath(os.path.join(root, p))
        return full == root or full.startswith(root + os.sep)

    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as t:
        members = []
        for m in t.getmembers():
            if m.name.startswith("/") or not inside(m.name):
                raise FileError(f"refusing tar member {m.name!r}: it would land outside {dest}")
            if m.issym() and (m.linkname.startswith("/") or not inside(os.path.join(os.path.dirname(m.name), m.linkname))):
                raise FileError(f"refusing symlink {m.name!r} -> {m.linkname!r}: it points outside {dest}")
            if m.islnk() and not inside(m.linkname):
                raise FileError(f"refusing hard link {m.name!r} -> {m.linkname!r}: outside {dest}")
            if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                continue
            m.mode &= 0o777
            m.uid = m.gid = os.getuid()
            m.uname = m.gname = ""
            members.append(m)
        if hasattr(tarfile, "data_filter"):
            t.extractall(root, members=members, filter="data")
        else:
            t.extractall(root, members=members)


def ndjson_events(lines: Iterable[bytes], no_verdict: Callable[[], str]) -> Iterator[Dict[str, Any]]:
    """The events of ``husk exec --json-stream`` (or serve's streamed
    exec), one JSON object a line; a failed start raises with its verdict,
    and a stream without a verdict raises with ``no_verdict()``."""
    final = None
    for line in lines:
        line = line.strip()
        if not line:
            continue
        ev = json.loads(line)
        if "verdict" in ev:
            final = ev["verdict"]
            checked(final)
        yield ev
    if final is None:
        raise HuskError(no_verdict())


def checked(verdict: Dict[str, Any]) -> Dict[str, Any]:
    """A verdict, or the exception it carries when husk could not run it."""
    if verdict.get("termination") == "setup_failed":
        raise from_error_json(verdict)
    return verdict


def split_remote(path: str) -> Tuple[str, str]:
    """A sandbox path's directory and last name ("/a/b" -> "/a", "b")."""
    d, base = posixpath.split(path.rstrip("/") or "/")
    if not base or base in (".", ".."):
        raise FileError(f"{path}: name a file or directory, not {base or '/'!r}")
    return d or "/", base


def file_op(what: str, path: str, op: Callable[[], Any]) -> Any:
    """Runs a file operation; its failure as a FileError naming the path
    (a sandbox that is gone or busy keeps its own exception)."""
    try:
        return op()
    except (SandboxNotFound, SandboxBusy, TransientError):
        raise
    except FileError as e:
        if path in str(e):
            raise
        raise FileError(f"{what} {path}: {e}", verdict=e.verdict, step=e.step, errno=e.errno, hint=e.hint) from None
    except HuskError as e:
        raise FileError(f"{what} {path}: {e}", verdict=e.verdict, step=e.step, errno=e.errno, hint=e.hint) from None


def single_file_of(tar_bytes: bytes, path: str) -> bytes:
    """The one regular file a tar stream of ``path`` holds."""
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as t:
        m = t.next()
        if m is None:
            raise FileError(f"read {path}: the sandbox sent nothing")
        if m.isdir():
            raise FileError(f"read {path}: is a directory; use download() for a tree")
        if not m.isfile():
            raise FileError(f"read {path}: not a regular file")
        f = t.extractfile(m)
        assert f is not None
        return f.read()


class TarFiles:
    """write_file / read_file / put_tar / get_tar for a transport whose
    primitives are ``_put_tar(sid, dir, tar)`` (unpacked into the existing
    directory ``dir``) and ``_get_tar(sid, path)`` (``path`` as a tar)."""

    def _put_tar(self, sid: str, path: str, tar: bytes) -> None:
        raise NotImplementedError

    def _get_tar(self, sid: str, path: str) -> bytes:
        raise NotImplementedError

    def write_file(self, sid: str, path: str, data: bytes, mode: Optional[int] = None) -> int:
        d, base = split_remote(path)
        file_op("write", path, lambda: self._put_tar(sid, d, one_file_tar(base, data, mode)))
        return len(data)

    def read_file(self, sid: str, path: str) -> bytes:
        return single_file_of(file_op("read", path, lambda: self._get_tar(sid, path)), path)

    def put_tar(self, sid: str, path: str, tar: bytes) -> None:
        file_op("upload", path, lambda: self._put_tar(sid, path, tar))

    def get_tar(self, sid: str, path: str) -> bytes:
        return file_op("download", path, lambda: self._get_tar(sid, path))
