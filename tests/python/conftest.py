"""Fixtures for the Python client and MCP tests: the real husk binary, a
private state directory, and a sandbox whose root is the host's / read-only
(it has python3, sh, tar and stat; the busybox test rootfs has no python)."""

import json
import os
import subprocess
import time
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


@pytest.fixture(scope="session")
def serve(husk_bin, state_dir):
    """`husk serve` on <state dir>/api.sock, for the whole session."""
    from husk._http import HttpTransport

    sock = os.path.join(state_dir, "api.sock")
    p = subprocess.Popen([husk_bin, "--state-dir", state_dir, "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = HttpTransport(socket_path=sock)
    try:
        for _ in range(500):
            if p.poll() is not None:
                pytest.fail(f"husk serve exited {p.returncode}: {p.stderr.read().decode(errors='replace')}")
            if os.path.exists(sock):
                try:
                    t.health()
                    break
                except Exception:
                    pass
            time.sleep(0.02)
        else:
            pytest.fail("husk serve did not answer /v1/health within 10 s")
        yield sock
    finally:
        p.terminate()
        p.wait(timeout=30)


# Every client test runs through both: the same calls must give the same
# results whichever way husk is reached.
TRANSPORTS = ["cli", "serve"]


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    if request.param == "serve":
        request.getfixturevalue("serve")
    return request.param


@pytest.fixture
def connect_kw(transport, husk_bin, state_dir):
    return dict(transport=transport, husk_bin=husk_bin, state_dir=state_dir)


@pytest.fixture
def sandbox(connect_kw):
    from husk import Sandbox

    with Sandbox.create(rootfs="/", ttl="2m", **connect_kw) as sb:
        yield sb
