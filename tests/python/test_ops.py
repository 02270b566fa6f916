"""Sandbox.fork and Sandbox.commit through both transports (the CLI's `husk
fork`/`husk commit`, serve's POST .../fork and .../commit): the same
results and the same errors. Forks need an image's sandbox, so these tests
import the busybox test rootfs as an image into a private store."""

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time

import pytest

from husk import Sandbox
from husk._cli import CliTransport
from husk._http import HttpTransport
from husk.errors import SandboxNotFound

ROOTFS = os.environ.get("HUSK_BUSYBOX_ROOTFS", "/work/fixtures/rootfs")


def _blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return {"digest": f"sha256:{d}", "size": len(data)}


def _layout(layout):
    """An OCI layout with the busybox rootfs as its one layer."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        t.add(ROOTFS, arcname=".")
    layer = buf.getvalue()
    lb = _blob(layout, layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [lb["digest"]]},
    }
    cb = _blob(layout, json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cb},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **lb}],
    }
    mb = _blob(layout, json.dumps(manifest).encode())
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **mb}]}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)


@pytest.fixture(scope="module")
def store(tmp_path_factory, husk_bin):
    """A private store with busybox as `bb`, a private state dir, and a
    `husk serve` on them; everything removed at the end."""
    if not os.path.isdir(ROOTFS):
        pytest.fail(f"no busybox rootfs at {ROOTFS} (set HUSK_BUSYBOX_ROOTFS)")
    base = tmp_path_factory.mktemp("husk-ops")
    root, state, layout = str(base / "store"), str(base / "state"), str(base / "bb")
    _layout(layout)
    subprocess.run([husk_bin, "--root", root, "image", "import", layout, "--name", "bb"], check=True, capture_output=True)
    sock = os.path.join(state, "api.sock")
    p = subprocess.Popen(
        [husk_bin, "--root", root, "--state-dir", state, "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        http = HttpTransport(socket_path=sock)
        for _ in range(500):
            try:
                http.health()
                break
            except Exception:
                time.sleep(0.02)
        else:
            pytest.fail("husk serve did not answer")
        yield {"root": root, "state": state, "sock": sock}
    finally:
        p.terminate()
        p.wait(timeout=30)
        subprocess.run([husk_bin, "--root", root, "--state-dir", state, "rm", "--all"], capture_output=True)


def transport_of(name, store, husk_bin):
    if name == "serve":
        return HttpTransport(socket_path=store["sock"])
    return CliTransport(husk_bin=husk_bin, state_dir=store["state"], root=store["root"])


@pytest.fixture(params=["cli", "serve"])
def t(request, store, husk_bin):
    return transport_of(request.param, store, husk_bin)


def test_fork_gives_sandboxes_that_start_from_the_source_files(t):
    with Sandbox.create(image="bb", workdir="/work", ttl="2m", transport=t) as sb:
        sb.exec("echo base > state", check=True)
        forks = sb.fork(count=2, labels={"made": "by-test"})
        try:
            assert len(forks) == 2 and len({f.id for f in forks} | {sb.id}) == 3
            for i, f in enumerate(forks):
                assert f.exec("cat state").stdout.text == "base\n"
                f.exec(f"echo fork{i} > state", check=True)
                assert f.inspect().labels.get("made") == "by-test"
            assert [f.exec("cat state").stdout.text for f in forks] == ["fork0\n", "fork1\n"]
            assert sb.exec("cat state").stdout.text == "base\n", "the source is untouched"
        finally:
            for f in forks:
                f.close()


def test_commit_stores_an_image_new_sandboxes_run_on(t):
    tag = f"saved-{t.name}:1"
    with Sandbox.create(image="bb", workdir="/work", ttl="2m", transport=t) as sb:
        sb.exec("echo kept > note", check=True)
        got = sb.commit(tag)
        assert got["name"].endswith(tag) and got["id"].startswith("sha256:")
        assert got["changes"]["changed"] >= 1
    with Sandbox.create(image=tag, workdir="/work", ttl="2m", transport=t) as again:
        assert again.exec("cat note").stdout.text == "kept\n"


def test_fork_and_commit_of_a_removed_sandbox_fail_alike_through_both(store, husk_bin):
    cli, serve = transport_of("cli", store, husk_bin), transport_of("serve", store, husk_bin)
    sb = Sandbox.create(image="bb", ttl="2m", transport=cli)
    sb.close()
    said = {}
    for name, tr in (("cli", cli), ("serve", serve)):
        gone = Sandbox(tr, sb.info)
        with pytest.raises(SandboxNotFound) as fork_err:
            gone.fork()
        with pytest.raises(SandboxNotFound) as commit_err:
            gone.commit("never:1")
        said[name] = (fork_err.value.message, commit_err.value.message)
        # The step: the CLI's `sandbox`, serve's 404 `lookup` (docs/api.md).
        assert fork_err.value.step == commit_err.value.step == ("sandbox" if name == "cli" else "lookup")
    assert said["cli"] == said["serve"], said
    assert sb.id in said["cli"][0]


def test_mcp_fork_and_commit_tools_match_their_output_schemas(store, husk_bin):
    """fork_sandbox and commit_sandbox through the official MCP SDK (which
    checks each successful result against the tool's outputSchema)."""
    import asyncio

    import jsonschema
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def main():
        params = StdioServerParameters(
            command=husk_bin,
            args=["--root", store["root"], "--state-dir", store["state"], "mcp", "--image", "bb", "--ttl", "2m"],
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                schemas = {t.name: t.output_schema for t in (await s.list_tools()).tools}
                sid = (await s.call_tool("create_sandbox", {})).structured_content["sandbox_id"]
                await s.call_tool("exec", {"sandbox_id": sid, "command": "echo mcp > mine"})
                forked = await s.call_tool("fork_sandbox", {"sandbox_id": sid, "count": 2})
                committed = await s.call_tool("commit_sandbox", {"sandbox_id": sid, "tag": "mine:1"})
                ids = forked.structured_content["sandbox_ids"]
                seen = [
                    (await s.call_tool("exec", {"sandbox_id": i, "command": "cat mine"})).structured_content
                    for i in ids
                ]
                missing = await s.call_tool("fork_sandbox", {"sandbox_id": "nope"})
                return schemas, forked, committed, ids, seen, missing

    schemas, forked, committed, ids, seen, missing = asyncio.run(main())
    for name, result in (("fork_sandbox", forked), ("commit_sandbox", committed)):
        assert not result.is_error, (name, result.content)
        jsonschema.validate(result.structured_content, schemas[name])
    assert len(ids) == 2
    assert all(r["exit_code"] == 0 for r in seen), seen
    assert committed.structured_content["image"] == "mcp/mine:1"
    # Only this session's sandboxes: another id is refused before any call.
    assert missing.is_error
    # The session ended: its sandboxes, forks included, are gone.
    ls = subprocess.run(
        [husk_bin, "--root", store["root"], "--state-dir", store["state"], "ls", "--json"],
        capture_output=True, text=True, check=True,
    )
    left = {x["id"] for x in json.loads(ls.stdout)}
    assert not (set(ids) & left), left
