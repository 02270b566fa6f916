"""Fixtures for the Python client and MCP tests: the real husk binary, a
private state directory, and a sandbox whose root is the host's / read-only
(it has python3, sh, tar and stat; the busybox test rootfs has no python)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def husk_binary() -> str:
    b = os.environ.get("HUSK_BIN") or str(REPO / "target/x86_64-unknown-linux-gnu/debug/husk")
    if not os.access(b, os.X_OK):
        pytest.fail(f"no husk binary at {b}: build it (cargo build) or set HUSK_BIN")
    return b


@pytest.fixture(scope="session")
def husk_bin() -> str:
    return husk_binary()


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory, husk_bin):
    d = tmp_path_factory.mktemp("husk-state")
    yield str(d)
    # Nothing a test made may outlive the suite.
    ls = subprocess.run([husk_bin, "--state-dir", str(d), "ls", "--json"], capture_output=True, text=True)
    left = json.loads(ls.stdout or "[]")
    left = left.get("sandboxes", left) if isinstance(left, dict) else left
    subprocess.run([husk_bin, "--state-dir", str(d), "rm", "--all"], capture_output=True)
    assert not left, f"sandboxes left behind: {left}"


TRANSPORTS = ["cli"]


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture
def connect_kw(transport, husk_bin, state_dir):
    return dict(transport=transport, husk_bin=husk_bin, state_dir=state_dir)


@pytest.fixture
def sandbox(connect_kw):
    from husk import Sandbox

    with Sandbox.create(rootfs="/", ttl="2m", **connect_kw) as sb:
        yield sb
