"""Python client for husk sandboxes.

    from husk import Sandbox
    with Sandbox.create(image="python", memory="512M", ttl="10m") as sb:
        print(sb.run_code("print(6 * 7)").stdout.text)

Speaks to ``husk serve`` when its socket is reachable (HUSK_SOCKET or the
default ``<state dir>/api.sock``) and to the husk CLI otherwise.
"""

from .errors import (
    CommandError,
    CommandTimeout,
    FileError,
    HuskError,
    NameTaken,
    NotReady,
    SandboxBusy,
    SandboxNotFound,
    TransientError,
)
from .runtime import HuskRuntime
from .aio import AsyncSandbox
from .sandbox import Sandbox, connect, open_transport
from .types import CodeError, ErrorInfo, ExecResult, FileEntry, Output, OutputChunk, Result, SandboxInfo

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "AsyncSandbox",
    "HuskRuntime",
    "open_transport",
    "connect",
    "ExecResult",
    "Result",
    "CodeError",
    "Output",
    "OutputChunk",
    "SandboxInfo",
    "FileEntry",
    "ErrorInfo",
    "HuskError",
    "SandboxNotFound",
    "SandboxBusy",
    "NameTaken",
    "TransientError",
    "CommandError",
    "CommandTimeout",
    "FileError",
    "NotReady",
]
