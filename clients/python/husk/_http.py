"""The serve transport: HTTP/1.1 + JSON to ``husk serve`` (docs/api.md), on
its unix socket (default) or loopback TCP with a bearer token."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional

from ._common import TarFiles, checked, file_op, ndjson_events
from .errors import HuskError, TransientError, from_error_json


def default_socket() -> str:
    """Where ``husk serve`` listens by default: ``<state dir>/api.sock``,
    with the state dir resolved as husk does (src/paths.rs)."""
    if os.environ.get("HUSK_SOCKET"):
        return os.environ["HUSK_SOCKET"]
    state = os.environ.get("HUSK_STATE_DIR")
    if not state:
        if os.geteuid() == 0:
            state = "/run/husk"
        elif os.environ.get("XDG_RUNTIME_DIR", "").startswith("/"):
            state = os.path.join(os.environ["XDG_RUNTIME_DIR"], "husk")
        else:
            data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
            state = os.path.join(data, "husk", "state")
    return os.path.join(state, "api.sock")


_DEFAULT: Any = object()


def _errno_name(e: BaseException) -> Optional[str]:
    import errno as _errno

    n = getattr(e, "errno", None)
    return _errno.errorcode.get(n) if isinstance(n, int) else None


def _not_idempotent(method: str, path: str) -> bool:
    """A create or an exec: sent twice, it is done twice."""
    return method == "POST" and (path == "/v1/sandboxes" or path.split("?")[0].endswith(("/exec", "/fork")))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class HttpTransport(TarFiles):
    name = "serve"

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = 300.0,
        exec_grace: float = 60.0,
    ) -> None:
        """``timeout``: how long any request but an exec waits for its
        answer. An exec waits its own ``timeout`` plus ``exec_grace``, and
        without a timeout as long as the command runs."""
        self.url = url
        self.exec_grace = exec_grace
        self.socket_path = None if url else (socket_path or default_socket())
        self.token = token
        self.timeout = timeout

    def _conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.url:
            u = urllib.parse.urlsplit(self.url)
            return http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout)
        assert self.socket_path is not None
        return _UnixConnection(self.socket_path, timeout)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Any = _DEFAULT,
        stream: bool = False,
    ):
        hdrs = dict(headers or {})
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        data: Optional[bytes]
        if body is None or isinstance(body, (bytes, bytearray)):
            data = bytes(body) if body is not None else None
        else:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        conn = self._conn(self.timeout if timeout is _DEFAULT else timeout)
        where = self.url or self.socket_path
        # Which stage failed decides what the caller may do: nothing reached
        # serve before the connection was made (retry freely); after the
        # request was sent serve may be doing it (an exec or a create is not
        # repeated blindly).
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise TransientError(
                f"husk serve at {where}: {e}", step="connect", errno=_errno_name(e)
            ) from e
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            timed_out = isinstance(e, socket.timeout)
            said = f"no answer within {conn.timeout:g}s" if timed_out else str(e) or type(e).__name__
            cls = HuskError if _not_idempotent(method, path) else TransientError
            msg = f"husk serve at {where}: {method} {path}: {said}"
            if cls is HuskError:
                msg += " (it may still be running: not retried)"
            raise cls(msg, step="response", errno="ETIMEDOUT" if timed_out else _errno_name(e)) from e
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = {"error": {"step": "http", "message": f"HTTP {resp.status}: {raw[:200]!r}"}}
            raise from_error_json(obj, status=resp.status)
        if stream:
            return conn, resp
        raw = resp.read()
        conn.close()
        return resp, raw

    def _json(self, method: str, path: str, body: Any = None, **kw) -> Dict[str, Any]:
        resp, raw = self._request(method, path, body, **kw)
        try:
            return json.loads(raw)
        except ValueError:
            raise HuskError(f"husk serve answered {method} {path} with no JSON: {raw[:200]!r}") from None

    @staticmethod
    def _q(sid: str) -> str:
        return urllib.parse.quote(sid, safe="")

    def health(self, timeout: float = 2.0) -> Dict[str, Any]:
        return self._json("GET", "/v1/health", timeout=timeout)

    # ----------------------------------------------------------- lifecycle --
    def create(self, params: Dict[str, Any]) -> Dict[str, Any]:
        body = {k: v for k, v in params.items() if v is not None and k not in ("extra_args",)}
        from ._common import duration_arg

        for k in ("ttl", "max_lifetime", "ready_timeout"):
            if k in body:
                body[k] = duration_arg(body[k])
        if params.get("extra_args"):
            raise HuskError("extra_args are for the CLI transport only")
        return self._json("POST", "/v1/sandboxes", body)

    def list(self, labels: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
        q = urllib.parse.urlencode([("label", f"{k}={v}") for k, v in (labels or {}).items()])
        return self._json("GET", "/v1/sandboxes" + (f"?{q}" if q else ""))["sandboxes"]

    def inspect(self, sid: str) -> Dict[str, Any]:
        return self._json("GET", f"/v1/sandboxes/{self._q(sid)}")

    def renew(self, sid: str, ttl: Any = None) -> Dict[str, Any]:
        from ._common import duration_arg

        body = {"ttl": duration_arg(ttl)} if ttl is not None else {}
        return self._json("POST", f"/v1/sandboxes/{self._q(sid)}/renew", body)

    def pause(self, sid: str, memory_reclaim: bool = False) -> Dict[str, Any]:
        body = {"memory_reclaim": True} if memory_reclaim else {}
        return self._json("POST", f"/v1/sandboxes/{self._q(sid)}/pause", body)

    def resume(self, sid: str) -> Dict[str, Any]:
        return self._json("POST", f"/v1/sandboxes/{self._q(sid)}/resume", {})

    def destroy(self, sid: str) -> None:
        self._json("DELETE", f"/v1/sandboxes/{self._q(sid)}")

    def fork(self, sid: str, count: int = 1, labels: Optional[Dict[str, str]] = None, ttl: Any = None) -> Dict[str, Any]:
        from ._common import duration_arg

        body: Dict[str, Any] = {"count": count}
        if labels:
            body["labels"] = labels
        if ttl is not None:
            body["ttl"] = duration_arg(ttl)
        return self._json("POST", f"/v1/sandboxes/{self._q(sid)}/fork", body)

    def commit(self, sid: str, tag: str) -> Dict[str, Any]:
        return self._json("POST", f"/v1/sandboxes/{self._q(sid)}/commit", {"tag": tag})

    # ---------------------------------------------------------------- exec --
    @staticmethod
    def _exec_body(opts: Dict[str, Any]) -> Dict[str, Any]:
        import base64

        from ._common import duration_arg

        body: Dict[str, Any] = {}
        if opts.get("code") is not None:
            body["code"] = opts["code"]
            # None: the sandbox's warm interpreter's or session's language
            # (python when it has neither).
            if opts.get("language") is not None:
                body["language"] = opts["language"]
        else:
            body["argv"] = list(opts["argv"])
        if opts.get("stdin") is not None:
            body["stdin_b64"] = base64.b64encode(opts["stdin"]).decode()
        for k in ("env", "secret_env", "cwd", "user", "wait"):
            if opts.get(k) is not None:
                body[k] = opts[k]
        if opts.get("timeout") is not None:
            body["timeout"] = duration_arg(opts["timeout"])
        if opts.get("output_limit") is not None:
            body["output_limit"] = str(opts["output_limit"])
        return body

    def _exec_timeout(self, opts: Dict[str, Any]) -> Optional[float]:
        from ._common import seconds

        t = opts.get("timeout")
        return None if t is None else seconds(t) + self.exec_grace

    def exec(self, sid: str, opts: Dict[str, Any]) -> Dict[str, Any]:
        v = self._json(
            "POST", f"/v1/sandboxes/{self._q(sid)}/exec", self._exec_body(opts), timeout=self._exec_timeout(opts)
        )
        return checked(v)

    def exec_stream(self, sid: str, opts: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        conn, resp = self._request(
            "POST",
            f"/v1/sandboxes/{self._q(sid)}/exec",
            self._exec_body(opts),
            headers={"Accept": "application/x-ndjson"},
            timeout=self._exec_timeout(opts),
            stream=True,
        )
        try:
            yield from ndjson_events(iter(resp.readline, b""), lambda: "husk serve's exec stream ended without a verdict")
        finally:
            conn.close()

    # --------------------------------------------------------------- files --
    # The files endpoint: husk cp's copier in the sandbox (docs/api.md).
    def _files(self, sid: str, path: str, **query: str) -> str:
        q = urllib.parse.urlencode(dict(path=path, **query))
        return f"/v1/sandboxes/{self._q(sid)}/files?{q}"

    def write_file(self, sid: str, path: str, data: bytes, mode: Optional[int] = None) -> int:
        q = {"mode": "%o" % mode} if mode is not None else {}
        octets = {"Content-Type": "application/octet-stream"}
        file_op("write", path, lambda: self._request("PUT", self._files(sid, path, **q), bytes(data), headers=octets))
        return len(data)

    def read_file(self, sid: str, path: str) -> bytes:
        return file_op("read", path, lambda: self._request("GET", self._files(sid, path))[1])

    def list_files(self, sid: str, path: str) -> List[Dict[str, Any]]:
        return file_op("list", path, lambda: self._json("GET", self._files(sid, path, list="1")))["entries"]

    def _put_tar(self, sid: str, path: str, tar: bytes) -> None:
        self._request("PUT", self._files(sid, path), tar, headers={"Content-Type": "application/x-tar"})

    def _get_tar(self, sid: str, path: str) -> bytes:
        return self._request("GET", self._files(sid, path, format="tar"))[1]
