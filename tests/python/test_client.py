"""The husk Python client against the real husk binary, through each
transport (the `transport` fixture): the same calls must give the same
results whichever way husk is reached."""

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from husk import (
    CommandError,
    CommandTimeout,
    ExecResult,
    FileError,
    HuskError,
    HuskRuntime,
    NotReady,
    OutputChunk,
    Sandbox,
    SandboxBusy,
    SandboxNotFound,
    TransientError,
)

REPO = Path(__file__).resolve().parents[2]


def test_exec_returns_the_typed_verdict(sandbox):
    r = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert isinstance(r, ExecResult)
    assert (r.termination, r.exit_code) == ("exited", 3)
    assert r.stdout.text == "out\n" and r.stderr.text == "err\n"
    assert not r.stdout.truncated and r.stdout.bytes == 4
    assert r.sandbox_id == sandbox.id
    assert r.raw["verdict_version"] == 1
    assert r.limits and r.resources is not None and r.isolation["network"] == "none"


def test_create_with_an_allowlist_goes_out_only_through_the_proxy(connect_kw):
    import http.server

    class Web(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Web)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        with Sandbox.create(
            rootfs="/",
            ttl="2m",
            network=f"allow=web.test:{port}",
            allow_hosts=[f"api.test:{port}"],
            add_hosts={"web.test": "127.0.0.1"},
            **connect_kw,
        ) as sb:
            r = sb.exec(f"curl -sS http://web.test:{port}/; curl -s -o /dev/null -w ' %{{http_code}}' http://evil.test:{port}/")
            assert r.stdout.text == "hello 403", r.raw
            assert r.isolation["network"] == "allowlist"
            assert r.network["rules"] == [f"web.test:{port}", f"api.test:{port}"]
            assert [d["host"] for d in r.network["destinations"]] == ["web.test"]
            assert [(d["host"], d["reason"]) for d in r.network["denied"]] == [("evil.test", "not_allowed")]
            assert sb.inspect().raw["network"]["totals"]["connections"] == 1
    finally:
        srv.shutdown()


def test_a_string_command_runs_through_sh(sandbox):
    assert sandbox.exec("echo $((6 * 7)) | tr 4 X").stdout.text == "X2\n"


def test_check_raises_command_error_carrying_the_verdict(sandbox):
    with pytest.raises(CommandError) as e:
        sandbox.exec("exit 7", check=True)
    assert e.value.result.exit_code == 7
    assert e.value.verdict["exit_code"] == 7


def test_run_code_passes_code_on_stdin_not_argv(sandbox):
    # 400 KB of source: past what argv takes (E2BIG at ~256 KB per string),
    # and the interpreter's argv shows no code.
    code = "import sys\nx = '" + "a" * 400_000 + "'\nprint(len(x), sys.argv)\n"
    r = sandbox.run_code(code)
    assert r.ok, r.stderr.text
    assert r.stdout.text == "400000 ['-']\n"
    assert sandbox.run_code("echo $0", language="bash").stdout.text == "bash\n"
    assert sandbox.run_code("echo sh-ok", language="sh").stdout.text == "sh-ok\n"


def test_run_code_reports_the_exception(sandbox):
    r = sandbox.run_code("raise SystemExit('boom')")
    assert r.exit_code == 1 and "boom" in r.stderr.text


def test_stdin_and_env_reach_the_command(sandbox):
    data = bytes(range(256)) * 1000
    r = sandbox.exec(["sh", "-c", "wc -c; echo $GREETING"], stdin=data, env={"GREETING": "hello there"})
    assert r.stdout.text.split() == ["256000", "hello", "there"]


def test_timeout_kills_the_command_and_says_so(sandbox):
    r = sandbox.exec("echo started; sleep 30", timeout="500ms")
    assert (r.termination, r.exit_code, r.timed_out) == ("wall_timeout", 124, True)
    assert r.stdout.text == "started\n"
    with pytest.raises(CommandTimeout):
        sandbox.exec(["sleep", "30"], timeout=0.3, check=True)
    # The sandbox outlives its command's timeout.
    assert sandbox.exec("echo alive").stdout.text == "alive\n"


def test_output_past_the_limit_is_cut_and_flagged(sandbox):
    r = sandbox.exec("head -c 300000 /dev/zero | tr '\\0' x; echo END", output_limit="64K")
    assert r.stdout.truncated and r.stdout.bytes == 300004
    assert len(r.stdout.data) < 64 * 1024 + 64 and r.stdout.text.endswith("END\n")
    assert "[husk: " in r.stdout.text and "bytes truncated]" in r.stdout.text


def test_files_roundtrip_binary_and_list(sandbox):
    blob = os.urandom(200_000) + b"\x00\xff"
    assert sandbox.write_file("/workspace/blob.bin", blob) == len(blob)
    assert sandbox.read_file("/workspace/blob.bin") == blob
    sandbox.write_file("run.sh", "#!/bin/sh\necho from-file\n", mode=0o755)
    assert sandbox.exec(["/workspace/run.sh"]).stdout.text == "from-file\n"
    sandbox.exec("mkdir sub && ln -s blob.bin link")
    entries = {e.name: e for e in sandbox.list_files("/workspace")}
    assert set(entries) == {"blob.bin", "run.sh", "sub", "link"}
    assert (entries["blob.bin"].type, entries["blob.bin"].size) == ("file", len(blob))
    assert entries["run.sh"].mode == 0o755
    assert entries["sub"].type == "dir" and entries["link"].type == "symlink"


def test_file_errors_name_the_path(sandbox):
    with pytest.raises(FileError, match="/workspace/missing"):
        sandbox.read_file("/workspace/missing")
    with pytest.raises(FileError, match="directory"):
        sandbox.read_file("/workspace")
    # The sandbox's root is read-only: the write is refused, not lost.
    with pytest.raises(FileError, match="/etc/husk-test"):
        sandbox.write_file("/etc/husk-test", b"x")


def test_files_go_through_the_copier_past_the_old_16mib_cap(sandbox):
    # husk cp / the files endpoint, not exec + cat with a capped capture:
    # 20 MiB come back whole, and the file belongs to the sandbox's user.
    blob = os.urandom(20 << 20)
    assert sandbox.write_file("/tmp/big.bin", blob, mode=0o600) == len(blob)
    assert sandbox.read_file("/tmp/big.bin") == blob
    r = sandbox.exec("stat -c '%a %u' /tmp/big.bin; id -u")
    mode_uid, uid = r.stdout.text.splitlines()
    assert mode_uid == f"600 {uid}"
    entries = {e.name: e for e in sandbox.list_files("/tmp")}
    assert (entries["big.bin"].type, entries["big.bin"].size, entries["big.bin"].mode) == ("file", len(blob), 0o600)


def test_upload_and_download_a_tree_with_modes(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "pkg" / "deep").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (src / "pkg" / "deep" / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    os.chmod(src / "pkg" / "deep" / "tool.sh", 0o750)
    sandbox.upload(str(src), "/workspace/proj")
    r = sandbox.exec("cd /workspace/proj && python3 -c 'import pkg; print(pkg.VALUE)' && pkg/deep/tool.sh")
    assert r.stdout.text == "42\ntool\n", r.stderr.text
    sandbox.exec("echo made-inside > /workspace/proj/new.txt", check=True)
    out = tmp_path / "out"
    sandbox.download("/workspace/proj", str(out))
    assert (out / "new.txt").read_text() == "made-inside\n"
    assert (out / "pkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert stat.S_IMODE(os.stat(out / "pkg" / "deep" / "tool.sh").st_mode) == 0o750
    single = tmp_path / "one.txt"
    sandbox.download("/workspace/proj/new.txt", str(single))
    assert single.read_text() == "made-inside\n"


def test_download_never_follows_a_sandbox_symlink_out(sandbox, tmp_path):
    # A sandbox-made link to the host's /etc must not become a way to
    # write or read there on the host side.
    sandbox.exec("mkdir -p /workspace/evil && ln -s /etc /workspace/evil/etc && echo x > /workspace/evil/ok", check=True)
    with pytest.raises(FileError, match="outside"):
        sandbox.download("/workspace/evil", str(tmp_path / "dl"))
    assert not (tmp_path / "dl").exists()


def test_stream_yields_output_as_it_happens_then_the_verdict(sandbox):
    events = list(sandbox.stream("for i in 1 2 3; do echo line$i; done; echo oops >&2; printf '\\377'; exit 4"))
    chunks, final = events[:-1], events[-1]
    assert all(isinstance(c, OutputChunk) for c in chunks)
    assert isinstance(final, ExecResult) and final.exit_code == 4
    out = b"".join(c.data for c in chunks if c.stream == "stdout")
    assert out == b"line1\nline2\nline3\n\xff"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"oops\n"
    assert [c.seq for c in chunks] == sorted(c.seq for c in chunks)
    # The final verdict carries the same capture as exec's.
    assert final.stdout.data == out and final.stderr.text == "oops\n"


def test_stream_delivers_the_first_line_before_the_command_ends(connect_kw):
    # The command waits for a file that the test creates only after it got
    # the first chunk: a stream that buffered until exit would never see
    # "ready" before the command's end (it would end by its timeout).
    with Sandbox.create(rootfs="/", ttl="1m", concurrent=True, **connect_kw) as sb:
        it = sb.stream(
            "echo ready; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done",
            timeout="30s",
        )
        first = next(it)
        assert (first.stream, first.data) == ("stdout", b"ready\n")
        sb.exec(["touch", "/tmp/go"], check=True)
        rest = list(it)
        assert rest[-1].termination == "exited", rest[-1]
        assert b"".join(c.data for c in rest[:-1]) == b"done\n"


def test_stream_of_code(sandbox):
    events = list(sandbox.stream(code="print('a'); print('b')"))
    assert events[-1].ok and events[-1].stdout.text == "a\nb\n"


def test_exec_in_a_closed_sandbox_raises_not_found(connect_kw):
    sb = Sandbox.create(rootfs="/", ttl="1m", **connect_kw)
    sb.close()
    sb.close()  # idempotent
    with pytest.raises(SandboxNotFound) as e:
        sb.exec(["true"])
    assert e.value.verdict is not None and e.value.step


def test_second_exec_while_one_runs_raises_busy(connect_kw):
    with Sandbox.create(rootfs="/", ttl="1m", **connect_kw) as sb:
        t = threading.Thread(target=sb.exec, args=("sleep 3",))
        t.start()
        try:
            while sb.inspect().raw.get("active_execs", 0) == 0:
                time.sleep(0.02)
            with pytest.raises(SandboxBusy) as e:
                sb.exec(["true"])
            assert e.value.step == "busy"
            # wait=True queues instead.
            assert sb.exec(["echo", "queued"], wait=True).stdout.text == "queued\n"
        finally:
            t.join()


def test_pause_keeps_state_refuses_execs_and_connect_resumes(connect_kw):
    with Sandbox.create(rootfs="/", ttl="1m", **connect_kw) as sb:
        sb.exec("echo kept > /tmp/x", check=True)
        assert sb.pause() == sb.id
        assert str(sb.inspect().state).upper() == "PAUSED"
        with pytest.raises(SandboxBusy, match=f"husk resume {sb.id}"):
            sb.exec(["true"])
        # A second pause is a no-op; resume() lets it run again.
        sb.pause()
        assert sb.resume() is sb
        assert str(sb.info.state).upper() == "READY"
        assert sb.exec("cat /tmp/x").stdout.text == "kept\n"
        # Sandbox.resume(id) and E2B's connect (which resumes) by id.
        sb.pause()
        again = Sandbox.resume(sb.id, **connect_kw)
        assert str(again.info.state).upper() == "READY"
        sb.pause()
        other = Sandbox.connect(sb.id, **connect_kw)
        assert other.exec("cat /tmp/x").stdout.text == "kept\n"


def test_heartbeat_keeps_an_idle_sandbox_alive(connect_kw):
    # ttl 1.5 s; idle for 3 s. With the heartbeat the lease is renewed every
    # 0.5 s; without it the sandbox expires.
    with Sandbox.create(rootfs="/", ttl="1500ms", **connect_kw) as kept, Sandbox.create(
        rootfs="/", ttl="1500ms", heartbeat=False, **connect_kw
    ) as lost:
        time.sleep(3)
        assert kept.exec("echo still-here").stdout.text == "still-here\n"
        assert kept.heartbeat_error is None
        with pytest.raises(SandboxNotFound, match="expired|no sandbox"):
            lost.exec(["true"])


def test_bad_create_raises_with_husk_message_and_is_not_retried(connect_kw):
    with pytest.raises(HuskError) as e:
        Sandbox.create(rootfs="/no/such/dir", **connect_kw)
    assert not isinstance(e.value, TransientError)
    assert "/no/such/dir" in str(e.value)


def test_ready_cmd_gates_create_and_a_failed_check_raises_not_ready(connect_kw):
    # The image self-check: a sandbox whose interpreter lacks a module is
    # never handed out; the caller gets the check's own verdict.
    with Sandbox.create(rootfs="/", ttl="1m", ready_cmd=["python3", "-c", "import json"], **connect_kw) as sb:
        assert sb.info.state.upper() == "READY" and sb.info.raw["ready_check"]["exit_code"] == 0
        assert sb.exec("echo ok").stdout.text == "ok\n"
    with pytest.raises(NotReady) as e:
        Sandbox.create(rootfs="/", ttl="1m", ready_cmd="python3 -c 'import no_such_module_x'", **connect_kw)
    assert e.value.step == "ready_check" and not isinstance(e.value, TransientError)
    assert e.value.check.exit_code == 1 and "no_such_module_x" in e.value.check.stderr.text
    with pytest.raises(SandboxNotFound):
        Sandbox.attach(e.value.sandbox_id, **connect_kw)
    with pytest.raises(NotReady, match="ready-timeout"):
        Sandbox.create(rootfs="/", ttl="1m", ready_cmd=["sleep", "30"], ready_timeout=0.5, **connect_kw)


def test_secret_env_reaches_the_command_and_never_its_output_or_state(connect_kw, state_dir):
    value = "py-secret-6c1d0b7e"
    # A name that is also one of husk's own variables: it is the sandbox's
    # secret, and never changes what husk itself does.
    with Sandbox.create(rootfs="/", ttl="1m", secret_env={"API_TOKEN": value, "HUSK_NO_CGROUP": value + "-2"}, **connect_kw) as sb:
        r = sb.exec(f'[ "$API_TOKEN" = {value} ] && echo got; echo "$API_TOKEN"; echo "$HUSK_NO_CGROUP" >&2')
        assert r.stdout.text == "got\n[husk: secret API_TOKEN]\n", r.raw
        assert r.stderr.text == "[husk: secret HUSK_NO_CGROUP]\n", r.raw
        assert value not in repr(r.raw)
        assert value not in repr(sb.inspect().raw)
        assert sorted(sb.inspect().raw["secret_names"]) == ["API_TOKEN", "HUSK_NO_CGROUP"]
        assert r.limits["cgroup"] is not None, "a secret's name turned husk's cgroups off"
        state = Path(state_dir, "sandboxes", sb.id, "state.json").read_text()
        assert value not in state
        events = list(sb.stream(f"echo {value}"))
        assert value not in repr([e.raw if hasattr(e, "raw") else e for e in events])
        # An exec's own secret.
        r = sb.exec('echo "$ONE_CALL"', secret_env={"ONE_CALL": "call-secret-41"})
        assert r.stdout.text == "[husk: secret ONE_CALL]\n" and "call-secret-41" not in repr(r.raw), r.raw


@pytest.fixture
def flaky_husk(tmp_path, husk_bin):
    """A husk that fails its first N creates the way a busy host does
    (EAGAIN, as a verdict-shaped error), then is the real husk."""

    def make(failures: int, errno='11'):
        count = tmp_path / "creates"
        count.write_text("0")
        script = tmp_path / "husk"
        script.write_text(
            f"""#!/bin/sh
for a in "$@"; do
  if [ "$a" = create ]; then
    n=$(($(cat {count}) + 1)); echo $n > {count}
    if [ $n -le {failures} ]; then
      echo '{{"termination":"setup_failed","exit_code":125,"error":{{"step":"clone","errno":{errno},"message":"clone3: Resource temporarily unavailable","hint":null}}}}'
      exit 125
    fi
  fi
done
exec {husk_bin} "$@"
"""
        )
        script.chmod(0o755)
        return str(script), count

    return make


def test_transient_create_failures_are_retried_with_bounded_backoff(flaky_husk, state_dir):
    bin_, count = flaky_husk(2)
    with Sandbox.create(rootfs="/", ttl="1m", transport="cli", husk_bin=bin_, state_dir=state_dir, backoff=0.01) as sb:
        assert sb.exec(["echo", "ok"]).stdout.text == "ok\n"
    assert count.read_text().strip() == "3"
    bin_, count = flaky_husk(10)
    with pytest.raises(TransientError) as e:
        Sandbox.create(rootfs="/", transport="cli", husk_bin=bin_, state_dir=state_dir, retries=2, backoff=0.01)
    assert count.read_text().strip() == "3"  # 1 try + 2 retries, then the error
    assert e.value.errno == 11 and e.value.verdict["termination"] == "setup_failed"


def test_symbolic_errno_is_transient(flaky_husk, state_dir):
    # husk names errnos symbolically ("EAGAIN"), as every verdict does: the
    # documented retry must fire on what husk really says.
    bin_, count = flaky_husk(2, errno='"EAGAIN"')
    with Sandbox.create(rootfs="/", ttl="1m", transport="cli", husk_bin=bin_, state_dir=state_dir, backoff=0.01) as sb:
        assert sb.exec(["echo", "ok"]).stdout.text == "ok\n"
    assert count.read_text().strip() == "3"
    bin_, count = flaky_husk(1, errno='"EINVAL"')
    with pytest.raises(HuskError) as e:
        Sandbox.create(rootfs="/", transport="cli", husk_bin=bin_, state_dir=state_dir, backoff=0.01)
    assert not isinstance(e.value, TransientError) and e.value.errno == "EINVAL"
    assert count.read_text().strip() == "1"


def test_husk_runtime_run_returns_trimmed_output(connect_kw):
    with HuskRuntime(rootfs="/", ttl="1m", timeout="2s", **connect_kw) as rt:
        assert rt.run("echo '  hello  '; echo") == "hello"
        assert rt.run("echo out; echo err >&2") == "out\nerr"
        assert rt.run("echo persisted > f.txt") == ""
        assert rt.run("cat f.txt") == "persisted"
        assert rt.run("echo partial; exit 3") == "partial\n[exit code 3]"
        assert rt.run("sleep 10") == "[timed out after 2s]"
        assert rt.run("python3 -c 'print(6*7)'") == "42"
        sid = rt.sandbox.id
    # Closed with the runtime.
    ls = subprocess.run(
        [connect_kw["husk_bin"], "--state-dir", connect_kw["state_dir"], "ls", "--json"], capture_output=True, text=True
    )
    assert sid not in ls.stdout


def test_agent_tool_example_runs(husk_bin, state_dir):
    env = dict(os.environ, HUSK_BIN=husk_bin, HUSK_STATE_DIR=state_dir, HUSK_EXAMPLE_ROOTFS="/", HUSK_EXAMPLE_TIMEOUT="1s")
    env["PYTHONPATH"] = str(REPO / "clients/python")
    p = subprocess.run(
        [sys.executable, str(REPO / "clients/python/examples/agent_tool.py")], capture_output=True, text=True, env=env
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["", "42", "[exit code 2]", "[timed out after 1s]"]
