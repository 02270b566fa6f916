"""Sandboxes claimed from a pool of `husk serve` (docs/warm.md) through the
Python client (both transports: the CLI's `husk create --pool` asks the
same serve) and through `husk mcp`'s create_sandbox."""

import asyncio
import json
import os
import subprocess
import time

import pytest

from husk import Sandbox
from husk._http import HttpTransport


@pytest.fixture(scope="module")
def pool_state(tmp_path_factory, husk_bin):
    """A state dir of its own whose husk serve keeps pool "py" (the host's
    root read-only: it has python3) with 2 READY members, and pool "pyw"
    of 1 whose members have a warm python with json imported, and pool
    "pys" of 1 whose members hold a python session."""
    d = str(tmp_path_factory.mktemp("husk-pool-state"))
    sock = os.path.join(d, "api.sock")
    p = subprocess.Popen(
        [husk_bin, "--state-dir", d, "serve", "--pool", "py=rootfs=/,memory=256M:2", "--pool", "pyw=rootfs=/,memory=256M,warm=python:json:1",
         "--pool", "pys=rootfs=/,memory=256M,session=python:1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    t = HttpTransport(socket_path=sock)
    try:
        for _ in range(3000):
            if p.poll() is not None:
                pytest.fail(f"husk serve exited {p.returncode}: {p.stderr.read().decode(errors='replace')}")
            if os.path.exists(sock):
                try:
                    pools = {p["name"]: p["ready"] for p in t._json("GET", "/v1/pools")["pools"]}
                    if pools == {"py": 2, "pyw": 1, "pys": 1}:
                        break
                except Exception:
                    pass
            time.sleep(0.02)
        else:
            pytest.fail("pool py did not fill within 60 s")
        yield d
    finally:
        p.terminate()
        p.wait(timeout=60)
        err = p.stderr.read().decode(errors="replace")
        assert p.returncode == 0, err
        ls = subprocess.run([husk_bin, "--state-dir", d, "ls", "--json"], capture_output=True, text=True)
        subprocess.run([husk_bin, "--state-dir", d, "rm", "--all"], capture_output=True)
        assert json.loads(ls.stdout or "[]") == [], "sandboxes outlived the pool's serve"


@pytest.mark.parametrize("transport", ["serve", "cli"])
def test_sandbox_from_pool_is_fresh_and_single_use(pool_state, husk_bin, transport):
    kw = dict(transport=transport, husk_bin=husk_bin, state_dir=pool_state)
    with Sandbox.create(pool="py", labels={"t": transport}, ttl="1m", **kw) as a:
        with Sandbox.create(pool="py", **kw) as b:
            assert a.info.pooled is not None and b.info.pooled is not None
            assert a.id != b.id
            assert a.info.labels["t"] == transport and a.info.labels["husk.pool.from"] == "py"
            assert a.run_code("open('/tmp/mine', 'w').write('a'); print(6 * 7)").stdout.text == "42\n"
            seen = b.exec(["sh", "-c", "ls /tmp; ps -eo args 2>/dev/null | head -50"]).stdout.text
            assert "mine" not in seen
        ida = a.id
    # Released: destroyed, never back in the pool.
    ls = subprocess.run([husk_bin, "--state-dir", pool_state, "ls", "--json"], capture_output=True, text=True)
    assert ida not in [s["id"] for s in json.loads(ls.stdout)]


@pytest.mark.parametrize("transport", ["serve", "cli"])
def test_warm_pool_member_runs_code_in_its_preloaded_interpreter(pool_state, husk_bin, transport):
    kw = dict(transport=transport, husk_bin=husk_bin, state_dir=pool_state)
    with Sandbox.create(pool="pyw", ttl="1m", **kw) as sb:
        r = sb.run_code("import sys\nprint('json' in sys.modules)")
        assert r.stdout.text == "True\n", r.stderr.text
        assert r.warm["mode"] == "fork"


@pytest.mark.parametrize("transport", ["serve", "cli"])
def test_session_pool_member_keeps_state_between_calls(pool_state, husk_bin, transport):
    kw = dict(transport=transport, husk_bin=husk_bin, state_dir=pool_state)
    with Sandbox.create(pool="pys", ttl="1m", **kw) as sb:
        r = sb.run_code("x = 41")
        assert r.warm["mode"] == "session", r.stderr.text
        r = sb.run_code("print(x + 1)")
        assert r.stdout.text == "42\n", r.stderr.text


def test_pool_claim_refuses_a_spec_of_its_own(pool_state, husk_bin):
    from husk.errors import HuskError

    with pytest.raises(HuskError) as e:
        Sandbox.create(pool="py", memory="1G", transport="serve", state_dir=pool_state, retries=0)
    assert "memory" in str(e.value)
    with pytest.raises(HuskError) as e:
        Sandbox.create(pool="nope", transport="serve", state_dir=pool_state, retries=0)
    assert "no pool" in str(e.value)


def test_mcp_create_sandbox_from_an_offered_pool(pool_state, husk_bin):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def main():
        params = StdioServerParameters(
            command=husk_bin, args=["--state-dir", pool_state, "mcp", "--rootfs", "/", "--pool", "py"]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                made = await s.call_tool("create_sandbox", {"pool": "py"})
                other = await s.call_tool("create_sandbox", {"pool": "elsewhere"})
                sid = made.structured_content["sandbox_id"]
                ran = await s.call_tool("exec", {"sandbox_id": sid, "command": "echo from-pool"})
                await s.call_tool("destroy_sandbox", {"sandbox_id": sid})
                return made, other, ran

    made, other, ran = asyncio.run(main())
    assert not made.is_error
    assert other.is_error and "not offered" in "".join(c.text for c in other.content if c.type == "text")
    assert "from-pool" in "".join(c.text for c in ran.content if c.type == "text")
