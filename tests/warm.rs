//! Warm interpreters and sessions (docs/warm.md): `husk create --warm
//! python[:MODULES]` / `--session python|bash` and `husk exec --code`.
//! Host-mode sandboxes: the host's /usr (Debian's python3 and bash) is the
//! sandbox's.
mod common;
mod sandboxkit;

use sandboxkit::*;
use serde_json::Value;

#[test]
fn warm_python_each_exec_has_fresh_state() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python:json"]);
    let (v, code) = code_json(&s, &id, &[], "import json, sys\nX = 41\njson.marker = 'set'\nprint(X + 1)");
    assert_eq!((code, stdout_text(&v)), (0, "42\n"), "{v:#}");
    assert_eq!(v["warm"]["mode"], "fork", "{v:#}");
    // A global, and an attribute set on a preloaded module, are gone next time.
    let (v, code) = code_json(&s, &id, &[], "import json\nprint('X' in globals(), hasattr(json, 'marker'), __name__)");
    assert_eq!((code, stdout_text(&v)), (0, "False False __main__\n"), "{v:#}");
    // The preloaded module is really preloaded (imported by the zygote, not by the call).
    let (v, _) = code_json(&s, &id, &[], "import sys\nprint('json' in sys.modules)");
    assert_eq!(stdout_text(&v), "True\n", "{v:#}");
    // Exit statuses and exceptions as `python3 -` gives them.
    let (v, code) = code_json(&s, &id, &[], "raise SystemExit(7)");
    assert_eq!((code, v["exit_code"].as_i64()), (7, Some(7)), "{v:#}");
    let (v, code) = code_json(&s, &id, &[], "1/0");
    assert_eq!(code, 1, "{v:#}");
    assert!(v["stderr"]["text"].as_str().unwrap().contains("ZeroDivisionError"), "{v:#}");
    // The exec's env and workdir.
    let (v, _) = code_json(
        &s,
        &id,
        &["--env", "GREETING=hi", "--workdir", "/tmp"],
        "import os\nprint(os.environ['GREETING'], os.getcwd())",
    );
    assert_eq!(stdout_text(&v), "hi /tmp\n", "{v:#}");
    // Plain output, without --json, goes to husk exec's stdout.
    let out = code_out(&s, &id, &[], "print('plain')");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain\n");
}

#[test]
fn warm_child_cannot_signal_or_ptrace_or_write_the_parent() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python"]);
    let probe = r#"
import os, signal, ctypes, sys
res = []
ppid = os.getppid()
res.append(("ppid", ppid))
# The zygote is pid 1 of this namespace: SIGKILL/SIGSTOP from inside are dropped, the rest ignored.
for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGINT):
    try:
        os.kill(1, sig); res.append(("kill", sig.name, "sent"))
    except OSError as e:
        res.append(("kill", sig.name, e.errno))
# Its memory: non-dumpable, so /proc/1/mem is refused.
try:
    open("/proc/1/mem", "rb").read(1); res.append(("mem", "read"))
except OSError as e:
    res.append(("mem", e.errno))
try:
    with open("/proc/1/mem", "r+b") as m:
        m.write(b"x"); res.append(("mem_write", "written"))
except OSError as e:
    res.append(("mem_write", e.errno))
try:
    os.listdir("/proc/1/fd"); res.append(("fd", "listed"))
except OSError as e:
    res.append(("fd", e.errno))
# ptrace attach.
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH
res.append(("ptrace", r, ctypes.get_errno()))
# Open fds: only stdio and nothing of the zygote's (no control socket).
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
kinds = []
for f in fds:
    try:
        kinds.append(os.readlink("/proc/self/fd/%d" % f))
    except OSError:
        pass
res.append(("socket_fds", [k for k in kinds if k.startswith("socket:")]))
print(res)
"#;
    let (v, code) = code_json(&s, &id, &[], probe);
    assert_eq!(code, 0, "{v:#}");
    let out = stdout_text(&v);
    assert!(out.contains("('ppid', 0)") || out.contains("('ppid', 1)"), "{out}");
    assert!(out.contains("('mem', 13)") || out.contains("('mem', 1)"), "the parent's memory was readable: {out}");
    assert!(
        out.contains("('mem_write', 13)") || out.contains("('mem_write', 1)"),
        "the parent's memory was writable: {out}"
    );
    assert!(out.contains("('fd', 13)") || out.contains("('fd', 1)"), "the parent's fds were listable: {out}");
    assert!(out.contains("('ptrace', -1, 1)"), "ptrace of the parent was not refused with EPERM: {out}");
    assert!(out.contains("('socket_fds', [])"), "the child holds a socket: {out}");
    // The zygote survived every signal: the next call works, fresh.
    let (v, code) = code_json(&s, &id, &[], "print('alive')");
    assert_eq!((code, stdout_text(&v)), (0, "alive\n"), "{v:#}");
    // A child's writes to the files of a module do not reach the zygote's
    // memory: it has no file of its own (the shim comes over its socket).
    let rec = s.inspect(&id);
    assert_eq!(rec["state"], "ready", "{rec:#}");
}

#[test]
fn warm_exec_timeout_kills_only_that_exec() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python"]);
    // The call and the grandchild it forks name themselves, so the next
    // call can look for them in /proc (the sandbox's, which shows the
    // zygote's nested pid namespace too).
    let (v, code) = code_json(
        &s,
        &id,
        &["--timeout", "1s"],
        "import os, time\nos.fork()\nopen('/proc/self/comm', 'w').write('husk-timed-out')\nprint('started', flush=True)\ntime.sleep(60)",
    );
    assert_eq!((code, &v["termination"]), (124, &serde_json::json!("wall_timeout")), "{v:#}");
    // Its processes (the call's child and the grandchild it forked) are gone,
    // the zygote is not: the next call runs.
    let census = "import os\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n        n += p.isdigit() and open(f'/proc/{p}/comm').read().strip() == 'husk-timed-out'\n    except OSError:\n        pass\nprint(n)";
    let (v, code) = code_json(&s, &id, &[], census);
    assert_eq!((code, stdout_text(&v)), (0, "0\n"), "processes of the timed-out call outlived it: {v:#}");
    let (v, code) = code_json(&s, &id, &[], "print('next')");
    assert_eq!((code, stdout_text(&v)), (0, "next\n"), "{v:#}");
}

#[test]
fn warm_oom_reported_per_exec() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python", "--memory", "128M"]);
    let (v, code) = code_json(&s, &id, &[], "b = bytearray(400 << 20)\nprint('survived')");
    assert_eq!(code, 137, "{v:#}");
    assert_eq!(v["termination"], "oom_killed", "{v:#}");
    let leaf = v["limits"]["cgroup"]["paths"][0].as_str().unwrap();
    assert!(leaf.contains(&format!("sbx-{id}/exec-")), "the call was not accounted in its exec's leaf: {leaf}");
    // The zygote lives on; the next call has clean accounting.
    let (v, code) = code_json(&s, &id, &[], "print('ok')");
    assert_eq!((code, stdout_text(&v)), (0, "ok\n"), "{v:#}");
    assert_eq!(v["resources"]["oom_kills"], 0, "{}", v["resources"]);
}

/// The leaf a call was accounted in, from its verdict.
fn leaf_of(v: &Value) -> String {
    let path = v["limits"]["cgroup"]["paths"][0].as_str().unwrap_or_else(|| panic!("no cgroup path: {v:#}"));
    path.rsplit('/').next().unwrap().to_string()
}

/// The next call's child is forked and moved into the next exec's cgroup
/// leaf ahead of the call (docs/warm.md): a call must still run in its own
/// exec's leaf (its accounting, its kill), never in the zygote's or in
/// another exec's, and each call in a fresh one.
#[test]
fn warm_preforked_child_runs_in_its_own_exec_leaf() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python"]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        // Time for the supervisor to place the spare.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (v, code) = code_json(&s, &id, &[], "print(open('/proc/self/cgroup').read())");
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["warm"]["placed_ahead"], true, "the call did not run in a child placed ahead: {v:#}");
        assert_eq!(v["limits"]["cgroup"]["membership"], "moved", "{}", v["limits"]);
        let leaf = leaf_of(&v);
        assert!(leaf.starts_with("exec-"), "{leaf}");
        // Every hierarchy husk uses (memory and the unified one here)
        // names the exec's leaf.
        let lines: Vec<&str> =
            stdout_text(&v).lines().filter(|l| l.contains(":memory:") || l.starts_with("0::")).collect();
        assert!(!lines.is_empty(), "{v:#}");
        for l in lines {
            assert!(l.ends_with(&format!("/{leaf}")), "the call ran outside its exec's leaf {leaf}: {l}");
        }
        assert!(!seen.contains(&leaf), "two calls shared the leaf {leaf}");
        seen.push(leaf);
    }
    // Back to back, whether the spare is placed yet or not: still each
    // call's own leaf.
    for _ in 0..4 {
        let (v, code) = code_json(&s, &id, &[], "print(open('/proc/self/cgroup').read())");
        assert_eq!(code, 0, "{v:#}");
        let leaf = leaf_of(&v);
        assert!(stdout_text(&v).lines().any(|l| l.starts_with("0::") && l.ends_with(&format!("/{leaf}"))), "{v:#}");
        assert!(!seen.contains(&leaf), "two calls shared the leaf {leaf}");
        seen.push(leaf);
    }
}

/// Concurrent calls race for the one spare: the exec the supervisor gave
/// the spare's leaf may find it taken by another call (moved out to that
/// call's leaf) and get a fresh child instead. Whoever wins, every call
/// must run in its own exec's leaf and answer.
#[test]
fn warm_concurrent_calls_each_run_in_their_own_leaf() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python", "--concurrent"]);
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let results: Vec<(Value, i32)> = std::thread::scope(|scope| {
            let calls: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        code_json(
                            &s,
                            &id,
                            &[],
                            "import time\ntime.sleep(0.05)\nprint(open('/proc/self/cgroup').read())",
                        )
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let mut leaves = Vec::new();
        for (v, code) in &results {
            assert_eq!(*code, 0, "{v:#}");
            let leaf = leaf_of(v);
            assert!(
                stdout_text(v).lines().any(|l| l.starts_with("0::") && l.ends_with(&format!("/{leaf}"))),
                "a concurrent call ran outside its exec's leaf {leaf}: {v:#}"
            );
            assert!(!leaves.contains(&leaf), "two calls shared the leaf {leaf}");
            leaves.push(leaf);
        }
    }
}

/// The child forked ahead for the next call (the spare) has the uid of
/// the calls, and without cgroups anything a call leaves running lives on
/// in its pid namespace (with cgroups it dies with the call's leaf, and
/// the spare is forked only once no call runs, so no process of a call
/// ever meets one). Such a process must not be able to ptrace the spare or
/// write its memory (it is non-dumpable, as the zygote is) to plant
/// something in the next call; and killing or stopping it must cost the
/// next call nothing but the fast path: never its fresh state, nor an
/// answer.
#[test]
fn warm_call_cannot_tamper_with_the_next_calls_child() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python", "--no-cgroup"]);
    for sig in ["SIGKILL", "SIGSTOP"] {
        // The call leaves a process behind that waits for the spare forked
        // after the call ends, goes at it, and writes down what it got.
        let probe = format!(
            r#"
import os, signal, ctypes, time
# /proc is the sandbox's: the zygote's children, by their parent there.
def ppid(p):
    st = open("/proc/%s/stat" % p).read()
    return int(st[st.rindex(")") + 2:].split()[1])
call = int(os.readlink("/proc/self"))
zygote = ppid(call)
if os.fork() == 0:
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for f in (0, 1, 2):
        os.dup2(null, f)
    me = int(os.readlink("/proc/self"))
    others = []
    for _ in range(300):
        time.sleep(0.01)
        if os.path.exists("/proc/%d" % call):
            continue
        others = []
        for p in os.listdir("/proc"):
            try:
                if p.isdigit() and int(p) != me and ppid(p) == zygote:
                    others.append(int(p))
            except OSError:
                pass
        if others:
            break
    libc = ctypes.CDLL(None, use_errno=True)
    res = []
    for p in others:
        # Its pid in our own pid namespace (the zygote's), for ptrace and kill.
        pid = int([l for l in open("/proc/%d/status" % p) if l.startswith("NSpid:")][0].split()[-1])
        r = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
        res.append(("ptrace", r, ctypes.get_errno()))
        try:
            open("/proc/%d/mem" % p, "r+b"); res.append(("mem", "opened"))
        except OSError as e:
            res.append(("mem", e.errno))
        os.kill(pid, signal.{sig})
    with open("/tmp/.tamper", "w") as f:
        f.write("%d %r" % (len(others), res))
    os._exit(0)
X = "planted"
"#
        );
        let (v, code) = code_json(&s, &id, &[], &probe);
        assert_eq!(code, 0, "{v:#}");
        let mut out = String::new();
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let (v, _) = code_json(
                &s,
                &id,
                &[],
                "import os\nif os.path.exists('/tmp/.tamper'): print(open('/tmp/.tamper').read())",
            );
            out = stdout_text(&v).to_string();
            if !out.is_empty() {
                break;
            }
        }
        assert!(out.starts_with("1 "), "the leftover process did not find exactly one spare: {out:?}");
        assert!(out.contains("('ptrace', -1, 1)"), "ptrace of the spare was not refused with EPERM: {out}");
        assert!(out.contains("('mem', 13)") || out.contains("('mem', 1)"), "the spare's memory opened: {out}");
        // The next call answers, fresh, and so does the one after.
        // (`placed_ahead` says whether a spare was moved into the call's
        // leaf: always false without cgroups.)
        let (v, code) = code_json(&s, &id, &[], "import os\nos.unlink('/tmp/.tamper')\nprint('X' in globals())");
        assert_eq!((code, stdout_text(&v)), (0, "False\n"), "after {sig} of the spare: {v:#}");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (v, code) = code_json(&s, &id, &[], "print('again')");
        assert_eq!((code, stdout_text(&v)), (0, "again\n"), "{v:#}");
    }
}

#[test]
fn warm_and_cold_verdicts_have_the_same_shape() {
    require_root!();
    python3();
    let s = Sbx::new();
    let warm = s.create_with(&["--warm", "python"]);
    let cold = s.create_with(&[]);
    let (w, wc) = code_json(&s, &warm, &[], "print(1)");
    let (c, cc) = code_json(&s, &cold, &[], "print(1)");
    assert_eq!((wc, cc), (0, 0), "{w:#}\n{c:#}");
    assert_eq!((w["warm"]["mode"].as_str(), c["warm"]["mode"].as_str()), (Some("fork"), Some("cold")));
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&w), keys(&c), "warm and cold verdicts differ in their keys");
    for k in ["termination", "exit_code", "stdout", "stderr"] {
        assert_eq!(w[k], c[k], "{k}");
    }
    for k in ["limits", "resources", "isolation"] {
        assert_eq!(keys(&w[k]), keys(&c[k]), "{k}");
    }
    // A warm call runs under the filter its interpreter inherited: the
    // verdict must not call it unconfined.
    assert_eq!(w["seccomp"]["mode"], "enforce", "{}", w["seccomp"]);
    assert_eq!(
        (&w["seccomp"]["profile"], &w["seccomp"]["sha256"]),
        (&c["seccomp"]["profile"], &c["seccomp"]["sha256"])
    );
    // The warm verdict validates against the schema like every other.
    let schema: Value = serde_json::from_str(include_str!("../docs/verdict.schema.json")).unwrap();
    for k in w.as_object().unwrap().keys() {
        assert!(schema["properties"].get(k).is_some(), "{k} is not in docs/verdict.schema.json");
    }
}

#[test]
fn python_session_keeps_variables_between_calls() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python"]);
    let (v, code) = code_json(&s, &id, &[], "import math\nx = 20\ndef f(y): return x + y");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["warm"]["mode"], "session");
    let (v, code) = code_json(&s, &id, &[], "print(f(22), math.pi > 3)");
    assert_eq!((code, stdout_text(&v)), (0, "42 True\n"), "{v:#}");
    // An exception does not end the session.
    let (_, code) = code_json(&s, &id, &[], "raise ValueError('x')");
    assert_eq!(code, 1);
    let (v, _) = code_json(&s, &id, &[], "print(x)");
    assert_eq!(stdout_text(&v), "20\n", "{v:#}");
    // --language must be the session's.
    let out = code_out(&s, &id, &["--language", "bash"], "echo hi");
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("python"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A session in a `--concurrent` sandbox: its calls take turns (one
/// interpreter, one control socket): a second call at once is busy, or
/// with `--wait` queued, while a plain exec runs beside the first.
#[test]
fn session_calls_take_turns_in_a_concurrent_sandbox() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python", "--concurrent"]);
    // Waits for the go (bounded: a failing test must still end).
    let first = "import os, time\nfor _ in range(1500):\n    if os.path.exists('/tmp/go'):\n        break\n    time.sleep(0.02)\nv = 1";
    std::thread::scope(|t| {
        let a = t.spawn(|| code_json(&s, &id, &["--wait"], first));
        // The first call holds the session once the supervisor runs it.
        let mut running = false;
        for _ in 0..500 {
            let v: Value = serde_json::from_slice(&s.out(&["inspect", &id]).stdout).unwrap_or(Value::Null);
            if v["active_execs"].as_u64().unwrap_or(0) >= 1 {
                running = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(running, "the first call never ran");
        // Busy at once, not queued (--timeout: a call that waited would
        // end 124 instead).
        let (v, code) = code_json(&s, &id, &["--timeout", "10s"], "print(2)");
        assert_eq!(code, 125, "{v:#}");
        assert_eq!(v["error"]["step"], "busy", "{v:#}");
        // A plain exec runs beside it, and lets it finish.
        let beside = s.out(&["exec", &id, "--", "sh", "-c", "touch /tmp/go && echo beside"]);
        assert_eq!(String::from_utf8_lossy(&beside.stdout), "beside\n");
        let (v, code) = a.join().unwrap();
        assert_eq!(code, 0, "{v:#}");
    });
    let (v, _) = code_json(&s, &id, &["--wait"], "print(v)");
    assert_eq!(stdout_text(&v), "1\n", "{v:#}");
}

#[test]
fn bash_session_keeps_cwd_and_exports() {
    require_root!();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "bash"]);
    let (v, code) = code_json(&s, &id, &[], "mkdir -p /tmp/proj && cd /tmp/proj && export COLOR=green && N=5");
    assert_eq!(code, 0, "{v:#}");
    let (v, code) = code_json(&s, &id, &[], "pwd; echo $COLOR $N; echo err >&2; false");
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(stdout_text(&v), "/tmp/proj\ngreen 5\n", "{v:#}");
    assert_eq!(v["stderr"]["text"], "err\n", "{v:#}");
    // Output without a final newline is kept as written.
    let (v, _) = code_json(&s, &id, &[], "printf abc");
    assert_eq!(stdout_text(&v), "abc", "{v:#}");
    // A call cannot read the session's own command stream.
    let (v, code) = code_json(&s, &id, &[], "cat; echo after");
    assert_eq!((code, stdout_text(&v)), (0, "after\n"), "{v:#}");
    // `exit` ends the shell: the call reports its status, the session restarts.
    let (v, code) = code_json(&s, &id, &[], "exit 3");
    assert_eq!(code, 3, "{v:#}");
    assert_eq!(v["warm"]["restarted"], true, "{v:#}");
    let (v, code) = code_json(&s, &id, &[], "echo ${COLOR:-unset}");
    assert_eq!((code, stdout_text(&v)), (0, "unset\n"), "{v:#}");
}

#[test]
fn session_call_timeout_interrupts_and_reports_restart() {
    require_root!();
    python3();
    let s = Sbx::new();
    // Python: the call is interrupted, the session and its state live on.
    let id = s.create_with(&["--session", "python"]);
    code_json(&s, &id, &[], "kept = 'yes'");
    let (v, code) = code_json(&s, &id, &["--timeout", "1s"], "import time\nwhile True: time.sleep(0.05)");
    assert_eq!((code, &v["termination"]), (124, &serde_json::json!("wall_timeout")), "{v:#}");
    assert_eq!(
        (&v["warm"]["interrupted"], &v["warm"]["restarted"]),
        (&Value::Bool(true), &Value::Bool(false)),
        "{v:#}"
    );
    let (v, _) = code_json(&s, &id, &[], "print(kept)");
    assert_eq!(stdout_text(&v), "yes\n", "{v:#}");
    // A call that does not yield to the interrupt (signals ignored in C
    // code) is killed with the session, which restarts with fresh state.
    let stuck = "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: time.sleep(0.05)";
    let (v, code) = code_json(&s, &id, &["--timeout", "1s"], stuck);
    assert_eq!((code, &v["termination"]), (124, &serde_json::json!("wall_timeout")), "{v:#}");
    assert_eq!(v["warm"]["restarted"], true, "{v:#}");
    let mut fresh = None;
    for _ in 0..50 {
        let (v, code) = code_json(&s, &id, &[], "print('kept' in globals())");
        if code == 0 {
            fresh = Some(stdout_text(&v).to_string());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(fresh.as_deref(), Some("False\n"), "the restarted session did not answer with fresh state");
    // Bash: the shell is restarted (its cwd and exports are gone), and says so.
    let b = s.create_with(&["--session", "bash"]);
    code_json(&s, &b, &[], "export KEEP=1");
    let (v, code) = code_json(&s, &b, &["--timeout", "1s"], "sleep 30");
    assert_eq!((code, &v["termination"]), (124, &serde_json::json!("wall_timeout")), "{v:#}");
    assert_eq!((&v["warm"]["interrupted"], &v["warm"]["restarted"]), (&Value::Bool(true), &Value::Bool(true)), "{v:#}");
    let (v, code) = code_json(&s, &b, &[], "echo ${KEEP:-gone}");
    assert_eq!((code, stdout_text(&v)), (0, "gone\n"), "{v:#}");
}

#[test]
fn warm_refuses_what_it_cannot_do() {
    require_root!();
    python3();
    let s = Sbx::new();
    // A module that does not import fails the create, naming it.
    let out = s.out(&["create", "--warm", "python:no_such_module_xyz"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no_such_module_xyz"), "{err}");
    for bad in [&["--warm", "bash"][..], &["--warm", "python:os;x"], &["--session", "ruby"]] {
        let mut a = vec!["create"];
        a.extend_from_slice(bad);
        let out = s.out(&a);
        assert_eq!(out.status.code(), Some(125), "{bad:?}");
    }
    let id = s.create_with(&["--warm", "python"]);
    let out = code_out(&s, &id, &["--user", "1000"], "print(1)");
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
}

/// How many processes of the sandbox (its /proc, which shows a zygote's
/// nested pid namespace too) are named `name`: a `--code` call's census.
fn census(name: &str) -> String {
    format!(
        "import os\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n        n += p.isdigit() and open(f'/proc/{{p}}/comm').read().strip() == '{name}'\n    except OSError:\n        pass\nprint(n)"
    )
}

/// The first answer of a `--code` call after the interpreter was killed
/// (the supervisor restarts it: a call in between may find it gone).
fn answer_after_restart(s: &Sbx, id: &str, code: &str) -> (Value, i32) {
    let mut last = (Value::Null, -1);
    for _ in 0..100 {
        last = code_json(s, id, &[], code);
        if last.1 == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    last
}

/// Issue 31, item 3: a session call's fork bomb outlived its call (its
/// children were the session's, in the session's leaf, and took the pids
/// limit until the sandbox was removed). A session call's processes are
/// born in the call's own leaf and die with it at the timeout; the
/// session itself, interrupted, keeps its state.
#[test]
fn session_fork_bomb_dies_with_its_call() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python", "--pids", "32", "--memory", "256M"]);
    let (v, code) = code_json(&s, &id, &[], "keep = 42");
    assert_eq!(code, 0, "{v:#}");
    let bomb = "import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n            open('/proc/self/comm', 'w').write('husk-bomb')\n    except OSError:\n        time.sleep(0.01)";
    let (v, code) = code_json(&s, &id, &["--timeout", "2s"], bomb);
    assert_eq!((code, &v["termination"]), (124, &serde_json::json!("wall_timeout")), "{v:#}");
    assert_eq!(v["warm"]["interrupted"], true, "{v:#}");
    // The bomb's processes were the call's: accounted in its leaf.
    assert!(v["resources"]["pids_peak"].as_u64().unwrap_or(0) > 1, "{}", v["resources"]);
    // Interrupted in time, the session keeps its state; past the
    // backstop it is killed with the leaf and says so.
    let kept = v["warm"]["restarted"] == false;
    let (v, code) = code_json(&s, &id, &[], &census("husk-bomb"));
    assert_eq!((code, stdout_text(&v)), (0, "0\n"), "the fork bomb outlived its call: {v:#}");
    if kept {
        let (v, _) = code_json(&s, &id, &[], "print(keep)");
        assert_eq!(stdout_text(&v), "42\n", "an interrupted session lost its state: {v:#}");
    }
    // A session call's forks are the call's, not sessions of their own:
    // a child whose code ends does not take the next call.
    let (v, code) =
        code_json(&s, &id, &[], "import os\nif os.fork() == 0:\n    raise SystemExit(0)\nos.wait()\nprint('parent')");
    assert_eq!((code, stdout_text(&v)), (0, "parent\n"), "{v:#}");
    for _ in 0..3 {
        let (v, code) = code_json(&s, &id, &[], "import os\nprint(os.getpid())");
        assert_eq!(code, 0, "{v:#}");
    }
}

/// Issue 31, item 4: a session killed by the OOM killer was reported as
/// `signaled`, `oom_kills: 0`, `restarted: false`, though its state was
/// gone. The session runs each call in the call's leaf, so the kill is
/// the call's; the verdict says `oom_killed` and that the session was
/// restarted, and the next call finds fresh state.
#[test]
fn session_oom_kill_is_reported_and_restarts_the_session() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python", "--memory", "256M"]);
    let (v, code) = code_json(&s, &id, &[], "keep = 42");
    assert_eq!(code, 0, "{v:#}");
    let (v, code) = code_json(&s, &id, &[], "b = bytearray(1 << 30)\nprint('survived')");
    assert_eq!((code, &v["termination"]), (137, &serde_json::json!("oom_killed")), "{v:#}");
    assert!(v["resources"]["oom_kills"].as_u64().unwrap_or(0) >= 1, "{}", v["resources"]);
    assert_eq!(
        (&v["warm"]["restarted"], &v["warm"]["restart_cause"]),
        (&Value::Bool(true), &serde_json::json!("oom_killed")),
        "{v:#}"
    );
    let (v, code) = answer_after_restart(&s, &id, "print('keep' in globals())");
    assert_eq!((code, stdout_text(&v)), (0, "False\n"), "{v:#}");
}

/// The host pid of the sandbox `id`'s zygote: pid 1 of its own pid
/// namespace, running the shim, in the sandbox's cgroup.
fn zygote_of(id: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let nspid = status.lines().find(|l| l.starts_with("NSpid:"))?;
        let zygote = String::from_utf8_lossy(&cmdline).contains("husk-warm-shim")
            && nspid.split_whitespace().last() == Some("1")
            && cgroup.contains(&format!("sbx-{id}/warm"));
        zygote.then_some(pid)
    })
}

/// Issue 31, item 5: a zygote that died while a call ran (the OOM killer
/// took it under a fork bomb) was replaced silently: the verdict said
/// `signaled`, `restarted: false`. The call dies with its zygote (the init
/// of its pid namespace); the verdict must say the interpreter was
/// restarted, and why as far as husk can tell.
#[test]
fn warm_zygote_death_during_a_call_is_reported() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python"]);
    let zygote = zygote_of(&id).expect("the sandbox's zygote");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(zygote), nix::sys::signal::Signal::SIGKILL);
    });
    let (v, code) =
        code_json(&s, &id, &["--timeout", "30s"], "import time\nprint('started', flush=True)\ntime.sleep(20)");
    killer.join().unwrap();
    assert_eq!((code, &v["termination"]), (137, &serde_json::json!("signaled")), "{v:#}");
    assert_eq!(
        (&v["warm"]["restarted"], &v["warm"]["restart_cause"]),
        (&Value::Bool(true), &serde_json::json!("killed")),
        "the zygote's death during the call was not reported: {v:#}"
    );
    let (v, code) = answer_after_restart(&s, &id, "print('again')");
    assert_eq!((code, stdout_text(&v)), (0, "again\n"), "{v:#}");
    assert_eq!(v["warm"]["restarted"], false, "{v:#}");
}

/// Issue 31, item 6: what a call left reached the next call. A `setsid`
/// daemon of call 1 ran on in call 2; a `csv.py` call 1 wrote in its
/// writable working directory was what call 2's `import csv` ran ('' was
/// first on sys.path). Every process of a call goes with its leaf when the
/// call ends, and the working directory comes after the standard library.
#[test]
fn warm_call_leaves_nothing_for_the_next_call() {
    require_root!();
    python3();
    let s = Sbx::new();
    let leave = "import os\nopen('csv.py', 'w').write('print(\"planted\")\\n')\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        null = os.open('/dev/null', os.O_RDWR)\n        for f in (0, 1, 2):\n            os.dup2(null, f)\n        open('/proc/self/comm', 'w').write('husk-daemon')\n        import time\n        time.sleep(60)\n    os._exit(0)\nos.wait()\nprint('left')";
    for how in [&["--warm", "python"][..], &["--session", "python"]] {
        let id = s.create_with(how);
        let wd = ["--workdir", "/tmp"];
        let (v, code) = code_json(&s, &id, &wd, leave);
        assert_eq!((code, stdout_text(&v)), (0, "left\n"), "{how:?}: {v:#}");
        let (v, code) = code_json(&s, &id, &wd, &census("husk-daemon"));
        assert_eq!((code, stdout_text(&v)), (0, "0\n"), "{how:?}: a daemon of the previous call runs on: {v:#}");
        let (v, code) = code_json(&s, &id, &wd, "import csv, sys\nprint(csv.__file__.startswith(sys.prefix))");
        assert_eq!((code, stdout_text(&v)), (0, "True\n"), "{how:?}: the previous call's csv.py was imported: {v:#}");
        // A module of the call's own in its working directory still imports.
        let (v, code) =
            code_json(&s, &id, &wd, "open('husk_mine.py', 'w').write('X = 7')\nimport husk_mine\nprint(husk_mine.X)");
        assert_eq!((code, stdout_text(&v)), (0, "7\n"), "{how:?}: {v:#}");
        s.rm(&id);
    }
    // A bash session's background job, and one that left its session.
    let id = s.create_with(&["--session", "bash"]);
    let (v, code) = code_json(&s, &id, &[], "sleep 4242 & setsid sleep 4242 </dev/null >/dev/null 2>&1 & echo left");
    assert_eq!((code, stdout_text(&v)), (0, "left\n"), "{v:#}");
    let (v, code) = code_json(&s, &id, &[], "grep -l 42[4]2 /proc/[0-9]*/cmdline 2>/dev/null | grep -vc self");
    assert_eq!(stdout_text(&v), "0\n", "a job of the previous call runs on ({code}): {v:#}");
}

/// Issue 31, item 3: after a session died while its call's processes held
/// every pid, its restart failed (`fork: EAGAIN`) and the sandbox's
/// interpreter stayed gone for good. The call's processes die with its
/// leaf, and an interpreter that could not be restarted is tried again at
/// the next call.
#[test]
fn session_restarts_after_its_call_held_every_pid() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--session", "python", "--pids", "16"]);
    let hold = "import os, signal, time\nkids = 0\nwhile True:\n    try:\n        if os.fork() == 0:\n            time.sleep(60)\n            os._exit(0)\n        kids += 1\n    except OSError:\n        break\nprint(kids, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)";
    let (v, code) = code_json(&s, &id, &["--timeout", "20s"], hold);
    assert_eq!(code, 137, "{v:#}");
    assert_eq!(v["warm"]["restarted"], true, "{v:#}");
    let (v, code) = answer_after_restart(&s, &id, "print('back')");
    assert_eq!((code, stdout_text(&v)), (0, "back\n"), "the session did not come back: {v:#}");
}

/// Issue 31, item 5: a fork bomb in a warm call ran the sandbox out of
/// memory and the OOM killer took the zygote (4 of 4 calls), not the
/// bomb: the zygote's file pages, which a fresh fork does not map yet,
/// made it the largest process. A call's processes are the first to go
/// (oom_score_adj 1000): the bomb dies of its own OOM, the zygote lives on
/// and takes the next call.
#[test]
fn warm_fork_bomb_leaves_the_zygote_alone() {
    require_root!();
    python3();
    let s = Sbx::new();
    let id = s.create_with(&["--warm", "python", "--memory", "48M", "--pids", "160", "--cpus", "0.5"]);
    let zygote = zygote_of(&id).expect("the sandbox's zygote");
    let bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let mut ooms = 0;
    for _ in 0..2 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (v, code) = code_json(&s, &id, &["--timeout", "3s"], bomb);
        assert!(code == 124 || code == 137, "{v:#}");
        assert_eq!(zygote_of(&id), Some(zygote), "the fork bomb took the zygote: {v:#}");
        assert_eq!(v["warm"]["restarted"], false, "{v:#}");
        ooms += v["resources"]["oom_kills"].as_u64().unwrap_or(0);
    }
    assert!(ooms > 0, "the bomb never ran the sandbox out of memory: this test proves nothing");
    let (v, code) = code_json(&s, &id, &[], "print('after')");
    assert_eq!((code, stdout_text(&v)), (0, "after\n"), "{v:#}");
    assert_eq!(zygote_of(&id), Some(zygote), "{v:#}");
}
