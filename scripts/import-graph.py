#!/usr/bin/env python3
"""The layering of src/ as a graph of files, checked: no circle, no arrow up.

    scripts/import-graph.py            check; exit 1 on a circle or an arrow up
    scripts/import-graph.py --edges    also print every arrow (file -> file)

A node is one module file (src/a/b.rs, src/a/mod.rs). An arrow A -> B means A
names something of B through a path: `use crate::..`, `super::..`, a child
module declared in A, or an inline `crate::x::y`. A path resolves to the
deepest module file it names (`crate::cgroup::Limits` is cgroup/mod.rs).
Test-only code (`#[cfg(test)]` items and the files they declare) is left out:
tests may borrow from anywhere without shaping the library.

Arrows from a file to its own ancestors (a child naming its parent's shared
types through `super::`) are not counted: a facility's mod.rs is its facade
and wiring, and a child leaning on it is one room, not a circle between rooms.
Circles among siblings and across facilities are counted.

No cmd/ file imports another subcommand's (cmd/mod.rs routes between them;
a subcommand's own folder, cmd/serve/, is one room).

Layers, top down: cmd/ (leaves nothing imports), mcp/ (its tools call the sandbox library), build/ (it runs
sandboxes for RUN steps), sandbox/, backend/, and
everything else below. An arrow from a lower layer to a higher one is an
arrow up. main.rs and lib.rs only declare and dispatch, and are not nodes.

An optional scripts/import-graph.allow lists arrows a reshaping is still
removing (one `from -> to` a line, `#` comments): they are left out of both
checks, and a line that no longer matches an arrow is reported so it can
be deleted.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")
ALLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "import-graph.allow")
LAYERS = ["cmd", "mcp", "build", "sandbox", "backend"]  # top down; the rest is below


def strip(text):
    """Comments, strings and char literals blanked, line breaks kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif re.match(r'b?r#*"', text[i : i + 12]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not text[i - 1].isalnum())):
            i += 2 if c == "b" else 1
            start = i
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", start, i))
            i += 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F}'), or a lifetime ('a) left as is.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_item(text, i):
    """The index after the item starting at i (ends at `;` or a balanced block)."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0 and c == "}":
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


CFG_TEST = re.compile(r"#\[cfg\(test\)\]")


def drop_test_items(text):
    """Text without `#[cfg(test)]` items, and the test-only child modules."""
    test_mods = set()
    out, pos = [], 0
    for m in CFG_TEST.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        j = m.end()
        while True:  # further attributes on the same item
            k = re.match(r"\s*#\[[^\]]*\]", text[j:])
            if not k:
                break
            j += k.end()
        decl = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text[j:])
        if decl:
            test_mods.add(decl.group(1))
        end = skip_item(text, j)
        out.append("\n" * text.count("\n", m.start(), end))
        pos = end
    out.append(text[pos:])
    return "".join(out), test_mods


def modules():
    """{module path tuple: file} for every file reachable from lib.rs, test-only left out."""
    found = {}

    def visit(path, file, child_dir):
        found[path] = file
        text, test_mods = drop_test_items(strip(open(file, encoding="utf-8").read()))
        for m in re.finditer(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            name = m.group(1)
            if name in test_mods:
                continue
            a = os.path.join(child_dir, name + ".rs")
            b = os.path.join(child_dir, name, "mod.rs")
            if os.path.exists(a):
                visit(path + (name,), a, os.path.join(child_dir, name))
            elif os.path.exists(b):
                visit(path + (name,), b, os.path.join(child_dir, name))

    visit((), os.path.join(SRC, "lib.rs"), SRC)
    return found


def use_paths(tree, prefix):
    """Expand a use tree (`a::{b, c::d as e}`) into (path, alias) pairs."""
    tree = re.sub(r"\s+", "", tree)
    results = []

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(s, pre):
        brace = s.find("{")
        if brace >= 0 and s.endswith("}"):
            head = s[:brace].rstrip(":")
            base = pre + [p for p in head.split("::") if p]
            for part in split_top(s[brace + 1 : -1]):
                walk(part, base)
            return
        alias = None
        if "as" in s and re.search(r"[^:]as[A-Za-z_]", s):
            s, alias = re.split(r"(?<=[A-Za-z0-9_])as(?=[A-Za-z_])", s, maxsplit=1)
        segs = [p for p in s.split("::") if p]
        if segs == ["self"]:
            results.append((pre, alias or (pre[-1] if pre else None)))
        elif segs == ["*"]:
            results.append((pre, None))
        else:
            results.append((pre + segs, alias or segs[-1]))

    walk(tree, prefix)
    return results


def graph():
    mods = modules()
    edges = {}
    for path, file in mods.items():
        if path == ():
            continue
        text, _ = drop_test_items(strip(open(file, encoding="utf-8").read()))
        is_dir = os.path.basename(file) == "mod.rs"
        children = set(re.findall(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*[;{]", text))
        here = path if is_dir else path  # `self::` names this module
        parent = path[:-1]

        def absolute(segs):
            """A path as written in this file -> a crate-absolute path, or None."""
            if not segs:
                return None
            head = segs[0]
            if head == "crate":
                return list(segs[1:])
            if head == "self":
                return list(here) + absolute_rest(segs[1:])
            if head == "super":
                base = list(parent)
                rest = segs[1:]
                while rest and rest[0] == "super":
                    base = base[:-1]
                    rest = rest[1:]
                return base + list(rest)
            if head in children:
                return list(here) + list(segs)
            if head in aliases:
                return aliases[head] + list(segs[1:])
            return None

        def absolute_rest(segs):
            return list(segs)

        aliases = {}
        targets = set()
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            tree = m.group(1).strip()
            for segs, alias in use_paths(tree, []):
                full = absolute(segs)
                if full is None:
                    continue
                targets.add(tuple(full))
                if alias and alias not in ("_", "*"):
                    aliases[alias] = full
        for m in re.finditer(r"(?<![\w:])((?:[A-Za-z_]\w*::)+[A-Za-z_]\w*)", text):
            segs = m.group(1).split("::")
            full = absolute(segs)
            if full is not None:
                targets.add(tuple(full))
        out = set()
        for t in targets:
            # the deepest module file the path names
            best = None
            for k in range(len(t), 0, -1):
                if t[:k] in mods:
                    best = t[:k]
                    break
            if best is None or best == path:
                continue
            if path[: len(best)] == best:
                continue  # a file naming its own ancestor: the facility's facade
            out.add(best)
        edges[path] = out
    return mods, edges


def name(path, mods):
    return os.path.relpath(mods[path], SRC)


def layer(path):
    return LAYERS.index(path[0]) if path and path[0] in LAYERS else len(LAYERS)


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def shortest_loop(comp, edges):
    """One concrete circle through the component, for the report."""
    members = set(comp)
    start = min(comp)
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, ())):
            if w == start:
                loop = [v]
                while prev[loop[-1]] is not None:
                    loop.append(prev[loop[-1]])
                return list(reversed(loop)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def main():
    mods, edges = graph()
    by_name = {name(p, mods): p for p in mods if p}
    allowed, unused = set(), []
    if os.path.exists(ALLOW):
        for line in open(ALLOW, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            a, _, b = (s.strip() for s in line.partition("->"))
            pa, pb = by_name.get(a), by_name.get(b)
            if pa is None or pb is None or pb not in edges.get(pa, ()):
                unused.append(line)
            else:
                allowed.add((pa, pb))
    if "--edges" in sys.argv:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                mark = "  (allowed)" if (a, b) in allowed else ""
                print(f"{name(a, mods)} -> {name(b, mods)}{mark}")
    checked = {a: {b for b in bs if (a, b) not in allowed} for a, bs in edges.items()}
    bad = 0
    for comp in cycles(list(checked), checked):
        bad += 1
        loop = " -> ".join(name(p, mods) for p in shortest_loop(comp, checked))
        files = ", ".join(sorted(name(p, mods) for p in comp))
        print(f"circle of {len(comp)} files: {files}\n  e.g. {loop}")
    for a in sorted(checked):
        for b in sorted(checked[a]):
            if layer(b) < layer(a):
                bad += 1
                print(f"arrow up: {name(a, mods)} -> {name(b, mods)}")
    # cmd/ files are leaves of one another too: a subcommand's file (and
    # its own folder, cmd/serve/) names no other subcommand's; what two
    # share belongs in the library. cmd/mod.rs routes between them.
    for a in sorted(checked):
        for b in sorted(checked[a]):
            if len(a) > 1 and len(b) > 1 and a[0] == b[0] == "cmd" and a[1] != b[1]:
                bad += 1
                print(f"cmd file imports another: {name(a, mods)} -> {name(b, mods)}")
    for line in unused:
        print(f"note: {os.path.relpath(ALLOW, ROOT)}: no such arrow any more, delete the line: {line}")
    arrows = sum(len(v) for v in checked.values())
    if bad:
        print(f"import graph: {bad} problem(s) in {len(checked)} files, {arrows} arrows")
        return 1
    print(f"import graph: no circle, no arrow up ({len(checked)} files, {arrows} arrows, {len(allowed)} allowed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
