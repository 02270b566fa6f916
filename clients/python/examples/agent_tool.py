"""An agent's shell tool backed by husk: the one line that changes when a
harness moves from a local subprocess (or Docker) runtime to husk is the
runtime's construction.

    runtime = LocalRuntime()                      # before
    runtime = HuskRuntime(image="python:3.12")    # after

Run: python3 examples/agent_tool.py   (HUSK_EXAMPLE_IMAGE or
HUSK_EXAMPLE_ROOTFS choose the sandbox's root, default image python:3.12;
HUSK_EXAMPLE_TIMEOUT the per-command timeout, default 30s)
"""

import os

from husk import HuskRuntime

root = (
    {"rootfs": os.environ["HUSK_EXAMPLE_ROOTFS"]}
    if os.environ.get("HUSK_EXAMPLE_ROOTFS")
    else {"image": os.environ.get("HUSK_EXAMPLE_IMAGE", "python:3.12")}
)


def shell_tool(runtime, command: str) -> str:
    """What the model calls: a command in, text out (never an exception for
    a failing command; the text says how it ended)."""
    return runtime.run(command)


timeout = os.environ.get("HUSK_EXAMPLE_TIMEOUT", "30s")

with HuskRuntime(memory="512M", ttl="10m", timeout=timeout, **root) as runtime:
    # What a model would do step by step: write code, run it, inspect.
    print(shell_tool(runtime, "printf 'print(6 * 7)\\n' > answer.py"))
    print(shell_tool(runtime, "python3 answer.py"))
    print(shell_tool(runtime, "python3 -c 'import sys; sys.exit(2)'"))
    print(shell_tool(runtime, "sleep 60; echo never"))
