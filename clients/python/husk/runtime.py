"""``HuskRuntime``: the one-method runtime agent harnesses plug in
(``run(cmd: str) -> str``), so moving an agent from a local subprocess or
Docker runtime to husk is one line."""

from __future__ import annotations

from typing import Any, Optional, Union

from .sandbox import Sandbox


class HuskRuntime:
    """Runs shell commands in one husk sandbox, created on first use and
    kept (files and background processes persist between commands)::

        runtime = HuskRuntime(image="python", memory="1G")
        print(runtime.run("python3 -c 'print(6*7)'"))   # "42"
        runtime.close()

    ``run`` returns what a subprocess runtime would: stdout and stderr
    together, stripped of surrounding whitespace, with a line saying how
    the command ended when it did not exit 0 (exit code, timeout, signal,
    output truncated).
    """

    def __init__(self, *, timeout: Union[str, float, None] = "60s", max_output: int = 64 * 1024, **create_kw: Any):
        self.timeout = timeout
        self.max_output = max_output
        self._kw = create_kw
        self._sb: Optional[Sandbox] = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sb is None:
            self._sb = Sandbox.create(**self._kw)
        return self._sb

    def run(self, cmd: str) -> str:
        r = self.sandbox.exec(cmd, timeout=self.timeout, output_limit=self.max_output)
        out = r.stdout.text
        if r.stderr.data:
            out = out + ("\n" if out and not out.endswith("\n") else "") + r.stderr.text
        out = out.strip()
        notes = []
        if r.truncated:
            notes.append(f"output truncated: {r.stdout.bytes + r.stderr.bytes} bytes, middle cut")
        if r.timed_out:
            notes.append(f"timed out after {self.timeout}")
        elif r.termination == "oom_killed":
            notes.append("killed: out of memory")
        elif r.termination == "signaled":
            notes.append(f"killed by {r.signal_name or r.signal}")
        elif r.exit_code != 0:
            notes.append(f"exit code {r.exit_code}")
        if notes:
            out = (out + "\n" if out else "") + "[" + "; ".join(notes) + "]"
        return out

    def close(self) -> None:
        if self._sb is not None:
            self._sb.close()
            self._sb = None

    def __enter__(self) -> "HuskRuntime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
