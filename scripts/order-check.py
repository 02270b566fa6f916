#!/usr/bin/env python3
"""Whether a husk binary's code is laid out by scripts/husk.order.

    scripts/order-check.py BINARY

Prints how many of the order file's symbols the binary holds and how many
of the first 200 sit among its first 600 text symbols (nm -n). Exits 1 when
fewer than 90% of the file's symbols are in the binary (stale: rerun
scripts/order.sh) or fewer than 90% of the first 200 are at the start of
the text (build.rs did not pass --symbol-ordering-file). Reported by
scripts/bench.sh, never a gate of the test suite: a stale order file costs
only speed, and a refactor that renames symbols must not fail CI for it.
"""
import os, subprocess, sys

if len(sys.argv) != 2:
    sys.exit("usage: scripts/order-check.py BINARY")
nm = subprocess.run(["nm", "-n", sys.argv[1]], capture_output=True, text=True, check=True).stdout
where = {}
for line in nm.splitlines():
    f = line.split()
    if len(f) == 3 and f[1] in "tTwW":
        where.setdefault(f[2], len(where))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "husk.order")) as fh:
    listed = [l.strip() for l in fh if l.strip()]
order = [s for s in listed if s in where]
head = order[:200]
early = sum(where[s] < 600 for s in head)
print(f"{len(order)} of {len(listed)} ordered symbols in the binary; {early} of the first {len(head)} among its first 600 text symbols")
if len(order) <= 0.9 * len(listed):
    sys.exit("the order file is stale: rerun scripts/order.sh")
if early <= 0.9 * len(head):
    sys.exit("the ordered symbols are not at the start of the text: was --symbol-ordering-file passed (build.rs)?")
