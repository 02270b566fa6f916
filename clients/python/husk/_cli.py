"""The CLI transport: every operation is one ``husk`` subcommand
(``create --json``, ``exec --json``, ``renew``, ``rm``, ``inspect``,
``cp``). Used when no ``husk serve`` is reachable."""

from __future__ import annotations

import json
import os
import selectors
import shlex
import shutil
import subprocess
import tempfile
from typing import Any, Dict, Iterator, List, Optional

from .errors import HuskError, from_error_json
from ._common import CODE_ARGV, TarFiles, checked, duration_arg, file_op, ndjson_events


class CliTransport(TarFiles):
    name = "cli"

    def __init__(
        self,
        husk_bin: Optional[str] = None,
        state_dir: Optional[str] = None,
        root: Optional[str] = None,
    ) -> None:
        found = husk_bin or os.environ.get("HUSK_BIN") or shutil.which("husk")
        if not found:
            raise HuskError(
                "the husk binary was not found",
                hint="put husk in PATH, set HUSK_BIN, or pass husk_bin=...",
            )
        self.bin = found
        self.state_dir = state_dir
        self.root = root
        self._features: Optional[Dict[str, bool]] = None

    # ------------------------------------------------------------ plumbing --
    def _base(self) -> List[str]:
        argv = [self.bin]
        if self.root:
            argv += ["--root", self.root]
        if self.state_dir:
            argv += ["--state-dir", self.state_dir]
        return argv

    def _run(
        self,
        args: List[str],
        stdin: Optional[bytes] = None,
        timeout: Optional[float] = None,
        env: Optional[Dict[str, str]] = None,
        pass_fds: tuple = (),
    ) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                self._base() + args,
                input=stdin if stdin is not None else None,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout,
                env=env,
                pass_fds=pass_fds,
            )
        except subprocess.TimeoutExpired as e:
            raise HuskError(f"husk {args[0]} did not answer within {timeout:.0f}s") from e
        except OSError as e:
            err = from_error_json({"error": {"step": "spawn", "errno": e.errno, "message": f"starting {self.bin}: {e}"}})
            raise err from e

    @staticmethod
    def _json_or_raise(p: subprocess.CompletedProcess, what: str) -> Dict[str, Any]:
        out = p.stdout.decode("utf-8", errors="replace").strip()
        obj: Any = None
        if out:
            try:
                obj = json.loads(out)
            except ValueError:
                obj = None
        if p.returncode != 0:
            if isinstance(obj, dict) and obj.get("error"):
                raise from_error_json(obj)
            msg = p.stderr.decode("utf-8", errors="replace").strip() or f"husk {what} exited {p.returncode}"
            raise HuskError(msg.removeprefix("husk: "))
        if not isinstance(obj, dict):
            raise HuskError(f"husk {what} printed no JSON object: {out[:200]!r}")
        return obj

    def features(self) -> Dict[str, bool]:
        """What this husk binary offers beyond the basics (by its --help)."""
        if self._features is None:
            exec_help = self._run(["exec", "--help"]).stdout.decode(errors="replace")
            self._features = {"json_stream": "--json-stream" in exec_help}
        return self._features

    # ----------------------------------------------------------- lifecycle --
    def create(self, params: Dict[str, Any]) -> Dict[str, Any]:
        args = ["create", "--json"]
        env = None
        for key, flag in (
            ("image", "--image"),
            ("rootfs", "--rootfs"),
            ("runtime", "--runtime"),
            ("memory", "--memory"),
            ("cpus", "--cpus"),
            ("pids", "--pids"),
            ("network", "--network"),
            ("workdir", "--workdir"),
            ("user", "--user"),
            ("name", "--name"),
            ("pool", "--pool"),
            ("warm", "--warm"),
            ("session", "--session"),
        ):
            if params.get(key) is not None:
                args += [flag, str(params[key])]
        for key, flag in (("ttl", "--ttl"), ("max_lifetime", "--max-lifetime"), ("ready_timeout", "--ready-timeout")):
            if params.get(key) is not None:
                args += [flag, duration_arg(params[key])]
        for rule in params.get("allow_hosts") or []:
            args += ["--allow-host", str(rule)]
        for name, ip in (params.get("add_hosts") or {}).items():
            args += ["--add-host", f"{name}:{ip}"]
        for p in params.get("publish") or []:
            args += ["--publish", str(p)]
        if params.get("egress_bytes") is not None:
            args += ["--egress-bytes", str(params["egress_bytes"])]
        for k, v in (params.get("env") or {}).items():
            args += ["--env", f"{k}={v}"]
        for k, v in (params.get("labels") or {}).items():
            args += ["--label", f"{k}={v}"]
        fds: List[int] = []
        # Each value in a memfd husk reads as --secret-file: never in argv
        # (ps shows it), never in husk's own environment.
        for k, v in (params.get("secret_env") or {}).items():
            fd = os.memfd_create("husk-secret", 0)
            fds.append(fd)
            os.write(fd, str(v).encode())
            args += ["--secret-file", f"{k}=/proc/self/fd/{fd}"]
        if params.get("ready_cmd"):
            rc = params["ready_cmd"]
            # One shell command line (run by sh -c inside), as serve builds it.
            args += ["--ready-cmd", rc if isinstance(rc, str) else shlex.join(rc)]
        if params.get("concurrent"):
            args.append("--concurrent")
        if params.get("writable"):
            args.append("--writable")
        args += list(params.get("extra_args") or [])
        try:
            return self._json_or_raise(self._run(args, env=env, pass_fds=tuple(fds)), "create")
        finally:
            for fd in fds:
                os.close(fd)

    def list(self, labels: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
        args = ["ls", "--json"]
        for k, v in (labels or {}).items():
            args += ["--label", f"{k}={v}"]
        p = self._run(args)
        if p.returncode != 0:
            self._json_or_raise(p, "ls")
        got = json.loads(p.stdout.decode() or "[]")
        return list(got.get("sandboxes", []) if isinstance(got, dict) else got)

    def inspect(self, sid: str) -> Dict[str, Any]:
        return self._json_or_raise(self._run(["inspect", sid]), "inspect")

    def renew(self, sid: str, ttl: Any = None) -> Dict[str, Any]:
        args = ["renew", sid, "--json"]
        if ttl is not None:
            args += ["--ttl", duration_arg(ttl)]
        return self._json_or_raise(self._run(args), "renew")

    def pause(self, sid: str, memory_reclaim: bool = False) -> Dict[str, Any]:
        args = ["pause", sid, "--json"] + (["--memory-reclaim"] if memory_reclaim else [])
        return self._json_or_raise(self._run(args), "pause")

    def resume(self, sid: str) -> Dict[str, Any]:
        return self._json_or_raise(self._run(["resume", sid, "--json"]), "resume")

    def fork(self, sid: str, count: int = 1, labels: Optional[Dict[str, str]] = None, ttl: Any = None) -> Dict[str, Any]:
        args = ["fork", sid, "--json", "--count", str(count)]
        for k, v in (labels or {}).items():
            args += ["--label", f"{k}={v}"]
        if ttl is not None:
            args += ["--ttl", duration_arg(ttl)]
        return self._json_or_raise(self._run(args), "fork")

    def commit(self, sid: str, tag: str) -> Dict[str, Any]:
        return self._json_or_raise(self._run(["commit", sid, tag, "--json"]), "commit")

    def destroy(self, sid: str) -> None:
        p = self._run(["rm", "--json", sid])
        if p.returncode != 0:
            try:
                obj = json.loads(p.stdout.decode() or "{}")
            except ValueError:
                obj = {}
            errs = obj.get("errors") or [p.stderr.decode(errors="replace").strip()]
            raise from_error_json({"error": {"step": "sandbox", "message": str(errs[0])}})

    # ---------------------------------------------------------------- exec --
    def _exec_args(self, sid: str, argv: List[str], opts: Dict[str, Any], mode: str) -> List[str]:
        args = ["exec", mode]
        if opts.get("code") is not None:
            # `husk exec --code -`: the sandbox's warm interpreter or session
            # runs it, else a fresh interpreter (the code comes on stdin).
            args.append("--code=-")
            if opts.get("language") is not None:
                args.append(f"--language={opts['language']}")
        if opts.get("timeout") is not None:
            args += ["--timeout", duration_arg(opts["timeout"])]
        if opts.get("output_limit") is not None:
            args += ["--output-limit", str(opts["output_limit"])]
        for k, v in (opts.get("env") or {}).items():
            args += ["--env", f"{k}={v}"]
        if opts.get("user") is not None:
            args += ["--user", str(opts["user"])]
        if opts.get("cwd") is not None:
            args += ["--workdir", str(opts["cwd"])]
        if opts.get("wait"):
            args.append("--wait")
        if opts.get("code") is not None:
            return args + [sid]
        return args + [sid, "--"] + list(argv)

    @staticmethod
    def _argv(argv: Optional[List[str]], code: Optional[str], language: Optional[str]) -> List[str]:
        if code is None:
            return list(argv or [])
        # Checked here for the same error as before husk runs; the command
        # itself is `husk exec --code -` (_exec_args).
        if language is not None and language not in CODE_ARGV:
            raise HuskError(f"language {language!r} is not one of {sorted(CODE_ARGV)}")
        return []

    @staticmethod
    def _py_timeout(opts: Dict[str, Any]) -> Optional[float]:
        # husk enforces the timeout itself; this only guards against a husk
        # that never answers.
        t = opts.get("timeout")
        if t is None:
            return None
        from ._common import seconds

        return seconds(t) + 60.0

    def exec(self, sid: str, opts: Dict[str, Any]) -> Dict[str, Any]:
        argv = self._argv(opts.get("argv"), opts.get("code"), opts.get("language"))
        stdin = opts["code"].encode() if opts.get("code") is not None else opts.get("stdin")
        args = self._exec_args(sid, argv, opts, "--json")
        fds: List[int] = []
        # As create's: each value in a memfd husk reads (--secret-file),
        # never in argv or husk's own environment.
        for k, v in (opts.get("secret_env") or {}).items():
            fd = os.memfd_create("husk-secret", 0)
            fds.append(fd)
            os.write(fd, str(v).encode())
            args.insert(2, f"--secret-file={k}=/proc/self/fd/{fd}")
        try:
            p = self._run(args, stdin=stdin, timeout=self._py_timeout(opts), pass_fds=tuple(fds))
        finally:
            for fd in fds:
                os.close(fd)
        out = p.stdout.decode("utf-8", errors="replace").strip()
        try:
            verdict = json.loads(out) if out else None
        except ValueError:
            verdict = None
        if not isinstance(verdict, dict):
            msg = p.stderr.decode("utf-8", errors="replace").strip() or f"husk exec exited {p.returncode} without a verdict"
            raise HuskError(msg)
        return checked(verdict)

    # --------------------------------------------------------------- files --
    def _cp(self, args: List[str], stdin: Optional[bytes] = None) -> bytes:
        """``husk cp`` (the sandbox's copier: paths resolved within its
        root, its user, bounds); a failure as the exception its words say."""
        p = self._run(["cp"] + args, stdin=stdin)
        if p.returncode == 0:
            return p.stdout
        said = [ln.removeprefix("husk: ").removeprefix("cp: ") for ln in p.stderr.decode(errors="replace").splitlines()]
        hint = next((ln.removeprefix("hint: ") for ln in said if ln.startswith("hint: ")), None)
        text = "; ".join(ln for ln in said if ln and not ln.startswith("hint: ")) or f"husk cp exited {p.returncode}"
        gone = any(w in text for w in ("no sandbox", " expired at ", " was removed at "))
        step = "busy" if " is busy" in text else "sandbox" if gone else "copy"
        raise from_error_json({"error": {"step": step, "message": text, "hint": hint}})

    def _put_tar(self, sid: str, path: str, tar: bytes) -> None:
        self._cp(["-", f"{sid}:{path}"], stdin=tar)

    def _get_tar(self, sid: str, path: str) -> bytes:
        return self._cp([f"{sid}:{path}", "-"])

    def list_files(self, sid: str, path: str) -> List[Dict[str, Any]]:
        return json.loads(file_op("list", path, lambda: self._cp(["--list", f"{sid}:{path}"])))

    def exec_stream(self, sid: str, opts: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        """Events as ``husk exec --json-stream`` prints them: output chunks,
        then one ``{"verdict": ...}``. Older husk binaries without
        --json-stream: stdout/stderr passthrough read as they come, and the
        verdict from --verdict-file with the output added."""
        argv = self._argv(opts.get("argv"), opts.get("code"), opts.get("language"))
        stdin = opts["code"].encode() if opts.get("code") is not None else opts.get("stdin")
        if self.features()["json_stream"]:
            yield from self._stream_ndjson(sid, argv, stdin, opts)
        else:
            yield from self._stream_passthrough(sid, argv, stdin, opts)

    def _popen(self, args: List[str], stdin: Optional[bytes]) -> subprocess.Popen:
        p = subprocess.Popen(
            self._base() + args,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if stdin is not None:
            assert p.stdin is not None
            # A writer thread: a large stdin must not block reading output.
            import threading

            def feed() -> None:
                try:
                    p.stdin.write(stdin)  # type: ignore[union-attr]
                except BrokenPipeError:
                    pass
                finally:
                    try:
                        p.stdin.close()  # type: ignore[union-attr]
                    except BrokenPipeError:
                        pass

            threading.Thread(target=feed, daemon=True).start()
        return p

    def _stream_ndjson(self, sid, argv, stdin, opts) -> Iterator[Dict[str, Any]]:
        p = self._popen(self._exec_args(sid, argv, opts, "--json-stream"), stdin)
        assert p.stdout is not None and p.stderr is not None
        err = b""

        def no_verdict() -> str:
            return err.decode(errors="replace").strip() or "husk exec --json-stream ended without a verdict"

        def lines() -> Iterator[bytes]:
            nonlocal err
            try:
                yield from p.stdout  # type: ignore[misc]
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait()
                err = p.stderr.read()  # type: ignore[union-attr]
                p.stdout.close()  # type: ignore[union-attr]
                p.stderr.close()  # type: ignore[union-attr]

        yield from ndjson_events(lines(), no_verdict)

    def _stream_passthrough(self, sid, argv, stdin, opts) -> Iterator[Dict[str, Any]]:
        from ._common import Capture

        with tempfile.TemporaryDirectory(prefix="husk-client-") as tmp:
            vfile = os.path.join(tmp, "verdict.json")
            args = self._exec_args(sid, argv, opts, "--verdict-file")
            args.insert(2, vfile)
            p = self._popen(args, stdin)
            limit = int(opts.get("output_limit") or 1024 * 1024)
            caps = {"stdout": Capture(limit), "stderr": Capture(limit)}
            sel = selectors.DefaultSelector()
            sel.register(p.stdout, selectors.EVENT_READ, "stdout")  # type: ignore[arg-type]
            sel.register(p.stderr, selectors.EVENT_READ, "stderr")  # type: ignore[arg-type]
            seq = 0
            try:
                while sel.get_map():
                    for key, _ in sel.select():
                        chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                        if not chunk:
                            sel.unregister(key.fileobj)
                            continue
                        caps[key.data].add(chunk)
                        yield {"stream": key.data, "seq": seq, "bytes": chunk}
                        seq += 1
            finally:
                sel.close()
                if p.poll() is None:
                    p.kill()
                p.wait()
            try:
                with open(vfile, "rb") as f:
                    verdict = json.load(f)
            except (OSError, ValueError):
                raise HuskError(f"husk exec exited {p.returncode} without a verdict") from None
            checked(verdict)
            verdict["stdout"] = caps["stdout"].to_json()
            verdict["stderr"] = caps["stderr"].to_json()
            yield {"verdict": verdict}
