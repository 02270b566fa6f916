#!/usr/bin/env bash
# Runs the shell examples of the docs as written, so a doc that drifts from
# husk fails the suite (scripts/test.sh runs it; run it alone as root):
#
#   scripts/doc-run.sh [FILE.md...]      default: README.md docs/*.md clients/python/README.md
#
# Which blocks run: every fenced block opened with ```sh. Blocks in other
# fences (```console for transcripts with `$ ` prompts and output, ```text,
# ```json, a bare ```) are never run. A ```sh block is held back by an HTML
# comment on the line(s) just above its fence (the prose next to it says
# why, for readers):
#
#   <!-- doc-run: skip REASON -->     not run (a build, an install, a placeholder)
#   <!-- doc-run: needs python -->    run with an image named `python` in the
#                                     store: HUSK_DOC_PYTHON=LAYOUT, else the demo's
#                                     build/images/python (scripts/build-images.sh),
#                                     else one built from the host's python3 by
#                                     scripts/host-python-image.sh (seconds, offline;
#                                     the demo's config, no numpy or pip)
#
# A ```python block runs (python3, the client of clients/python on
# PYTHONPATH) only when marked `needs python`: the client's examples.
#
# Environment of each FILE (its blocks run in order and share it, as a
# reader's shell would; each block is its own `bash -e -o pipefail`):
#   - a fresh temp dir: HUSK_ROOT and HUSK_STATE_DIR under it, DOCKER_CONFIG
#     empty; the cwd is a work dir holding the files the examples name:
#     ./src (main.py, Makefile), ./project, script.py, job.py, job.sh,
#     notes.txt, db.pw, and scripts/ (the checkout's, read-only use: the
#     examples build their ./busybox-root with scripts/build-busybox-rootfs.sh);
#   - `husk` on PATH is the built binary (HUSK_BIN, else target/.../debug/husk);
#   - with `needs python`, the image imported as `python` into that store.
# Each block has HUSK_DOC_TIMEOUT seconds (default 120), then its process
# group is killed; whatever a block left running in the background (husk
# serve &, a registry) is killed when it ends (its process group), and every
# sandbox of the file's private state dir is removed when the file is done.
# A failing block is reported with FILE:LINE, the block and its output; the
# exit status is 1 if any block failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "doc-run: run as root (the examples create sandboxes with cgroup limits)" >&2; exit 1; }
HUSK_BIN=${HUSK_BIN:-$here/target/x86_64-unknown-linux-gnu/debug/husk}
[ -x "$HUSK_BIN" ] || { echo "doc-run: no husk binary at $HUSK_BIN (cargo build, or set HUSK_BIN)" >&2; exit 1; }
scratch=$(mktemp -d /tmp/husk-doc-run.XXXXXX)
cleanup() { rm -rf "$scratch"; }
trap cleanup EXIT
python_layout=${HUSK_DOC_PYTHON:-}
if [ -z "$python_layout" ] && [ -f "$here/build/images/python/index.json" ]; then
    python_layout=$here/build/images/python
fi
# Neither: the host's python3 as the image (the demo's needs a Debian mirror
# and minutes). Should that fail, those blocks are listed as not run, why
# printed here.
if [ -z "$python_layout" ]; then
    if "$here/scripts/host-python-image.sh" "$scratch/python" >"$scratch/python.log" 2>&1; then
        python_layout=$scratch/python
    else
        echo "doc-run: no python image: scripts/host-python-image.sh failed:" >&2
        cat "$scratch/python.log" >&2
    fi
fi
[ "$#" -gt 0 ] || set -- "$here/README.md" "$here"/docs/*.md "$here/clients/python/README.md"
export HUSK_BIN
export DOC_RUN_REPO=$here DOC_RUN_SCRATCH=$scratch DOC_RUN_PYTHON=$python_layout DOC_RUN_TIMEOUT=${HUSK_DOC_TIMEOUT:-120}
python3 - "$@" <<'PY'
import os, re, signal, subprocess, sys, tempfile, time

FENCE = re.compile(r"^```\s*([A-Za-z0-9_+-]*)\s*$")
MARK = re.compile(r"^<!--\s*doc-run:\s*(skip|needs)\s*(.*?)\s*-->\s*$")
SCRATCH, PYTHON = os.environ["DOC_RUN_SCRATCH"], os.environ["DOC_RUN_PYTHON"]
TIMEOUT = int(os.environ["DOC_RUN_TIMEOUT"])
HUSK_BIN = os.environ["HUSK_BIN"]
REPO = os.environ["DOC_RUN_REPO"]

def blocks(path):
    """(line of the fence, language, text, marker) of every fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        # The marker: the nearest non-blank line above the fence.
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = MARK.match(lines[k]) if k >= 0 else None
        out.append((start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", mark and (mark.group(1), mark.group(2))))
        i = j + 1
    return out

FIXTURES = {
    "src/main.py": "print('hello from src')\n",
    "src/Makefile": "all:\n\tmkdir -p ../out && echo built > ../out/result.txt\n",
    "project/main.py": "print('hello from project')\n",
    "project/out/result.txt": "result\n",
    "script.py": "print(6 * 7)\n",
    "job.py": "print('job done')\n",
    "job.sh": "echo job done\n",
    "notes.txt": "some notes\n",
    "db.pw": "hunter2\n",
}

def environment(root):
    work = os.path.join(root, "work")
    os.makedirs(work)
    for name, text in FIXTURES.items():
        p = os.path.join(work, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    os.symlink(os.path.join(REPO, "scripts"), os.path.join(work, "scripts"))
    if PYTHON:
        # The quick start's path (scripts/build-images.sh writes it there).
        os.makedirs(os.path.join(work, "build/images"))
        os.symlink(PYTHON, os.path.join(work, "build/images/python"))
    bindir = os.path.join(root, "bin")
    os.makedirs(bindir)
    os.symlink(HUSK_BIN, os.path.join(bindir, "husk"))
    os.makedirs(os.path.join(root, "docker"))
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("HUSK_"):
            del env[k]
    env.update(
        PATH=bindir + ":" + env.get("PATH", "/usr/bin:/bin"),
        HUSK_ROOT=os.path.join(root, "store"),
        HUSK_STATE_DIR=os.path.join(root, "state"),
        DOCKER_CONFIG=os.path.join(root, "docker"),
        PYTHONPATH=os.path.join(REPO, "clients/python"),
    )
    return work, env

def run(text, work, env):
    """Runs one block in its own process group; (status, output). The
    output goes to a file: a background process the block started (husk
    serve &) keeps its stdout open after the block's shell is gone."""
    with tempfile.TemporaryFile(dir=SCRATCH) as log:
        p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=work, env=env,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            status = p.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            status = "timeout"
        # What the block left running (husk serve &, a registry): its group.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        p.wait()
        log.seek(0)
        out = log.read().decode(errors="replace")
    if status == "timeout":
        out += f"\n[doc-run: killed after {TIMEOUT}s]\n"
    return status, out

ran, failed, held, unfenced = 0, [], [], []
for path in sys.argv[1:]:
    shown = os.path.relpath(path)
    every = blocks(path)
    # Commands in another fence are never run: listed, to keep them few.
    for line, lang, text, _ in every:
        first = text.lstrip().split("\n")[0]
        if lang in ("", "console", "bash", "shell", "text") and re.match(r"(\$ )?(husk|curl|sudo|docker|ctr|pip) ", first):
            unfenced.append(f"{shown}:{line} (```{lang})")
    todo = [b for b in every if b[1] == "sh" or (b[1] == "python" and b[3] == ("needs", "python"))]
    if not todo:
        continue
    root = tempfile.mkdtemp(prefix="file.", dir=SCRATCH)
    work, env = environment(root)
    imported = False
    for line, lang, text, mark in todo:
        where = f"{shown}:{line}"
        if mark and mark[0] == "skip":
            held.append((where, mark[1] or "skip"))
            continue
        if mark and mark[0] == "needs":
            if mark[1] != "python":
                failed.append((where, text, f"[doc-run: unknown need {mark[1]!r}]", "marker"))
                continue
            if not PYTHON:
                held.append((where, "needs the python image (scripts/host-python-image.sh failed; or HUSK_DOC_PYTHON=LAYOUT)"))
                continue
            if not imported:
                st, out = run(f"husk image import {PYTHON} --name python", work, env)
                if st != 0:
                    failed.append((where, "husk image import (the python image)", out, st))
                    continue
                imported = True
        ran += 1
        t0 = time.monotonic()
        st, out = run(text if lang == "sh" else "exec python3 - <<'DOC_RUN_PY'\n" + text + "DOC_RUN_PY\n", work, env)
        took = time.monotonic() - t0
        if st == 0:
            print(f"ok      {where} ({took:.1f}s)", flush=True)
        else:
            print(f"FAILED  {where} ({took:.1f}s, exit {st})", flush=True)
            failed.append((where, text, out, st))
    subprocess.run(["husk", "rm", "--all", "--force"], env=env, cwd=work,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

for where, reason in held:
    print(f"not run {where}: {reason}")
if unfenced:
    print("not run, commands outside ```sh fences (synopses, transcripts, placeholders): " + ", ".join(unfenced))
for where, text, out, st in failed:
    print(f"\n=== FAILED {where} (exit {st})\n--- block:\n{text}--- output:\n{out[-4000:]}")
print(f"\ndoc-run: {ran} blocks run, {len(failed)} failed, {len(held)} not run")
sys.exit(1 if failed else 0)
PY
