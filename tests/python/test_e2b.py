"""The unmodified E2B SDKs against `husk serve` (docs/e2b.md): PyPI's
`e2b` and `e2b-code-interpreter` (pinned in scripts/test.sh) and npm's
`e2b` / `@e2b/code-interpreter`, configured only by the environment a user
exports (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). The template is "/",
the host's root read-only (it has python3 and bash)."""

import json
import os
import subprocess
import time

import pytest

e2b = pytest.importorskip("e2b", reason="pip install e2b==2.64.0 e2b-code-interpreter==2.11.5 (scripts/test.sh)")
e2b_ci = pytest.importorskip("e2b_code_interpreter")
from e2b import AuthenticationException, CommandExitException, NotFoundException, SandboxException  # noqa: E402
from e2b_code_interpreter import Sandbox  # noqa: E402

TEMPLATE = "/"


@pytest.fixture(scope="module")
def e2b_serve(husk_bin, state_dir, tmp_path_factory):
    """`husk serve` on a free loopback port with a token; the exports."""
    d = tmp_path_factory.mktemp("e2b")
    token = d / "token"
    token.write_text(os.urandom(16).hex())
    p = subprocess.Popen(
        [husk_bin, "--state-dir", state_dir, "serve", "--listen", "127.0.0.1:0", "--token-file", str(token)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = p.stdout.readline()
        if "listening on" not in line:
            pytest.fail(f"husk serve did not start: {line!r} {p.stderr.read()}")
        addr = line.strip().rsplit(" ", 1)[1]
        yield {
            "E2B_API_URL": f"http://{addr}",
            "E2B_SANDBOX_URL": f"http://{addr}",
            "E2B_API_KEY": token.read_text(),
        }
    finally:
        p.terminate()
        p.wait(timeout=30)


@pytest.fixture
def env(e2b_serve, monkeypatch):
    for k, v in e2b_serve.items():
        monkeypatch.setenv(k, v)
    return e2b_serve


@pytest.fixture
def sbx(env):
    s = Sandbox.create(template=TEMPLATE, timeout=120)
    yield s
    try:
        s.kill()
    except NotFoundException:
        pass


def listed(**kw):
    return [s.sandbox_id for s in Sandbox.list(**kw).next_items()]


def test_e2b_python_sdk_quickstart_runs_unchanged(env):
    s = Sandbox.create(template=TEMPLATE, timeout=60, envs={"GREETING": "hello"}, metadata={"owner": "e2b-test"})
    try:
        r = s.commands.run("echo $GREETING from $(pwd)")
        assert r.exit_code == 0 and r.stdout.startswith("hello from "), r
        # list, filtered by the metadata it was made with
        from e2b import SandboxQuery

        assert s.sandbox_id in listed(query=SandboxQuery(metadata={"owner": "e2b-test"}))
        assert s.sandbox_id not in listed(query=SandboxQuery(metadata={"owner": "someone-else"}))
        info = Sandbox.get_info(s.sandbox_id)
        assert info.metadata == {"owner": "e2b-test"} and info.template_id == TEMPLATE
        # set_timeout moves the end
        s.set_timeout(600)
        later = Sandbox.get_info(s.sandbox_id).end_at
        assert (later - info.end_at).total_seconds() > 300, (info.end_at, later)
        # connect from another handle: the same sandbox
        again = Sandbox.connect(s.sandbox_id)
        again.files.write("/tmp/mark", "here")
        assert s.files.read("/tmp/mark") == "here"
        assert s.get_host(8080).startswith("8080-")
    finally:
        s.kill()
    assert s.sandbox_id not in listed()
    with pytest.raises(NotFoundException):
        Sandbox.connect(s.sandbox_id)


def test_e2b_code_interpreter_contexts_and_results(sbx):
    out, err, errors = [], [], []
    sbx.run_code("x = 41", on_stdout=out.append)
    ex = sbx.run_code(
        "import sys\nprint(x + 1)\nprint('warn', file=sys.stderr)",
        on_stdout=lambda m: out.append(m.line),
        on_stderr=lambda m: err.append(m.line),
    )
    # State is kept between calls, as in a notebook.
    assert ex.logs.stdout == ["42\n"] and out == ["42\n"], (ex, out)
    assert err == ["warn\n"] and ex.error is None
    ex = sbx.run_code("1/0", on_error=errors.append)
    assert ex.error.name == "ZeroDivisionError" and ex.error.value == "division by zero", ex.error
    assert errors and errors[0].name == "ZeroDivisionError"
    assert "ZeroDivisionError" in ex.error.traceback
    assert "husk-warm-shim" not in ex.error.traceback, ex.error.traceback
    # Results as a notebook gives them: the last expression, display(), a figure.
    results = []
    ex = sbx.run_code("display({'k': 1})\nx + 1", on_result=results.append)
    assert ex.text == "42" and [r.text for r in ex.results] == ["{'k': 1}", "42"], ex
    assert [r.is_main_result for r in results] == [False, True]
    ex = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    assert len(ex.results) == 1 and ex.results[0].png, ex
    # a bash context, in its own cwd
    c = sbx.create_code_context(language="bash", cwd="/tmp")
    assert c.language == "bash"
    ex = sbx.run_code("echo $((6 * 7)) in $(pwd)", context=c)
    assert ex.logs.stdout == ["42 in /tmp\n"], ex
    # a python context shares the sandbox's session
    p = sbx.create_code_context(language="python")
    assert sbx.run_code("print(x)", context=p).logs.stdout == ["41\n"]
    assert sbx.run_code("echo hi", language="bash").logs.stdout == ["hi\n"]
    with pytest.raises(SandboxException):
        sbx.run_code("1", language="cobol")


def test_e2b_background_command_kill_and_wait(sbx):
    h = sbx.commands.run("sleep 60", background=True)
    assert h.pid in [p.pid for p in sbx.commands.list()]
    # Other calls run beside it (the sandbox is --concurrent).
    assert sbx.commands.run("echo beside").stdout == "beside\n"
    t = time.monotonic()
    assert h.kill() is True
    with pytest.raises(CommandExitException):
        h.wait()
    assert time.monotonic() - t < 30, "kill did not end the command"
    assert h.pid not in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(h.pid) is False

    h = sbx.commands.run("read a; echo got $a; read b; echo got $b", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "one\n")
    sbx.commands.send_stdin(h.pid, "two\n")
    seen = []
    r = h.wait(on_stdout=seen.append)
    assert r.stdout == "got one\ngot two\n" and "".join(seen) == r.stdout

    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo out; exit 3")
    assert e.value.exit_code == 3 and e.value.stdout == "out\n"
    r = sbx.commands.run("echo $X in $(pwd) as $(id -u)", envs={"X": "y"}, cwd="/tmp", user="root")
    assert r.stdout == "y in /tmp as 0\n", r


def test_e2b_files_read_write_list_and_info(sbx):
    info = sbx.files.write("/tmp/a/b/c.txt", "deep")  # parents are made
    assert info.path == "/tmp/a/b/c.txt" and info.name == "c.txt"
    assert sbx.files.read("/tmp/a/b/c.txt") == "deep"
    sbx.files.write("/tmp/a/bin", b"\x00\xff\x10")
    assert bytes(sbx.files.read("/tmp/a/bin", format="bytes")) == b"\x00\xff\x10"
    assert sorted(e.name for e in sbx.files.list("/tmp/a")) == ["b", "bin"]
    assert sbx.files.exists("/tmp/a/b/c.txt") and not sbx.files.exists("/tmp/a/nope")
    st = sbx.files.get_info("/tmp/a/b/c.txt")
    assert st.size == 4 and st.type.value == "file" and st.permissions.startswith("-rw")
    assert sbx.files.get_info("/tmp/a/b").type.value == "dir"
    assert sbx.files.make_dir("/tmp/a/new") is True
    assert sbx.files.make_dir("/tmp/a/new") is False
    moved = sbx.files.rename("/tmp/a/b/c.txt", "/tmp/a/new/c2.txt")
    assert moved.path == "/tmp/a/new/c2.txt" and sbx.files.read("/tmp/a/new/c2.txt") == "deep"
    sbx.files.remove("/tmp/a/new")
    assert not sbx.files.exists("/tmp/a/new/c2.txt")
    with pytest.raises(e2b.FileNotFoundException):
        sbx.files.read("/tmp/a/nope")


def test_e2b_what_husk_cannot_do_answers_not_supported(sbx, env, monkeypatch):
    t = time.monotonic()
    with pytest.raises(SandboxException, match="not supported"):
        sbx.files.watch_dir("/tmp")
    with pytest.raises(SandboxException, match="not supported"):
        sbx.pause()
    assert time.monotonic() - t < 30
    monkeypatch.setenv("E2B_API_KEY", "not-the-token-at-all")
    with pytest.raises(AuthenticationException):
        Sandbox.create(template=TEMPLATE)


JS = r"""
const { Sandbox } = require('@e2b/code-interpreter')
async function main() {
  const sbx = await Sandbox.create('/', { timeoutMs: 60000, envs: { FOO: 'bar' }, metadata: { who: 'js' } })
  const out = {}
  try {
    out.run = (await sbx.commands.run('echo hi $FOO')).stdout
    await sbx.files.write('/tmp/j.txt', 'from js')
    out.read = await sbx.files.read('/tmp/j.txt')
    out.code = (await sbx.runCode('x = 20\nprint(x * 2)')).logs.stdout
    const h = await sbx.commands.run('sleep 60', { background: true })
    out.listed = (await sbx.commands.list()).map(p => p.pid).includes(h.pid)
    out.killed = await h.kill()
    out.sandboxes = (await Sandbox.list().nextItems()).map(s => s.sandboxId).includes(sbx.sandboxId)
  } finally {
    await sbx.kill()
  }
  console.log(JSON.stringify(out))
}
main().catch(e => { console.error(e); process.exit(1) })
"""


def test_e2b_js_sdk_quickstart_runs_unchanged(env, tmp_path):
    mods = os.environ.get("HUSK_E2B_NODE_MODULES")
    if not mods or not os.path.isdir(os.path.join(mods, "@e2b", "code-interpreter")):
        pytest.skip("HUSK_E2B_NODE_MODULES: npm install e2b@2.51.0 @e2b/code-interpreter@2.8.0 (scripts/test.sh)")
    script = tmp_path / "quickstart.js"
    script.write_text(JS)
    r = subprocess.run(
        ["node", str(script)], env={**os.environ, "NODE_PATH": mods}, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {
        "run": "hi bar\n",
        "read": "from js",
        "code": ["40\n"],
        "listed": True,
        "killed": True,
        "sandboxes": True,
    }, out
