"""`husk mcp` driven by the official MCP Python SDK over stdio, as an MCP
client (an agent's host application) would."""

import asyncio
import base64
import json
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {
    "run_code",
    "create_sandbox",
    "exec",
    "write_file",
    "read_file",
    "list_files",
    "pause_sandbox",
    "resume_sandbox",
    "destroy_sandbox",
    "fork_sandbox",
    "commit_sandbox",
    "list_sandboxes",
    "inspect_sandbox",
    "renew_sandbox",
}


def mcp_session(husk_bin, state_dir, body, *extra):
    """Runs `body(session)` against a fresh `husk mcp` (root: the host's /)."""

    async def main():
        params = StdioServerParameters(
            command=husk_bin, args=["--state-dir", state_dir, "mcp", "--rootfs", "/", *extra]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.server_info.name == "husk"
                return await body(session)

    return asyncio.run(main())


# The SDK's 2.x types name fields in snake_case (server_info, is_error,
# structured_content); test.sh pins the version these tests were written for.


def text_of(result):
    return "".join(c.text for c in result.content if c.type == "text")


def live(husk_bin, state_dir):
    ls = subprocess.run([husk_bin, "--state-dir", state_dir, "ls", "--json"], capture_output=True, text=True, check=True)
    return [s["id"] for s in json.loads(ls.stdout)]


def test_mcp_lists_the_tools_with_input_schemas(husk_bin, state_dir):
    async def body(s):
        return (await s.list_tools()).tools

    tools = mcp_session(husk_bin, state_dir, body)
    assert {t.name for t in tools} == TOOLS
    by_name = {t.name: t for t in tools}
    assert by_name["run_code"].input_schema["required"] == ["code"]
    assert set(by_name["exec"].input_schema["required"]) == {"sandbox_id", "command"}
    assert all(t.description for t in tools)


def test_mcp_run_code_one_shot(husk_bin, state_dir):
    async def body(s):
        ok = await s.call_tool("run_code", {"code": "import sys\nprint(6 * 7)\nprint(sys.argv)"})
        failed = await s.call_tool("run_code", {"code": "echo oops >&2; exit 3", "language": "sh"})
        return ok, failed

    ok, failed = mcp_session(husk_bin, state_dir, body)
    assert not ok.is_error
    assert text_of(ok).startswith("exited with code 0")
    assert "42\n['-']" in text_of(ok)  # the code came on stdin, not argv
    assert ok.structured_content["exit_code"] == 0
    assert "exited with code 3" in text_of(failed) and "oops" in text_of(failed)
    assert live(husk_bin, state_dir) == []  # one-shot: nothing stays


def test_mcp_sandbox_files_exec_and_destroy(husk_bin, state_dir):
    async def body(s):
        created = await s.call_tool("create_sandbox", {})
        sid = created.structured_content["sandbox_id"]
        during = live(husk_bin, state_dir)
        w = await s.call_tool("write_file", {"sandbox_id": sid, "path": "hello.py", "content": "print('hi from file')\n"})
        blob = bytes(range(256))
        wb = await s.call_tool(
            "write_file",
            {"sandbox_id": sid, "path": "/workspace/tool.sh", "content": base64.b64encode(b"#!/bin/sh\necho tool\n").decode(),
             "encoding": "base64", "mode": "755"},
        )
        run = await s.call_tool("exec", {"sandbox_id": sid, "command": "python3 hello.py && ./tool.sh"})
        stdin = await s.call_tool("exec", {"sandbox_id": sid, "command": "wc -c", "stdin": "12345"})
        read = await s.call_tool("read_file", {"sandbox_id": sid, "path": "/workspace/hello.py"})
        missing = await s.call_tool("read_file", {"sandbox_id": sid, "path": "/workspace/nope"})
        ls = await s.call_tool("list_files", {"sandbox_id": sid, "path": "/workspace"})
        gone = await s.call_tool("destroy_sandbox", {"sandbox_id": sid})
        after = await s.call_tool("exec", {"sandbox_id": sid, "command": "true"})
        return sid, during, w, wb, run, stdin, read, missing, ls, gone, after, blob

    sid, during, w, wb, run, stdin, read, missing, ls, gone, after, _ = mcp_session(husk_bin, state_dir, body)
    assert sid in during
    assert not w.is_error and "wrote 22 bytes" in text_of(w)
    assert not wb.is_error
    assert "hi from file\ntool\n" in text_of(run), text_of(run)
    assert "5" in text_of(stdin)
    assert text_of(read) == "print('hi from file')\n"
    assert missing.is_error and "/workspace/nope" in text_of(missing)
    names = {e["name"]: e for e in ls.structured_content["entries"]}
    assert set(names) == {"hello.py", "tool.sh"}
    assert names["tool.sh"]["permissions"] == "-rwxr-xr-x"
    assert not gone.is_error
    assert after.is_error and "no sandbox" in text_of(after)
    assert sid not in live(husk_bin, state_dir)


def test_mcp_pause_and_resume_keep_the_sandbox_and_refuse_exec_between(husk_bin, state_dir):
    async def body(s):
        created = await s.call_tool("create_sandbox", {})
        sid = created.structured_content["sandbox_id"]
        await s.call_tool("exec", {"sandbox_id": sid, "command": "echo kept > /tmp/k"})
        paused = await s.call_tool("pause_sandbox", {"sandbox_id": sid})
        refused = await s.call_tool("exec", {"sandbox_id": sid, "command": "true"})
        resumed = await s.call_tool("resume_sandbox", {"sandbox_id": sid})
        after = await s.call_tool("exec", {"sandbox_id": sid, "command": "cat /tmp/k"})
        await s.call_tool("destroy_sandbox", {"sandbox_id": sid})
        return sid, paused, refused, resumed, after

    sid, paused, refused, resumed, after = mcp_session(husk_bin, state_dir, body)
    assert not paused.is_error and paused.structured_content["paused"] is True, text_of(paused)
    assert f"husk resume {sid}" in text_of(refused), text_of(refused)
    assert not resumed.is_error, text_of(resumed)
    assert "kept\n" in text_of(after), text_of(after)


def test_mcp_says_plainly_when_output_was_cut_or_time_ran_out(husk_bin, state_dir):
    async def body(s):
        big = await s.call_tool("run_code", {"code": "print('x' * 100000)"})
        slow = await s.call_tool("run_code", {"code": "sleep 30", "language": "sh", "timeout": "500ms"})
        bad = await s.call_tool("run_code", {"code": "1", "timeout": "forever"})
        return big, slow, bad

    big, slow, bad = mcp_session(husk_bin, state_dir, body, "--output-limit", "4K")
    assert "TRUNCATED: the command wrote 100001 bytes" in text_of(big)
    assert len(text_of(big)) < 6000
    assert big.structured_content["stdout_truncated"] is True
    assert text_of(slow).startswith("TIMED OUT")
    assert slow.structured_content["exit_code"] == 124
    assert bad.is_error and "timeout" in text_of(bad)


def test_mcp_acts_only_on_its_own_sandboxes_and_removes_them_at_the_end(husk_bin, state_dir):
    other = subprocess.run(
        [husk_bin, "--state-dir", state_dir, "create", "--rootfs", "/", "--ttl", "1m"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    try:

        async def body(s):
            foreign = await s.call_tool("destroy_sandbox", {"sandbox_id": other})
            mine = (await s.call_tool("create_sandbox", {})).structured_content["sandbox_id"]
            over = await s.call_tool("create_sandbox", {})
            return foreign, mine, over

        foreign, mine, over = mcp_session(husk_bin, state_dir, body, "--max-sandboxes", "1")
        assert foreign.is_error and "of this session" in text_of(foreign)
        assert over.is_error and "at most 1" in text_of(over)
        # The session ended: what it made is gone, what it did not is not.
        assert live(husk_bin, state_dir) == [other]
        assert mine != other
    finally:
        subprocess.run([husk_bin, "--state-dir", state_dir, "rm", other], capture_output=True)


def test_mcp_answers_malformed_messages_with_jsonrpc_errors_and_keeps_serving(husk_bin, state_dir):
    lines = [
        "not json",
        "[]",
        '{"jsonrpc":"2.0","id":1,"method":"no/such"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nope"}}',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":{"command":"true"}}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":4,"method":"ping"}',
    ]
    p = subprocess.run(
        [husk_bin, "--state-dir", state_dir, "mcp", "--rootfs", "/"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 0, p.stderr
    replies = [json.loads(l) for l in p.stdout.splitlines()]
    assert [r.get("id") for r in replies] == [None, None, 1, 2, 3, 4]  # the notification gets none
    assert [r.get("error", {}).get("code") for r in replies[:4]] == [-32700, -32600, -32601, -32602]
    assert replies[4]["result"]["isError"] and "sandbox_id is required" in replies[4]["result"]["content"][0]["text"]
    assert replies[5]["result"] == {}


def verdict_of(husk_bin, state_dir, sid):
    """`husk exec --json` in a sandbox the MCP server made: its verdict says
    which limits and network the sandbox has."""
    p = subprocess.run(
        [husk_bin, "--state-dir", state_dir, "exec", "--json", sid, "--", "true"], capture_output=True, text=True
    )
    return json.loads(p.stdout)


def test_mcp_limits_apply_to_created_sandboxes(husk_bin, state_dir):
    """The operator's limits bind every sandbox the tools make; a call may
    lower them but never raise them."""

    async def body(s):
        plain = await s.call_tool("create_sandbox", {})
        lower = await s.call_tool("create_sandbox", {"memory": "100M", "pids": "20"})
        plain_v = verdict_of(husk_bin, state_dir, plain.structured_content["sandbox_id"])
        lower_v = verdict_of(husk_bin, state_dir, lower.structured_content["sandbox_id"])
        more_mem = await s.call_tool("create_sandbox", {"memory": "1G"})
        no_pids = await s.call_tool("create_sandbox", {"pids": "unlimited"})
        more_cpus = await s.call_tool("create_sandbox", {"cpus": "1"})
        one_shot = await s.call_tool("run_code", {"code": "print(1)", "memory": "4G"})
        return plain_v, lower_v, more_mem, no_pids, more_cpus, one_shot

    plain_v, lower_v, more_mem, no_pids, more_cpus, one_shot = mcp_session(
        husk_bin, state_dir, body, "--memory", "200M", "--pids", "50", "--cpus", "0.5"
    )
    assert plain_v["limits"]["memory"]["applied"] == 200 << 20, plain_v["limits"]
    assert plain_v["limits"]["pids"]["applied"] == 50
    assert plain_v["limits"]["cpus"]["quota_us"] == 50000, plain_v["limits"]["cpus"]
    assert lower_v["limits"]["memory"]["applied"] == 100 << 20
    assert lower_v["limits"]["pids"]["applied"] == 20
    for refused in (more_mem, no_pids, more_cpus, one_shot):
        assert refused.is_error and "above this server's limit" in text_of(refused), text_of(refused)
    assert live(husk_bin, state_dir) == []


def test_mcp_network_allow_applies(husk_bin, state_dir):
    """The operator's allowlist is the network of the sandboxes the tools make."""

    async def body(s):
        sid = (await s.call_tool("create_sandbox", {})).structured_content["sandbox_id"]
        return verdict_of(husk_bin, state_dir, sid)

    v = mcp_session(husk_bin, state_dir, body, "--network", "allow=example.com,10.0.0.0/8:443")
    assert v["network"]["mode"] == "allowlist", v["network"]
    assert v["network"]["rules"] == ["example.com", "10.0.0.0/8:443"]


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--memory", "1K"], "--memory"),
        (["--pids", "1"], "--pids"),
        (["--cpus", "-2"], "--cpus"),
        (["--network", "allow=no such host!"], "no such host!"),
        (["--network", "everywhere"], "--network"),
    ],
)
def test_mcp_bad_operator_limit_refuses_to_start(husk_bin, state_dir, flags, says):
    """A limit husk run would refuse stops husk mcp before it answers anything
    (not at the first tool call, with the model in the loop)."""
    init = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}\n'
    p = subprocess.run(
        [husk_bin, "--state-dir", state_dir, "mcp", "--rootfs", "/", *flags],
        input=init, capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 125, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == ""
    assert p.stderr.startswith("husk mcp: ") and says in p.stderr, p.stderr


def test_mcp_tools_with_structured_content_declare_output_schema(husk_bin, state_dir):
    """Every tool returns structuredContent, so every tool declares its shape;
    the SDK checks each successful result against it."""
    import jsonschema

    async def body(s):
        tools = (await s.list_tools()).tools
        sid = (created := await s.call_tool("create_sandbox", {})).structured_content["sandbox_id"]
        results = {
            "create_sandbox": created,
            "run_code": await s.call_tool("run_code", {"code": "print(1)"}),
            "exec": await s.call_tool("exec", {"sandbox_id": sid, "command": "echo hi"}),
            "write_file": await s.call_tool("write_file", {"sandbox_id": sid, "path": "a.txt", "content": "x"}),
            "read_file": await s.call_tool("read_file", {"sandbox_id": sid, "path": "a.txt"}),
            "list_files": await s.call_tool("list_files", {"sandbox_id": sid}),
            "pause_sandbox": await s.call_tool("pause_sandbox", {"sandbox_id": sid}),
            "resume_sandbox": await s.call_tool("resume_sandbox", {"sandbox_id": sid}),
            "list_sandboxes": await s.call_tool("list_sandboxes", {}),
            "inspect_sandbox": await s.call_tool("inspect_sandbox", {"sandbox_id": sid}),
            "renew_sandbox": await s.call_tool("renew_sandbox", {"sandbox_id": sid, "ttl": "5m"}),
            "destroy_sandbox": await s.call_tool("destroy_sandbox", {"sandbox_id": sid}),
        }
        return tools, results

    tools, results = mcp_session(husk_bin, state_dir, body)
    schemas = {t.name: t.output_schema for t in tools}
    # fork_sandbox and commit_sandbox need an image's sandbox: test_ops.py
    # checks theirs.
    assert set(results) == TOOLS - {"fork_sandbox", "commit_sandbox"}
    for name, result in results.items():
        assert not result.is_error, (name, text_of(result))
        assert result.structured_content is not None, name
        schema = schemas[name]
        assert schema is not None and schema["type"] == "object", name
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(result.structured_content, schema)
        # The schema names every key the tool returns.
        assert set(result.structured_content) <= set(schema["properties"]), name


class RawMcp:
    """`husk mcp` driven line by line (requests can be queued behind a call)."""

    def __init__(self, husk_bin, state_dir):
        self.p = subprocess.Popen(
            [husk_bin, "--state-dir", state_dir, "mcp", "--rootfs", "/"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def send(self, *msgs):
        self.p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs))
        self.p.stdin.flush()

    def reply(self):
        return json.loads(self.p.stdout.readline())

    @staticmethod
    def call(i, name, args):
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}}

    @staticmethod
    def ping(i):
        return {"jsonrpc": "2.0", "id": i, "method": "ping"}


def test_mcp_commands_cannot_read_the_client_stream(husk_bin, state_dir):
    """The tools run in the server's process (the sandbox library), but a
    command's stdin is its own (the code, the tool's stdin, or nothing),
    never the server's: the requests queued behind a call in the client's
    pipe reach the server, not the command."""
    m = RawMcp(husk_bin, state_dir)
    m.send(m.call(1, "run_code", {"code": "cat", "language": "sh"}), m.ping(2))
    one_shot, pong = m.reply(), m.reply()
    assert pong["id"] == 2, pong
    m.send(m.call(3, "create_sandbox", {}))
    sid = m.reply()["result"]["structuredContent"]["sandbox_id"]
    m.send(m.call(4, "exec", {"sandbox_id": sid, "command": "cat"}), m.ping(5))
    nothing, pong = m.reply(), m.reply()
    assert pong["id"] == 5, pong
    m.send(m.call(6, "exec", {"sandbox_id": sid, "command": "cat", "stdin": "given\n"}), m.ping(7))
    given, pong = m.reply(), m.reply()
    assert pong["id"] == 7, pong
    m.send(m.call(8, "run_code", {"sandbox_id": sid, "code": "cat", "language": "sh"}), m.ping(9))
    code, pong = m.reply(), m.reply()
    assert pong["id"] == 9, pong
    m.p.stdin.close()
    assert m.p.wait(60) == 0
    for r in (one_shot, nothing, code):
        assert r["result"]["structuredContent"]["exit_code"] == 0, r
        assert r["result"]["structuredContent"]["stdout_bytes"] == 0, r
    assert "given" in given["result"]["content"][0]["text"], given
    assert sid not in live(husk_bin, state_dir)


def test_mcp_still_ends_on_sigterm_after_running_commands(husk_bin, state_dir):
    """A command's watch blocks SIGTERM to read it from a signalfd; the
    server takes its own signal mask back after each call."""
    import signal

    m = RawMcp(husk_bin, state_dir)
    m.send(m.call(1, "run_code", {"code": "true", "language": "sh"}))
    assert m.reply()["result"]["structuredContent"]["exit_code"] == 0
    m.p.send_signal(signal.SIGTERM)
    try:
        assert m.p.wait(30) == -signal.SIGTERM
    finally:
        if m.p.poll() is None:
            m.p.kill()
            m.p.wait()


def test_mcp_failures_name_their_step(husk_bin, state_dir):
    """A failed call's structuredContent names the step as the CLI's verdict
    does: arguments for a refused argument, sandbox for an unknown sandbox."""
    m = RawMcp(husk_bin, state_dir)
    m.send(m.call(1, "create_sandbox", {"memory": "12QQ"}), m.call(2, "exec", {"sandbox_id": "nosuchbox", "command": "true"}))
    bad, unknown = m.reply()["result"], m.reply()["result"]
    m.p.stdin.close()
    assert m.p.wait(60) == 0
    assert bad["isError"] and bad["structuredContent"]["step"] == "arguments", bad
    assert "invalid size" in bad["structuredContent"]["error"], bad
    assert unknown["isError"] and unknown["structuredContent"]["step"] == "sandbox", unknown
