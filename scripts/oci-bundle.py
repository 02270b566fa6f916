#!/usr/bin/env python3
"""An OCI bundle's config.json that applies what husk's defaults apply,
for the runc/crun/runsc rows of scripts/bench.sh and
scripts/bench-throughput.sh:

    scripts/oci-bundle.py BASE_CONFIG SECCOMP_JSON ROOTFS MEMORY PIDS OUT ARGS...

BASE_CONFIG is `runc spec`'s (or `crun spec`'s) default config; the result
has a read-only ROOTFS, a cgroup namespace added to the spec's namespaces,
the seccomp profile `husk seccomp show default` prints (SECCOMP_JSON),
and husk's memory (bytes, swap capped at the same) and pids limits.
"""
import json, sys
base, seccomp, rootfs, mem, pids, out, *args = sys.argv[1:]
c = json.load(open(base))
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k != "comment"}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o
c["root"] = {"path": rootfs, "readonly": True}
c["process"]["args"] = args
c["process"]["terminal"] = False
c["hostname"] = "bench"
ns = c["linux"]["namespaces"]
if not any(n["type"] == "cgroup" for n in ns):
    ns.append({"type": "cgroup"})
profile = strip(json.load(open(seccomp)))
# husk's compiler takes the first matching rule; libseccomp lets an
# unconditional rule for a syscall override conditional ones. So a name that
# has a conditional ALLOW (clone without CLONE_NEW* flags) is dropped from
# unconditional denials: such calls then get the default action (ENOSYS)
# instead of EPERM, still denied.
cond = {n for r in profile["syscalls"] if r.get("args") and r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
rules = []
for r in profile["syscalls"]:
    if not r.get("args") and r["action"] != "SCMP_ACT_ALLOW":
        r = dict(r, names=[n for n in r["names"] if n not in cond])
    if r["names"]:
        rules.append(r)
profile["syscalls"] = rules
c["linux"]["seccomp"] = profile
res = c["linux"].setdefault("resources", {})
res["memory"] = {"limit": int(mem), "swap": int(mem)}
res["pids"] = {"limit": int(pids)}
json.dump(c, open(out, "w"), indent=1)
