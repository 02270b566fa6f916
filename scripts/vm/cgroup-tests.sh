#!/bin/sh
# /init of the cgroup v2 test VM (busybox sh, runs as pid 1).
#
# Stage 1 copies the initramfs into a tmpfs and switch_roots into it: husk
# pivot_roots, and the initramfs (rootfs) can never be pivoted away from.
# Stage 2 mounts only cgroup2 at /sys/fs/cgroup and runs the cgroup
# scenarios with the real binary against a busybox --rootfs, printing
# `PASS name` / `FAIL name: why`, then the marker HUSK-VM-DONE.
export PATH=/bin

if [ -z "$HUSK_VM_STAGE2" ]; then
    mount -t proc proc /proc
    mkdir -p /newroot
    mount -t tmpfs -o size=600m tmpfs /newroot
    cp -a /bin /lib /rootfs /pyroot /husk /init /newroot/
    mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp /newroot/etc
    cp -a /etc/passwd /etc/group /newroot/etc/
    umount /proc
    export HUSK_VM_STAGE2=1
    exec switch_root /newroot /init
fi

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 none /sys/fs/cgroup
insmod /lib/overlay.ko || echo "FAIL setup: insmod overlay"
[ -e /proc/sys/kernel/unprivileged_userns_clone ] && echo 1 > /proc/sys/kernel/unprivileged_userns_clone
echo "kernel $(uname -r), cgroup: $(grep cgroup /proc/mounts | tr '\n' ' ')"
echo "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

CG=/sys/fs/cgroup
H="/husk run --json --rootfs /rootfs"
FAILS=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; FAILS=$((FAILS + 1)); }
# First value of "KEY": in a one-line JSON verdict (strings unquoted).
jget() { printf '%s' "$2" | grep -o "\"$1\":[^,}]*" | head -n 1 | cut -d: -f2- | tr -d '"'; }
# Value of "KEY":{"applied": (limits keys are sorted, so applied comes first).
applied() { printf '%s' "$2" | grep -o "\"$1\":{\"applied\":[^,}]*" | head -n 1 | sed 's/.*://'; }
leftovers() { find $CG -mindepth 2 -type d -path "*/husk/*" 2>/dev/null; }

# --- limits_are_applied_and_reported_by_default
v=$($H -- true); rc=$?
if [ $rc = 0 ] && printf '%s' "$v" | grep -q '"membership":"clone_into_cgroup","mode":"v2"' \
    && [ "$(applied pids "$v")" = 1024 ] && [ -n "$(applied memory "$v")" ] \
    && printf '%s' "$v" | grep -q '"swap":{"applied_bytes":0,"how":"memory.swap.max","requested":"off"}'; then
    pass limits_are_applied_and_reported_by_default
else fail limits_are_applied_and_reported_by_default "rc=$rc $v"; fi

# --- memory_bomb_is_oom_killed_and_reported (300M under a 64M limit)
v=$($H --memory 64M -- dd if=/dev/zero of=/dev/null bs=300M count=1 2>&1); rc=$?
peak=$(jget memory_peak_bytes "$v")
if [ $rc = 137 ] && [ "$(jget termination "$v")" = oom_killed ] && [ "$(jget oom_kills "$v")" -ge 1 ] \
    && [ "$peak" -ge $((48 << 20)) ] && [ "$peak" -le $((65 << 20)) ]; then
    pass memory_bomb_is_oom_killed_and_reported
else fail memory_bomb_is_oom_killed_and_reported "rc=$rc peak=$peak $v"; fi

# --- fork_bomb_is_bounded_by_pids
v=$($H --pids 32 --timeout 3s -- sh -c 'f(){ f | f & }; f; sleep 10' 2>/dev/null); rc=$?
if [ "$(jget pids_limit_hit "$v")" = true ] && [ "$(jget pids_peak "$v")" != null ] \
    && [ "$(jget pids_peak "$v")" -le 32 ] && [ -z "$(leftovers)" ]; then
    pass fork_bomb_is_bounded_by_pids
elif [ "$(jget pids_limit_hit "$v")" = true ] && [ "$(jget pids_peak "$v")" = null ] && [ -z "$(leftovers)" ]; then
    pass fork_bomb_is_bounded_by_pids
else fail fork_bomb_is_bounded_by_pids "rc=$rc $v"; fi

# --- cpu_hog_is_throttled (2 s at half a cpu: about 1 s of cpu time)
v=$($H --cpus 0.5 --timeout 2s -- sh -c 'while :; do :; done'); rc=$?
cpu=$(( $(jget cpu_user_usec "$v") + $(jget cpu_system_usec "$v") ))
thr=$(jget cpu_throttled_periods "$v")
if [ $rc = 124 ] && [ $cpu -ge 300000 ] && [ $cpu -le 1500000 ] && [ "$thr" -gt 0 ]; then
    pass cpu_hog_is_throttled
else fail cpu_hog_is_throttled "rc=$rc cpu=$cpu throttled=$thr $v"; fi

# --- born_in_cgroup: the first action sees its cgroup and limits
v=$($H --memory 100M --pids 77 --cgroup-parent vmborn --bind /sys/fs/cgroup:/hostcg -- \
    sh -c 'cat /proc/self/cgroup; cat /hostcg/vmborn/*/pids.max /hostcg/vmborn/*/memory.max; grep -c -x -e 1 -e 2 /hostcg/vmborn/*/cgroup.procs'); rc=$?
out=$(printf '%s' "$v" | grep -o '"stdout":{"text":"[^"]*"')
rmdir $CG/vmborn 2>/dev/null
if [ $rc = 0 ] && echo "$out" | grep -q '0::/\\n77\\n104857600\\n2\\n'; then
    pass born_in_cgroup
else fail born_in_cgroup "rc=$rc $out / $v"; fi

# --- timeout_kills_via_cgroup
v=$($H --timeout 1s -- sh -c 'sleep 987 & sleep 987 & (sleep 987 &); wait'); rc=$?
if [ $rc = 124 ] && [ "$(jget group_killed "$v")" = true ] && [ "$(jget kill "$v")" = cgroup.kill ] \
    && ! ps | grep -v grep | grep -q 'sleep 987' && [ -z "$(leftovers)" ]; then
    pass timeout_kills_via_cgroup
else fail timeout_kills_via_cgroup "rc=$rc $v $(ps | grep 'sleep 987')"; fi

# --- no_cgroup_left_after_runs
bad=0
i=0
while [ $i -lt 100 ]; do
    /husk run --rootfs /rootfs -- true || bad=$((bad + 1))
    i=$((i + 1))
done
/husk run --rootfs /rootfs -- /no/such/command 2>/dev/null; [ $? = 127 ] || bad=$((bad + 1))
/husk run --rootfs /rootfs --timeout 200ms -- sleep 5; [ $? = 124 ] || bad=$((bad + 1))
/husk run --rootfs /rootfs -- sh -c 'kill -9 $$'; [ $? = 137 ] || bad=$((bad + 1))
/husk run --rootfs /rootfs -- sleep 5 &
p=$!; sleep 1; kill -INT $p; wait $p; [ $? = 130 ] || bad=$((bad + 1))
left=$(leftovers)
if [ $bad = 0 ] && [ -z "$left" ]; then pass no_cgroup_left_after_runs
else fail no_cgroup_left_after_runs "bad=$bad left=$left"; fi

# --- gc_removes_stale_cgroups
mkdir -p $CG/husk/dead00000001 $CG/husk/keep-me-alone
/husk gc --min-age 0 >/dev/null; rc=$?
if [ $rc = 0 ] && [ ! -e $CG/husk/dead00000001 ] && [ -d $CG/husk/keep-me-alone ]; then
    pass gc_removes_stale_cgroups
else fail gc_removes_stale_cgroups "rc=$rc $(ls $CG/husk)"; fi
rmdir $CG/husk/keep-me-alone

# --- limit_that_cannot_be_applied_fails_closed (a parent holding a process
# cannot enable controllers: no internal processes in v2)
mkdir $CG/vmbusy
sleep 60 &
holder=$!
echo $holder > $CG/vmbusy/cgroup.procs
v=$($H --cgroup-parent vmbusy -- true 2>/dev/null); rc=$?
kill $holder; wait $holder 2>/dev/null
sleep 0.1; rmdir $CG/vmbusy
if [ $rc = 125 ] && [ "$(jget step "$v")" = cgroup ] && [ -z "$(leftovers)" ]; then
    pass limit_that_cannot_be_applied_fails_closed
else fail limit_that_cannot_be_applied_fails_closed "rc=$rc $v"; fi

# --- rootless_without_delegation_fails_closed (uid 1000 in the root cgroup)
v=$(su tester -c "$H -- true" 2>/tmp/err); rc=$?
if [ $rc = 125 ] && grep -q 'Delegate=yes' /tmp/err && grep -q -- '--no-cgroup' /tmp/err; then
    v2=$(su tester -c "$H --no-cgroup -- true"); rc2=$?
    if [ $rc2 = 0 ] && [ "$(jget limits "$v2")" = none ]; then pass rootless_without_delegation_fails_closed
    else fail rootless_without_delegation_fails_closed "--no-cgroup rc=$rc2 $v2"; fi
else fail rootless_without_delegation_fails_closed "rc=$rc $v $(cat /tmp/err)"; fi

# --- rootless_with_delegation_gets_limits: uid 1000 owns /deleg (as
# systemd's Delegate=yes would set it up) and runs in its leaf /deleg/shell.
echo "+memory +pids +cpu" > $CG/cgroup.subtree_control
mkdir -p $CG/deleg/shell
chown 1000:1000 $CG/deleg $CG/deleg/cgroup.procs $CG/deleg/cgroup.subtree_control $CG/deleg/cgroup.threads \
    $CG/deleg/shell $CG/deleg/shell/cgroup.procs $CG/deleg/shell/cgroup.threads
v=$(sh -c "echo \$\$ > $CG/deleg/shell/cgroup.procs; exec su tester -c '$H --memory 64M --pids 50 -- dd if=/dev/zero of=/dev/null bs=300M count=1'" 2>/tmp/err); rc=$?
if [ $rc = 137 ] && [ "$(jget termination "$v")" = oom_killed ] && printf '%s' "$v" | grep -q '"paths":\["/sys/fs/cgroup/deleg/husk/' \
    && [ "$(applied pids "$v")" = 50 ] && [ -z "$(find $CG/deleg/husk -mindepth 1 -type d)" ]; then
    pass rootless_with_delegation_gets_limits
else fail rootless_with_delegation_gets_limits "rc=$rc $v $(cat /tmp/err)"; fi

# --- sandbox_lives_on_v2: husk create's nested cgroups on pure v2 (the
# limits on husk/sbx-<id>, the init and each exec in leaves below it: v2
# admits processes only in leaves once controllers are enabled for them)
S="/husk --state-dir /tmp/sbx"
id=$($S create --rootfs /rootfs --memory 64M --pids 40 2>/tmp/err); rc=$?
sb=$CG/husk/sbx-$id
v1=$($S exec --json "$id" -- dd if=/dev/zero of=/dev/null bs=300M count=1 2>&1); rc1=$?
v2=$($S exec --json "$id" -- sh -c 'echo kept > f; cat /proc/self/cgroup'); rc2=$?
v3=$($S exec --json --timeout 1s "$id" -- sh -c 'sleep 987 & sleep 987'); rc3=$?
v4=$($S exec --json "$id" -- cat f); rc4=$?
ctl=$(cat "$sb/cgroup.subtree_control" 2>/dev/null); init=$(wc -l < "$sb/init/cgroup.procs" 2>/dev/null)
$S rm "$id" >/dev/null; rc5=$?
if [ $rc = 0 ] && [ $rc1 = 137 ] && [ "$(jget termination "$v1")" = oom_killed ] && [ $rc2 = 0 ] \
    && printf '%s' "$v2" | grep -q '"text":"0::/\\n"' && [ "$(jget oom_kills "$v2")" = 0 ] \
    && [ $rc3 = 124 ] && [ $rc4 = 0 ] && printf '%s' "$v4" | grep -q '"text":"kept\\n"' \
    && echo "$ctl" | grep -q memory && echo "$ctl" | grep -q pids && [ "$init" = 1 ] \
    && [ $rc5 = 0 ] && [ ! -e "$sb" ] && ! ps | grep -v grep | grep -q 'sleep 987' \
    && [ -z "$(ls /tmp/sbx/sandboxes | grep -v -e names -e tombstones)" ] && [ -z "$(leftovers)" ]; then
    pass sandbox_lives_on_v2
else fail sandbox_lives_on_v2 "rc=$rc/$rc1/$rc2/$rc3/$rc4/$rc5 ctl=$ctl init=$init $(cat /tmp/err) | $v1 | $v2 | $v3 | $v4"; fi

# --- warm_spare_placed_on_v2: a warm python's next child is moved into the
# next exec's leaf ahead of the call (docs/warm.md); each call runs and is
# accounted there, an OOM in one call is that call's, nothing is left.
id=$($S create --rootfs /pyroot --memory 96M --warm python 2>/tmp/err); rc=$?
sleep 1
w1=$(echo 'print("ok")' | $S exec --json "$id" --code - 2>&1); r1=$?
sleep 1
w2=$(echo 'b = bytearray(300 << 20)' | $S exec --json "$id" --code - 2>&1); r2=$?
sleep 1
w3=$(echo 'print("ok")' | $S exec --json "$id" --code - 2>&1); r3=$?
$S rm "$id" >/dev/null; r4=$?
if [ $rc = 0 ] && [ $r1 = 0 ] && printf '%s' "$w1" | grep -q '"placed_ahead":true' \
    && printf '%s' "$w1" | grep -q '"text":"ok\\n"' && printf '%s' "$w1" | grep -q "sbx-$id/exec-" \
    && [ $r2 = 137 ] && [ "$(jget termination "$w2")" = oom_killed ] \
    && [ $r3 = 0 ] && printf '%s' "$w3" | grep -q '"placed_ahead":true' && [ "$(jget oom_kills "$w3")" = 0 ] \
    && [ $r4 = 0 ] && [ ! -e "$CG/husk/sbx-$id" ] && [ -z "$(leftovers)" ] && ! ps | grep -v grep | grep -q python3; then
    pass warm_spare_placed_on_v2
else fail warm_spare_placed_on_v2 "rc=$rc/$r1/$r2/$r3/$r4 $(cat /tmp/err) | $w1 | $w2 | $w3"; fi

# --- v2_device_rules_enforced: OCI mode's device rules on pure v2 are an
# eBPF program (src/cgroup/devices.rs). The rules are Docker's default list
# (moby's DefaultLinuxSpec: deny all, mknod of any node, the usual
# character devices): /dev/null is usable, the host's /dev/kmsg bound in is
# not. The same container without rules writes to /dev/kmsg: the test
# tells the two apart.
mkdir -p /tmp/ocib
devcfg() { # $1: linux.resources
    cat > /tmp/ocib/config.json <<EOF
{"ociVersion":"1.0.2",
 "process":{"terminal":false,"user":{"uid":0,"gid":0},"env":["PATH=/bin"],"cwd":"/","noNewPrivileges":true,
  "args":["sh","-c","echo x > /dev/null && echo NULL_OK; echo husk-vm > /dev/kmsg 2>/dev/null && echo KMSG_OK || echo KMSG_DENIED"],
  "capabilities":{"bounding":["CAP_KILL"],"effective":["CAP_KILL"],"permitted":["CAP_KILL"]}},
 "root":{"path":"/rootfs","readonly":true},"hostname":"devtest",
 "mounts":[{"destination":"/proc","type":"proc","source":"proc"},
  {"destination":"/dev","type":"tmpfs","source":"tmpfs","options":["nosuid","strictatime","mode=755","size=65536k"]},
  {"destination":"/dev/kmsg","type":"bind","source":"/dev/kmsg","options":["rbind","rw"]}],
 "linux":{"namespaces":[{"type":"pid"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}],"resources":$1}}
EOF
}
devcfg '{"devices":[{"allow":false,"access":"rwm"},{"allow":true,"type":"c","access":"m"},{"allow":true,"type":"b","access":"m"},
 {"allow":true,"type":"c","major":1,"minor":3,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":5,"access":"rwm"},
 {"allow":true,"type":"c","major":1,"minor":7,"access":"rwm"},{"allow":true,"type":"c","major":5,"minor":0,"access":"rwm"},
 {"allow":true,"type":"c","major":5,"minor":1,"access":"rwm"},{"allow":true,"type":"c","major":5,"minor":2,"access":"rwm"},
 {"allow":true,"type":"c","major":1,"minor":8,"access":"rwm"},{"allow":true,"type":"c","major":1,"minor":9,"access":"rwm"},
 {"allow":true,"type":"c","major":136,"access":"rwm"},{"allow":true,"type":"c","major":10,"minor":200,"access":"rwm"}]}'
out=$(cd /tmp/ocib && /husk oci --root /tmp/ocistate run devt1 </dev/null 2>&1); rc=$?
devcfg '{}'
ctl=$(cd /tmp/ocib && /husk oci --root /tmp/ocistate run devt2 </dev/null 2>&1); rc2=$?
if [ $rc = 0 ] && echo "$out" | grep -q NULL_OK && echo "$out" | grep -q KMSG_DENIED \
    && [ $rc2 = 0 ] && echo "$ctl" | grep -q KMSG_OK; then
    pass v2_device_rules_enforced
else fail v2_device_rules_enforced "rc=$rc/$rc2 rules: $out | none: $ctl"; fi

echo "HUSK-VM-DONE fails=$FAILS"
sync
poweroff -f
