"""What an E2B user expects of the client (issue 32, item 5): the asyncio
surface, Sandbox.list/kill/connect, a lease that survives a serve restart,
husk's symbolic errnos, errors labelled for what they are, the create
record's published ports, run_code's timeout/cwd/output_limit."""

import asyncio
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import pytest

import husk
from husk import AsyncSandbox, HuskError, NameTaken, OutputChunk, Sandbox, SandboxBusy, SandboxNotFound, TransientError
from husk._http import HttpTransport


def start_serve(husk_bin, state_dir):
    """A private `husk serve` on <state_dir>/api.sock (this file stops,
    pauses and restarts it, which the session's serve must not suffer)."""
    sock = os.path.join(state_dir, "api.sock")
    p = subprocess.Popen([husk_bin, "--state-dir", state_dir, "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = HttpTransport(socket_path=sock)
    for _ in range(500):
        if p.poll() is not None:
            pytest.fail(f"husk serve exited {p.returncode}: {p.stderr.read().decode(errors='replace')}")
        if os.path.exists(sock):
            try:
                t.health()
                return p, sock
            except HuskError:
                pass
        time.sleep(0.02)
    p.kill()
    pytest.fail("husk serve did not answer /v1/health within 10 s")


def stop_serve(p):
    if p.poll() is None:
        os.kill(p.pid, signal.SIGCONT)
        p.terminate()
    p.wait(timeout=30)


@pytest.fixture
def private_state(tmp_path, husk_bin):
    d = str(tmp_path / "state")
    os.makedirs(d)
    yield d
    subprocess.run([husk_bin, "--state-dir", d, "rm", "--all"], capture_output=True)


def test_async_client_parity(connect_kw, tmp_path):
    async def main():
        async with await AsyncSandbox.create(rootfs="/", ttl="1m", labels={"suite": "async"}, **connect_kw) as sb:
            r = await sb.exec(["sh", "-c", "echo out; exit 3"])
            assert (r.exit_code, r.stdout.text) == (3, "out\n")
            assert (await sb.run_code("print(6 * 7)")).stdout.text == "42\n"
            await sb.write_file("/tmp/a.txt", "hello")
            assert await sb.read_text("/tmp/a.txt") == "hello"
            assert "a.txt" in [e.name for e in await sb.list_files("/tmp")]
            evs = [ev async for ev in sb.stream("echo one; echo two")]
            assert b"".join(e.data for e in evs if isinstance(e, OutputChunk)) == b"one\ntwo\n"
            assert evs[-1].exit_code == 0
            # Concurrent calls on one loop: two sandboxes' execs overlap.
            async with await AsyncSandbox.create(rootfs="/", ttl="1m", **connect_kw) as other:
                a, b = await asyncio.gather(sb.exec("sleep 0.3; echo a"), other.exec("sleep 0.3; echo b"))
                assert (a.stdout.text, b.stdout.text) == ("a\n", "b\n")
            listed = await AsyncSandbox.list(labels={"suite": "async"}, **connect_kw)
            assert [i.id for i in listed] == [sb.id]
            again = await AsyncSandbox.connect(sb.id, **connect_kw)
            assert (await again.exec("cat /tmp/a.txt")).stdout.text == "hello"
            assert await sb.is_running()
            assert await AsyncSandbox.kill(sb.id, **connect_kw) is True
            assert await AsyncSandbox.kill(sb.id, **connect_kw) is False
            assert not await sb.is_running()

    asyncio.run(main())


def test_sync_list_kill_connect_as_e2b_names_them(connect_kw):
    sb = Sandbox.create(rootfs="/", ttl="1m", labels={"suite": "e2b-names"}, **connect_kw)
    try:
        assert [i.id for i in Sandbox.list(labels={"suite": "e2b-names"}, **connect_kw)] == [sb.sandbox_id]
        other = Sandbox.connect(sb.id, **connect_kw)
        assert other.exec("echo hi").stdout.text == "hi\n"
        assert Sandbox.kill(sb.id, **connect_kw) is True
        assert Sandbox.kill(sb.id, **connect_kw) is False
        assert Sandbox.list(labels={"suite": "e2b-names"}, **connect_kw) == []
        with pytest.raises(SandboxNotFound):
            Sandbox.connect(sb.id, **connect_kw)
    finally:
        assert sb.kill() is True  # the handle was still open
        assert sb.kill() is False


def test_module_connect_is_a_deprecated_alias_of_open_transport(husk_bin, state_dir):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = husk.connect("cli", husk_bin=husk_bin, state_dir=state_dir)
    assert t.name == "cli"
    assert [x.category for x in w] == [DeprecationWarning] and "open_transport" in str(w[0].message)
    assert husk.open_transport("cli", husk_bin=husk_bin, state_dir=state_dir).name == "cli"


def test_package_is_typed():
    assert (Path(husk.__file__).parent / "py.typed").exists()


def test_heartbeat_survives_serve_restart(husk_bin, private_state):
    # ttl 6 s (renewed every 2 s); serve is gone for 3 s, which is when a
    # renewal falls. The lease must still be renewed once serve is back,
    # and the sandbox alive well past its ttl.
    p, sock = start_serve(husk_bin, private_state)
    try:
        with Sandbox.create(rootfs="/", ttl="6s", transport="serve", socket=sock) as sb:
            # Stop serve just after the heartbeat's first renewal (the
            # lease's end moves): the next ones fall in the outage.
            first = sb.inspect().raw["expires_ms"]
            while sb.inspect().raw["expires_ms"] == first:
                time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
            time.sleep(3)
            assert isinstance(sb.heartbeat_error, TransientError), sb.heartbeat_error
            p, _ = start_serve(husk_bin, private_state)
            time.sleep(6)  # past the ttl counted from the last renewal before the stop
            assert sb.exec("echo alive").stdout.text == "alive\n"
            assert sb.heartbeat_error is None
    finally:
        stop_serve(p)


def test_exec_read_timeout_is_not_connect_step(husk_bin, private_state):
    p, sock = start_serve(husk_bin, private_state)
    try:
        t = HttpTransport(socket_path=sock, exec_grace=0.5)
        with Sandbox.create(rootfs="/", ttl="1m", transport=t) as sb:
            # A paused serve: the connection is made (the kernel accepts it
            # into the backlog), the answer never comes.
            os.kill(p.pid, signal.SIGSTOP)
            try:
                with pytest.raises(HuskError) as e:
                    sb.exec("true", timeout="200ms")
            finally:
                os.kill(p.pid, signal.SIGCONT)
            assert e.value.step == "response", e.value
            assert not isinstance(e.value, TransientError), "an exec that may have run is not retried blindly"
            assert "no answer within" in str(e.value)
    finally:
        stop_serve(p)
    # And a serve that is not there at all is a connect failure, transient.
    with pytest.raises(TransientError) as e:
        HttpTransport(socket_path=sock).exec("x", {"argv": ["true"]})
    assert e.value.step == "connect"


def test_duplicate_name_is_not_busy(connect_kw):
    with Sandbox.create(rootfs="/", ttl="1m", name="parity-dup", **connect_kw):
        with pytest.raises(NameTaken) as e:
            Sandbox.create(rootfs="/", ttl="1m", name="parity-dup", **connect_kw)
        assert not isinstance(e.value, SandboxBusy)
        assert "parity-dup" in str(e.value)


def test_create_record_has_published(connect_kw):
    with Sandbox.create(rootfs="/", ttl="1m", publish=["127.0.0.1:0:8000"], **connect_kw) as sb:
        pub = sb.info.raw["published"]
        assert len(pub) == 1 and pub[0]["host_ip"] == "127.0.0.1" and pub[0]["port"] == 8000
        assert pub[0]["host_port"] > 0 and sb.info.published == pub
        assert sb.inspect().raw["published"] == pub
    with Sandbox.create(rootfs="/", ttl="1m", **connect_kw) as sb:
        assert sb.info.raw["published"] == []


def test_run_code_takes_timeout_cwd_output_limit(sandbox):
    r = sandbox.run_code("import os; print(os.getcwd())", cwd="/tmp")
    assert r.stdout.text == "/tmp\n", r.raw
    r = sandbox.run_code("print('x' * 10000)", output_limit=1000)
    assert r.stdout.truncated and r.stdout.bytes == 10001, r.raw
    r = sandbox.run_code("import time; print('started', flush=True); time.sleep(30)", timeout="500ms")
    assert r.timed_out and r.stdout.text == "started\n"
    # On by default (the verdict does not echo a timeout: what is sent is
    # checked): code that never ends does not hold the sandbox forever.
    sent = []
    real = sandbox._t.exec
    sandbox._t.exec = lambda sid, opts: sent.append(opts) or real(sid, opts)
    try:
        assert sandbox.run_code("print(1)").stdout.text == "1\n"
        assert sandbox.run_code("print(2)", timeout=None).stdout.text == "2\n"
    finally:
        del sandbox._t.exec
    assert [o.get("timeout") for o in sent] == ["300s", None]
