"""``AsyncSandbox``: the ``Sandbox`` surface for asyncio code.

    from husk import AsyncSandbox
    async with await AsyncSandbox.create(image="python") as sb:
        r = await sb.run_code("print(6 * 7)")

Each call runs the blocking ``Sandbox`` call in a worker thread
(``asyncio.to_thread``), so the event loop is never blocked and the results,
exceptions and transports are exactly the synchronous client's. The lease
heartbeat is the ``Sandbox``'s own thread.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, AsyncIterator, Dict, List, Optional, Union

from .sandbox import RUN_CODE_TIMEOUT, Sandbox, Transport, _ClassOrInstance, _transport_of
from .errors import SandboxNotFound
from .types import Argv, ExecResult, FileEntry, SandboxInfo, StreamEvent


async def _call(fn: Any, *args: Any, **kw: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kw))


class AsyncSandbox:
    """A live sandbox for asyncio: every ``Sandbox`` method, awaited. Use
    ``async with`` (or ``await sb.close()``)."""

    def __init__(self, sync: Sandbox) -> None:
        self._sb = sync

    # The synchronous handle, for what has no async form.
    @property
    def sync(self) -> Sandbox:
        return self._sb

    @property
    def id(self) -> str:
        return self._sb.id

    @property
    def sandbox_id(self) -> str:
        return self._sb.id

    @property
    def info(self) -> SandboxInfo:
        return self._sb.info

    @property
    def transport(self) -> str:
        return self._sb.transport

    @property
    def heartbeat_error(self) -> Optional[BaseException]:
        return self._sb.heartbeat_error

    # ------------------------------------------------------------ creation --
    @classmethod
    async def create(cls, image: Optional[str] = None, **kw: Any) -> "AsyncSandbox":
        """``Sandbox.create``'s arguments; returns once the sandbox is READY."""
        return cls(await _call(Sandbox.create, image, **kw))

    @classmethod
    async def connect(cls, sandbox_id: str, transport: Union[str, Transport] = "auto", **kw: Any) -> "AsyncSandbox":
        return cls(await _call(Sandbox.connect, sandbox_id, transport, **kw))

    attach = connect

    @classmethod
    async def list(
        cls, labels: Optional[Dict[str, str]] = None, transport: Union[str, Transport] = "auto", **kw: Any
    ) -> List[SandboxInfo]:
        return await _call(Sandbox.list, labels, transport, **kw)

    async def _kill_class(cls, sandbox_id: str, transport: Union[str, Transport] = "auto", **kw: Any) -> bool:  # type: ignore[misc]
        """``await AsyncSandbox.kill(id)``: False when there was none;
        ``await sb.kill()``: ``close()``."""

        def kill() -> bool:
            t = _transport_of(transport, kw)
            try:
                t.destroy(sandbox_id)
            except SandboxNotFound:
                return False
            return True

        return await _call(kill)

    async def _kill_instance(self) -> bool:
        return await _call(self._sb.kill)

    kill = _ClassOrInstance(_kill_class, _kill_instance)

    # ---------------------------------------------------------------- exec --
    async def exec(self, cmd: Argv, **kw: Any) -> ExecResult:
        return await _call(self._sb.exec, cmd, **kw)

    async def run_code(
        self, code: str, language: Optional[str] = None, *, timeout: Union[str, float, None] = RUN_CODE_TIMEOUT, **kw: Any
    ) -> ExecResult:
        return await _call(self._sb.run_code, code, language, timeout=timeout, **kw)

    async def stream(self, cmd: Optional[Argv] = None, **kw: Any) -> AsyncIterator[StreamEvent]:
        """``Sandbox.stream``'s events as they come: ``OutputChunk``s, then
        the ``ExecResult``."""
        loop = asyncio.get_running_loop()
        it = self._sb.stream(cmd, **kw)
        done = object()

        def step() -> Any:
            return next(it, done)

        try:
            while True:
                ev = await loop.run_in_executor(None, step)
                if ev is done:
                    return
                yield ev
        finally:
            # An abandoned stream closes its connection or child (the
            # generator's own cleanup) off the event loop.
            await loop.run_in_executor(None, it.close)

    # --------------------------------------------------------------- files --
    async def write_file(self, path: str, data: Union[bytes, str], mode: Optional[int] = None) -> int:
        return await _call(self._sb.write_file, path, data, mode)

    async def read_file(self, path: str) -> bytes:
        return await _call(self._sb.read_file, path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return await _call(self._sb.read_text, path, encoding)

    async def list_files(self, path: str = ".") -> List[FileEntry]:
        return await _call(self._sb.list_files, path)

    async def upload(self, local: str, remote: str) -> None:
        await _call(self._sb.upload, local, remote)

    async def download(self, remote: str, local: str) -> None:
        await _call(self._sb.download, remote, local)

    # ----------------------------------------------------------- lifecycle --
    async def inspect(self) -> SandboxInfo:
        return await _call(self._sb.inspect)

    async def renew(self, ttl: Union[str, float, None] = None) -> Dict[str, Any]:
        return await _call(self._sb.renew, ttl)

    async def pause(self, memory_reclaim: bool = False) -> str:
        return await _call(self._sb.pause, memory_reclaim)

    async def resume(self) -> "AsyncSandbox":
        await _call(self._sb.resume)
        return self

    async def fork(
        self, count: int = 1, *, labels: Optional[Dict[str, str]] = None, ttl: Union[str, float, None] = None
    ) -> List["AsyncSandbox"]:
        forks = await _call(self._sb.fork, count, labels=labels, ttl=ttl)
        return [AsyncSandbox(f) for f in forks]

    async def commit(self, tag: str) -> Dict[str, Any]:
        return await _call(self._sb.commit, tag)

    async def is_running(self) -> bool:
        return await _call(self._sb.is_running)

    async def close(self) -> None:
        await _call(self._sb.close)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, transport={self.transport!r})"
