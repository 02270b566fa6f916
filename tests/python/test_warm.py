"""run_code through the Python client (both transports) and husk mcp in
sandboxes with a warm interpreter (a fresh fork per call, modules
preloaded) or a session (state carried between calls), and cold
(docs/warm.md). The root is the host's / read-only: it has python3 and
bash."""

import asyncio

import pytest

from husk import Sandbox
from husk.errors import HuskError


def test_warm_python_run_code_gets_a_fresh_child_with_modules_preloaded(connect_kw):
    with Sandbox.create(rootfs="/", ttl="2m", warm="python:json", **connect_kw) as sb:
        first = sb.run_code("import sys\nX = 1\nprint('json' in sys.modules, 'X' in globals())")
        assert first.ok, first.stderr.text
        # json was imported by the zygote before the call; X is the call's.
        assert first.stdout.text == "True True\n"
        assert first.warm["mode"] == "fork"
        second = sb.run_code("print('X' in globals())")
        assert second.stdout.text == "False\n" and second.warm["mode"] == "fork"
        # The language given must be the interpreter's.
        with pytest.raises(HuskError) as e:
            sb.run_code("echo no", language="bash")
        assert "runs python code" in str(e.value)


def test_python_session_run_code_keeps_variables(connect_kw):
    with Sandbox.create(rootfs="/", ttl="2m", session="python", **connect_kw) as sb:
        assert sb.run_code("import math\nx = 41").ok
        r = sb.run_code("print(x + 1, math.floor(2.5))")
        assert r.stdout.text == "42 2\n", r.stderr.text
        assert r.warm["mode"] == "session" and not r.warm["restarted"]


def test_bash_session_run_code_keeps_cwd_and_exports(connect_kw):
    with Sandbox.create(rootfs="/", ttl="2m", session="bash", **connect_kw) as sb:
        assert sb.run_code("cd /tmp && export GREETING=hi").ok
        r = sb.run_code("pwd; echo $GREETING")
        assert r.stdout.text == "/tmp\nhi\n", r.stderr.text
        assert r.warm["mode"] == "session"


def test_session_call_past_its_timeout_is_interrupted(connect_kw):
    with Sandbox.create(rootfs="/", ttl="2m", session="python", **connect_kw) as sb:
        sb.run_code("kept = 'yes'")
        r = sb.run_code("import time\ntime.sleep(60)", timeout="1s")
        assert r.timed_out and r.exit_code == 124 and r.warm["interrupted"], r.raw
        assert sb.run_code("print(kept)").stdout.text == "yes\n"


def test_run_code_without_warm_or_session_runs_cold(sandbox):
    r = sandbox.run_code("print(6 * 7)")
    assert r.stdout.text == "42\n" and r.warm["mode"] == "cold"
    assert sandbox.run_code("echo $0", language="bash").warm["mode"] == "cold"


def test_stream_code_goes_through_the_warm_interpreter(connect_kw):
    from husk.types import ExecResult

    with Sandbox.create(rootfs="/", ttl="2m", session="python", **connect_kw) as sb:
        sb.run_code("n = 3")
        events = list(sb.stream(code="for i in range(n): print(i)"))
        verdict = events[-1]
        assert isinstance(verdict, ExecResult) and verdict.warm["mode"] == "session"
        assert b"".join(e.data for e in events[:-1] if e.stream == "stdout") == b"0\n1\n2\n"


def test_mcp_run_code_uses_the_sandboxs_session_or_warm_interpreter(husk_bin, state_dir):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    def text(r):
        return "".join(c.text for c in r.content if c.type == "text")

    async def main():
        params = StdioServerParameters(command=husk_bin, args=["--state-dir", state_dir, "mcp", "--rootfs", "/"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                sess = (await s.call_tool("create_sandbox", {"session": "python"})).structured_content["sandbox_id"]
                warm = (await s.call_tool("create_sandbox", {"warm": "python:json"})).structured_content["sandbox_id"]
                out = {
                    "set": await s.call_tool("run_code", {"sandbox_id": sess, "code": "y = 6 * 7"}),
                    "get": await s.call_tool("run_code", {"sandbox_id": sess, "code": "print(y)"}),
                    "w1": await s.call_tool("run_code", {"sandbox_id": warm, "code": "Z = 1\nprint('Z' in globals())"}),
                    "w2": await s.call_tool("run_code", {"sandbox_id": warm, "code": "print('Z' in globals())"}),
                    "slow": await s.call_tool(
                        "run_code", {"sandbox_id": sess, "code": "import time\ntime.sleep(60)", "timeout": "1s"}
                    ),
                    "after": await s.call_tool("run_code", {"sandbox_id": sess, "code": "print(y)"}),
                }
                for sid in (sess, warm):
                    await s.call_tool("destroy_sandbox", {"sandbox_id": sid})
                return out

    out = asyncio.run(main())
    assert not out["set"].is_error and "42" in text(out["get"])
    assert out["get"].structured_content["warm"]["mode"] == "session"
    assert "True" in text(out["w1"]) and "False" in text(out["w2"])
    assert out["w2"].structured_content["warm"]["mode"] == "fork"
    assert "TIMED OUT" in text(out["slow"]) and "interrupted" in text(out["slow"])
    assert "42" in text(out["after"])


def test_run_code_returns_results_and_a_structured_exception(connect_kw):
    # Notebook-style results (docs/warm.md, Results) through the client.
    with Sandbox.create(rootfs="/", ttl="2m", session="python", **connect_kw) as sb:
        r = sb.run_code("x = 40\ndisplay('shown')\nx + 2")
        assert r.ok and r.text == "42", r.raw
        assert [(x.is_main_result, x.text) for x in r.results] == [(False, "'shown'"), (True, "42")]
        assert r.exception is None
        r = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
        assert r.ok and len(r.results) == 1 and r.results[0].png.startswith(b"\x89PNG"), r.raw
        r = sb.run_code("def f():\n    raise KeyError('k')\nf()")
        assert not r.ok and r.exception.name == "KeyError" and r.exception.value == "'k'", r.raw
        assert "husk-warm-shim" not in r.exception.traceback and '"<code>", line 3' in r.exception.traceback
