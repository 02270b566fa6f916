#!/usr/bin/env python3
"""How a running process's executable text sits in the page cache.

    scripts/folios.py [--mapped] PID PATH

--mapped prints only the number of mapped pages (order-0 and large-folio
pages together), for scripts.

Walks the r-xp mapping of PATH in /proc/PID/maps, looks each page up in
/proc/PID/pagemap and /proc/kpageflags (root only), and counts pages that
are order-0 folios, heads and tails of large folios, and not mapped.
Used for the page-cache note in scripts/bench.sh: the same husk bytes
start faster when their cache pages are large folios (filled by write(2)
or read(2)) than when they are order-0 (filled by exec's page faults).
"""
import struct, sys

args = sys.argv[1:]
only_mapped = args[:1] == ["--mapped"]
args = args[1:] if only_mapped else args
if len(args) != 2 or not args[0].isdigit():
    sys.exit("usage: scripts/folios.py [--mapped] PID PATH  (as root)")
pid, path = int(args[0]), args[1]
mapped = 0
KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 15, 16
with open(f"/proc/{pid}/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) < 6 or f[1] != "r-xp" or f[5] != path:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        small = heads = tails = absent = 0
        for va in range(lo, hi, 4096):
            pm.seek(va // 4096 * 8)
            entry = struct.unpack("Q", pm.read(8))[0]
            if not entry >> 63 & 1:
                absent += 1
                continue
            kf.seek((entry & ((1 << 55) - 1)) * 8)
            flags = struct.unpack("Q", kf.read(8))[0]
            if flags >> KPF_COMPOUND_HEAD & 1:
                heads += 1
            elif flags >> KPF_COMPOUND_TAIL & 1:
                tails += 1
            else:
                small += 1
        mapped += small + heads + tails
        if not only_mapped:
            print(f"{f[0]} order-0 {small}  large-folio heads {heads} tails {tails}  not mapped {absent}")
if only_mapped:
    print(mapped)
