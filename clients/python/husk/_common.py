"""Small pieces both transports share: durations, the code-by-stdin argv,
bounded capture, directory listings."""

from __future__ import annotations

import base64
import re
import os
from typing import Any, Dict, List, Optional, Union

from .errors import FileError

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


def list_script() -> str:
    """sh that lists "$1" one entry a line: size/mode/type/name ('/' cannot
    occur in a name). Works with GNU and busybox stat."""
    return (
        'cd "$1" || exit 1\n'
        "for f in * .[!.]* ..?*; do\n"
        '  [ -e "$f" ] || [ -L "$f" ] || continue\n'
        "  stat -c '%s/%a/%F/%n' -- \"$f\" || exit 1\n"
        "done\n"
    )


def _kind(stat_type: str) -> str:
    if stat_type.startswith("regular"):
        return "file"
    return {"directory": "dir", "symbolic link": "symlink"}.get(stat_type, "other")


def parse_listing(out: bytes) -> List[Dict[str, Any]]:
    entries = []
    for line in out.decode("utf-8", errors="surrogateescape").splitlines():
        size, mode, kind, name = line.split("/", 3)
        entries.append({"name": name, "type": _kind(kind), "size": int(size), "mode": int(mode, 8)})
    return sorted(entries, key=lambda e: e["name"])


def file_error_from(v: Dict[str, Any], what: str, path: str) -> FileError:
    from .types import Output

    msg = Output.from_json(v.get("stderr")).text.strip()
    if not msg:
        msg = "no such file" if what == "read" else f"exit {v.get('exit_code')}"
    return FileError(f"{what} {path}: {msg}", verdict=v, step=what)


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


# What a captured file read may hold (husk's ceiling for --output-limit).
MAX_CAPTURE = 16 * 1024 * 1024
READ_SCRIPT = 'if [ -d "$1" ]; then echo "$1: is a directory" >&2; exit 1; fi; exec cat -- "$1"'


class ExecFiles:
    """File operations as execs of sh, cat, stat and tar inside the
    sandbox, for a transport that has ``exec(sid, opts)``: the CLI, and
    husk serve while its files endpoint is not served."""

    def _sh(self, sid: str, script: str, args: List[str], stdin: Optional[bytes] = None, limit: Optional[int] = None):
        opts: Dict[str, Any] = {"output_limit": limit} if limit else {}
        return self.exec(sid, dict(opts, argv=["sh", "-c", script, "sh"] + args, stdin=stdin))

    def _checked(self, v: Dict[str, Any], what: str, path: str) -> Dict[str, Any]:
        if v.get("termination") != "exited" or v.get("exit_code") != 0:
            raise file_error_from(v, what, path)
        return v

    def write_file(self, sid: str, path: str, data: bytes, mode: Optional[int] = None) -> int:
        script = 'cat > "$1" || exit 1; [ -z "$2" ] || chmod "$2" "$1"'
        self._checked(self._sh(sid, script, [path, "%o" % mode if mode is not None else ""], stdin=data), "write", path)
        return len(data)

    def read_file(self, sid: str, path: str) -> bytes:
        v = self._checked(self._sh(sid, READ_SCRIPT, [path], limit=MAX_CAPTURE), "read", path)
        from .types import Output

        out = Output.from_json(v.get("stdout"))
        if out.truncated:
            raise FileError(f"{path} is larger than {MAX_CAPTURE} bytes; use download() for large files")
        return out.data

    def list_files(self, sid: str, path: str) -> List[Dict[str, Any]]:
        v = self._checked(self._sh(sid, list_script(), [path], limit=MAX_CAPTURE), "list", path)
        from .types import Output

        return parse_listing(Output.from_json(v.get("stdout")).data)

    def put_tar(self, sid: str, path: str, tar: bytes) -> None:
        self._checked(self._sh(sid, 'mkdir -p "$1" && tar -x -f - -C "$1"', [path], stdin=tar), "upload", path)

    def get_tar(self, sid: str, path: str) -> bytes:
        d, base = os.path.split(path.rstrip("/") or "/")
        v = self._checked(
            self._sh(sid, 'tar -c -f - -C "$1" "$2"', [d or "/", base or "."], limit=MAX_CAPTURE), "download", path
        )
        from .types import Output

        out = Output.from_json(v.get("stdout"))
        if out.truncated:
            raise FileError(f"{path} is larger than {MAX_CAPTURE} bytes as a tar")
        return out.data
