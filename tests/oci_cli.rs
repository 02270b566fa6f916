//! husk's runc-compatible command line (issue 22), driven directly the way
//! containerd's runc shim and go-runc drive it: a bundle, `create` with a
//! pid file, `start`, `state`, `kill`, `delete`, `pause`/`resume`,
//! `features`. The threat in every case is a caller (a shim) that acts on
//! a wrong answer: a pid file it cannot parse, an init it cannot reap, a
//! state it misreads, an error wording it does not recognise, a container
//! that is not frozen when it was told it is.
//!
//! This test process is a child subreaper, as the shim is: every
//! container's init, orphaned when `create` returns, is reparented here
//! and reaped by the test that made it.
//!
//! `HUSK_OCI_RUNTIME=/usr/sbin/runc` runs the same tests against runc.
mod dockerkit;
mod imagekit;
mod ocikit;

use ocikit::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

fn require_root() {
    assert!(nix::unistd::Uid::effective().is_root(), "the OCI runtime tests create containers as root");
}

/// The pid file holds init's host pid as bare decimal digits, no newline
/// (the shim parses it with strconv.Atoi, which rejects "123\n"), and it
/// is written before `create` returns, with init alive in "created".
#[test]
fn pid_file_has_no_newline() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let b = Bundle::new(&["true"]);
    let id = unique("pidfile");
    let pid_file = b.dir.join("init.pid");
    let so = std::fs::File::create(b.dir.join("create.out")).unwrap();
    let status = rt.create_cmd(&b, &id, &pid_file).stdout(so.try_clone().unwrap()).stderr(so).status().unwrap();
    assert!(status.success(), "create: {}", std::fs::read_to_string(b.dir.join("create.out")).unwrap());
    let bytes = std::fs::read(&pid_file).unwrap();
    assert!(!bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit), "pid file bytes: {bytes:?}");
    let pid = read_pid_file(&pid_file);
    assert_eq!(rt.state(&id)["pid"], json!(pid));
    assert_eq!(rt.status(&id), "created");
    assert!(proc_stat(pid).is_some_and(|(s, _)| s != 'Z'), "init {pid} is not alive in created");
    rt.start(&id);
    assert_eq!(reap(pid), 0);
    let o = rt.run(&["delete", &id]);
    assert!(o.status.success(), "{}", show(&o));
}

/// After `create` returns, init's parent is the caller (a subreaper), not
/// a runtime process that stays behind: the caller reaps it and gets the
/// container's exit status.
#[test]
fn create_leaves_init_to_subreaper() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let b = Bundle::new(&["sh", "-c", "exit 7"]);
    let id = unique("reaper");
    let pid = rt.create(&b, &id);
    let me = std::process::id() as i32;
    assert_eq!(proc_stat(pid).map(|(_, pp)| pp), Some(me), "init {pid} was not left to the subreaper {me}");
    rt.start(&id);
    assert_eq!(reap(pid), 7, "the exit status reaped from init");
    assert_eq!(rt.status(&id), "stopped");
    let o = rt.run(&["delete", &id]);
    assert!(o.status.success(), "{}", show(&o));
}

/// `state` has runc's keys with runc's JSON types, for the same bundle in
/// the same status.
#[test]
fn state_json_matches_runc_fields() {
    require_root();
    become_subreaper();
    let b = Bundle::new(&["sleep", "1000"]);
    let mut states = Vec::new();
    for rt in [Runtime::with_bin(RUNC.into()), Runtime::new()] {
        let id = unique("state");
        let pid = rt.create(&b, &id);
        let st = rt.state(&id);
        assert_eq!(st["id"], json!(id));
        assert_eq!(st["pid"], json!(pid));
        assert_eq!(st["status"], json!("created"));
        assert_eq!(st["bundle"], json!(b.path().to_str().unwrap()));
        assert_eq!(st["rootfs"], json!(b.dir.join("rootfs").to_str().unwrap()));
        let created = st["created"].as_str().unwrap_or_default();
        assert!(created.len() >= 20 && created.as_bytes()[10] == b'T', "created is not RFC 3339: {created:?}");
        rt.start(&id);
        assert_eq!(rt.status(&id), "running");
        let o = rt.run(&["kill", &id, "KILL"]);
        assert!(o.status.success(), "{}", show(&o));
        assert_eq!(reap(pid), 137);
        assert_eq!(rt.status(&id), "stopped");
        let o = rt.run(&["delete", &id]);
        assert!(o.status.success(), "{}", show(&o));
        states.push(st);
    }
    let shape = |v: &Value| -> Vec<(String, &'static str)> {
        let mut s: Vec<_> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let t = match v {
                    Value::Null => "null",
                    Value::Bool(_) => "bool",
                    Value::Number(_) => "number",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                };
                (k.clone(), t)
            })
            .collect();
        s.sort();
        s
    };
    assert_eq!(
        shape(&states[1]),
        shape(&states[0]),
        "state of the runtime under test vs runc's:\n{}\n{}",
        states[1],
        states[0]
    );
}

/// `kill --all` of a stopped container succeeds (the shim sends it after
/// init exited); a plain kill says "container not running".
#[test]
fn kill_all_on_stopped_succeeds() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let b = Bundle::new(&["true"]);
    let id = unique("killall");
    let pid = rt.create(&b, &id);
    rt.start(&id);
    assert_eq!(reap(pid), 0);
    assert_eq!(rt.status(&id), "stopped");
    let o = rt.run(&["kill", "--all", &id, "KILL"]);
    assert!(o.status.success(), "kill --all on a stopped container: {}", show(&o));
    let o = rt.run(&["kill", &id, "9"]);
    assert!(!o.status.success(), "kill of a stopped container succeeded: {}", show(&o));
    assert!(err(&o).contains("container not running"), "wording: {}", show(&o));
    let o = rt.run(&["delete", &id]);
    assert!(o.status.success(), "{}", show(&o));
}

/// The errors the shim matches on: "does not exist" for an unknown id,
/// "container not running" for a kill of a stopped one.
#[test]
fn unknown_id_errors_match_runc_wording() {
    require_root();
    let rt = Runtime::new();
    let id = unique("nosuch");
    for args in [vec!["state", &id], vec!["delete", &id], vec!["kill", &id, "KILL"], vec!["start", &id]] {
        let o = rt.run(&args);
        assert!(!o.status.success(), "{args:?} of an unknown id succeeded: {}", show(&o));
        assert!(err(&o).contains("does not exist"), "{args:?}: {}", show(&o));
    }
    // The shim's delete --force of a container already gone is not an error.
    let o = rt.run(&["delete", "--force", &id]);
    assert!(o.status.success(), "delete --force of an unknown id: {}", show(&o));
}

/// Errors on stderr in runc's form, which tools scan: without `--log` the
/// log line itself (`time="..." level=error msg="..."`, or JSON with
/// `--log-format json`), with `--log FILE` the bare message (the line goes
/// to the file). husk wrote "husk: msg" whatever the flags.
#[test]
fn errors_on_stderr_in_runcs_form() {
    require_root();
    let rt = Runtime::new();
    let id = unique("errform");
    let o = rt.run(&["state", &id]);
    let e = err(&o);
    assert!(!o.status.success());
    assert!(
        e.starts_with("time=\"")
            && e.contains(" level=error msg=\"")
            && e.contains("does not exist")
            && e.lines().count() == 1,
        "text form: {e:?}"
    );
    let mut c = Command::new(runtime_bin());
    c.arg("--root").arg(rt.root.path()).args(["--log-format", "json", "state", &id]);
    let o = c.stdin(Stdio::null()).output().unwrap();
    let line: Value = serde_json::from_str(err(&o).trim()).unwrap_or_else(|e| panic!("json form: {e}: {}", show(&o)));
    assert_eq!(line["level"], "error", "{line}");
    assert!(line["msg"].as_str().unwrap().contains("does not exist"), "{line}");
    let log = rt.root.path().join("errform.log");
    let mut c = Command::new(runtime_bin());
    c.arg("--root").arg(rt.root.path()).arg("--log").arg(&log).args(["state", &id]);
    let o = c.stdin(Stdio::null()).output().unwrap();
    let e = err(&o);
    assert!(
        e.trim_end().ends_with("does not exist") && !e.contains("level=") && !e.contains("husk:"),
        "with --log: {e:?}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("level=error msg=\"") && logged.contains("does not exist"), "log file: {logged:?}");
}

/// runc's `exec --ignore-paused` and `checkpoint`/`restore` got clap's
/// "unexpected argument"/"unrecognized subcommand" (a usage error the
/// shim does not expect) from husk. `--ignore-paused` is taken (exec in a
/// running container works with it), exec in a paused container without
/// it is runc's error, and checkpoint/restore are runtime errors logged
/// at level=error like any other.
#[test]
fn exec_ignore_paused_and_checkpoint_are_runtime_errors() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("ignpaused");
    let pid = rt.create(&b, &id);
    rt.start(&id);
    let log = b.dir.join("verbs.log");
    let with_log = |args: &[&str]| {
        let mut c = Command::new(runtime_bin());
        c.arg("--root").arg(rt.root.path()).arg("--log").arg(&log).args(args);
        c.stdin(Stdio::null()).output().unwrap()
    };
    let o = with_log(&["exec", "--ignore-paused", &id, "true"]);
    assert!(o.status.success(), "exec --ignore-paused in a running container: {}", show(&o));
    // pause/resume are husk's own verbs too: runc's come with --log, as
    // engines pass it (docs/oci-runtime.md).
    let o = with_log(&["pause", &id]);
    assert!(o.status.success(), "pause: {}", show(&o));
    let o = with_log(&["exec", &id, "true"]);
    assert!(!o.status.success());
    assert!(err(&o).contains("cannot exec in a paused container"), "{}", show(&o));
    let o = with_log(&["resume", &id]);
    assert!(o.status.success(), "resume: {}", show(&o));
    let images = b.dir.join("images");
    for args in [
        vec!["checkpoint", "--image-path", images.to_str().unwrap(), &id],
        vec!["restore", "--image-path", images.to_str().unwrap(), "--bundle", b.path().to_str().unwrap(), "restored"],
    ] {
        let _ = std::fs::remove_file(&log);
        let o = with_log(&args);
        assert!(!o.status.success(), "{args:?}: {}", show(&o));
        let e = err(&o);
        assert!(
            !e.contains("unexpected argument") && !e.contains("unrecognized subcommand") && !e.contains("Usage"),
            "{args:?} is a runtime error, not a usage error: {e}"
        );
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(logged.contains("level=error"), "{args:?} logged at level=error: {logged:?}");
    }
    rt.force_delete(&id);
    reap(pid);
}

/// `pause` freezes every process of the container (the freezer says
/// FROZEN, status "paused"); `resume` thaws it and it goes on.
#[test]
fn pause_resume_freezes() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let host = imagekit::TempDir::new("pause-io");
    let mut b = Bundle::new(&[
        "sh",
        "-c",
        &format!("echo ready > {0}/ready; read x < {0}/fifo; echo thawed > {0}/done", host.path().display()),
    ]);
    b.bind_same_path(host.path());
    b.write();
    nix::unistd::mkfifo(&host.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let id = unique("pause");
    let pid = rt.create(&b, &id);
    rt.start(&id);
    wait_for("the container to start", || host.join("ready").exists().then_some(()));
    // husk has `pause`/`resume` verbs of its own (a live sandbox's): the
    // runtime's come with `--log`, as engines pass it (docs/oci-runtime.md).
    let log = host.join("runtime.log");
    let log = log.to_str().unwrap();
    let o = rt.run(&["--log", log, "pause", &id]);
    assert!(o.status.success(), "pause: {}", show(&o));
    assert_eq!(rt.status(&id), "paused");
    assert_eq!(frozen(&b.cgroup), Some(true), "the freezer of {} is not frozen", b.cgroup);
    let o = rt.run(&["--log", log, "resume", &id]);
    assert!(o.status.success(), "resume: {}", show(&o));
    assert_eq!(rt.status(&id), "running");
    assert_eq!(frozen(&b.cgroup), Some(false));
    std::fs::write(host.join("fifo"), "go\n").unwrap();
    assert_eq!(reap(pid), 0);
    assert_eq!(std::fs::read_to_string(host.join("done")).unwrap(), "thawed\n");
    let o = rt.run(&["delete", &id]);
    assert!(o.status.success(), "{}", show(&o));
}

/// A second container joins the first's network and IPC namespaces by
/// path (a Kubernetes pod joins its pause container's).
#[test]
fn join_namespace_by_path() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let pause = Bundle::new(&["sleep", "1000"]);
    let pause_id = unique("pod-pause");
    let pause_pid = rt.create(&pause, &pause_id);
    rt.start(&pause_id);
    let host = imagekit::TempDir::new("join-io");
    let mut b = Bundle::new(&[
        "sh",
        "-c",
        &format!("(readlink /proc/self/ns/net; readlink /proc/self/ns/ipc) > {}/ns", host.path().display()),
    ]);
    b.bind_same_path(host.path());
    for ns in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
        match ns["type"].as_str() {
            Some("network") => ns["path"] = json!(format!("/proc/{pause_pid}/ns/net")),
            Some("ipc") => ns["path"] = json!(format!("/proc/{pause_pid}/ns/ipc")),
            _ => {}
        }
    }
    b.write();
    let id = unique("pod-app");
    let pid = rt.create(&b, &id);
    rt.start(&id);
    assert_eq!(reap(pid), 0, "{}", b.logged(&id, "err"));
    let want = |n: &str| std::fs::read_link(format!("/proc/{pause_pid}/ns/{n}")).unwrap().display().to_string();
    let got = std::fs::read_to_string(host.join("ns")).unwrap();
    assert_eq!(got, format!("{}\n{}\n", want("net"), want("ipc")), "the joined namespaces");
    let mine = std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string();
    assert_ne!(want("net"), mine, "the pause container shares the host's netns");
    let _ = rt.run(&["delete", &id]);
    let _ = rt.run(&["kill", &pause_id, "KILL"]);
    assert_eq!(reap(pause_pid), 137);
    let _ = rt.run(&["delete", &pause_id]);
}

/// Every hook runs at its point of the lifecycle, in runc's order, with
/// `args` verbatim and the container's state JSON on stdin.
#[test]
fn hooks_run_in_order_with_state_on_stdin() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let host = imagekit::TempDir::new("hooks-io");
    let mut b = Bundle::new(&["true"]);
    b.bind_same_path(host.path());
    let dir = host.path().display().to_string();
    let hook = |name: &str| {
        json!([{
            "path": "/bin/sh",
            "args": ["sh", "-c", format!("cat > {dir}/{name}.json; echo \"{name} $0 $1\" >> {dir}/order"), "arg0", name],
            "env": ["HOOK_ENV=1"]
        }])
    };
    b.config["hooks"] = json!({
        "prestart": hook("prestart"),
        "createRuntime": hook("createRuntime"),
        "createContainer": hook("createContainer"),
        "startContainer": hook("startContainer"),
        "poststart": hook("poststart"),
        "poststop": hook("poststop"),
    });
    b.write();
    let id = unique("hooks");
    let pid = rt.create(&b, &id);
    let read_order = || std::fs::read_to_string(host.join("order")).unwrap_or_default();
    let line = |name: &str| format!("{name} arg0 {name}\n");
    let mut by_create: Vec<&str> = vec!["prestart", "createRuntime", "createContainer"];
    let mut by_start: Vec<&str> = vec!["startContainer", "poststart"];
    // runc before 1.5 runs poststart in `create` (runc#4347, against the
    // spec's lifecycle step 9); the reference run takes it as it is.
    if runtime_is_runc() {
        by_create.push(by_start.pop().unwrap());
    }
    let expect = |names: &[&str]| names.iter().map(|n| line(n)).collect::<String>();
    assert_eq!(read_order(), expect(&by_create), "hooks run by create");
    rt.start(&id);
    assert_eq!(reap(pid), 0);
    let o = rt.run(&["delete", &id]);
    assert!(o.status.success(), "{}", show(&o));
    let all: Vec<&str> = by_create.iter().chain(&by_start).copied().chain(["poststop"]).collect();
    assert_eq!(read_order(), expect(&all), "hooks run by start and delete");
    for (name, status) in [
        ("prestart", "creating"),
        ("createRuntime", "creating"),
        ("createContainer", "creating"),
        ("startContainer", "created"),
        ("poststart", if runtime_is_runc() { "created" } else { "running" }),
        ("poststop", "stopped"),
    ] {
        let text = std::fs::read_to_string(host.join(&format!("{name}.json"))).unwrap();
        let st: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}'s stdin is not JSON ({e}): {text:?}"));
        assert_eq!(st["id"], json!(id), "{name}: {st}");
        assert_eq!(st["bundle"], json!(b.path().to_str().unwrap()), "{name}: {st}");
        assert_eq!(st["status"], json!(status), "{name}: {st}");
        assert!(st["ociVersion"].is_string(), "{name}: {st}");
        // Hooks run in the runtime's namespaces see init's host pid; the
        // ones run in the container's see it from there (runc: 1).
        match name {
            "prestart" | "createRuntime" | "poststart" => assert_eq!(st["pid"], json!(pid), "{name}: {st}"),
            "createContainer" | "startContainer" => assert!(st["pid"].is_u64(), "{name}: {st}"),
            _ => {}
        }
    }
}

/// `features` is a runtime-spec features document (validated against the
/// spec's schema, tests/data/oci-features.schema.json), and what it
/// claims about namespaces holds on this kernel.
#[test]
fn features_json_valid_against_the_spec_schema() {
    let rt = Runtime::new();
    let o = rt.run(&["features"]);
    assert!(o.status.success(), "{}", show(&o));
    let doc: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("features is not JSON ({e}): {}", show(&o)));
    let schema: Value = serde_json::from_str(include_str!("data/oci-features.schema.json")).unwrap();
    jsonschema::meta::validate(&schema).expect("the features schema is a valid JSON Schema");
    let v = jsonschema::draft202012::new(&schema).expect("compile the features schema");
    let errors: Vec<String> = v.iter_errors(&doc).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "features document against the spec: {errors:#?}\n{doc:#}");
    for ns in doc["linux"]["namespaces"].as_array().into_iter().flatten() {
        let file = match ns.as_str().unwrap() {
            "network" => "net",
            "mount" => "mnt",
            other => other,
        };
        assert!(
            Path::new("/proc/self/ns").join(file).exists(),
            "features claims the {ns} namespace, which this kernel lacks"
        );
    }
    assert!(doc["hooks"].as_array().is_some_and(|h| h.len() == 6), "hooks: {}", doc["hooks"]);
}

/// `--version` is read by dockerd (`<name> version X` and `commit:`) and
/// go-runc (`spec:`).
#[test]
fn version_has_version_commit_and_spec_lines() {
    let o = std::process::Command::new(runtime_bin()).arg("--version").stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    let first: Vec<&str> = lines.first().copied().unwrap_or_default().split(' ').collect();
    assert!(first.len() == 3 && first[1] == "version" && !first[2].is_empty(), "first line: {text:?}");
    assert!(lines.iter().any(|l| l.strip_prefix("commit: ").is_some_and(|c| !c.is_empty())), "{text:?}");
    assert!(lines.iter().any(|l| l.strip_prefix("spec: ").is_some_and(|s| s.starts_with("1."))), "{text:?}");
}

/// `spec` writes a config.json runc runs as it is (after pointing the
/// process at a command with no terminal), and refuses to overwrite one.
#[test]
fn spec_writes_a_config_runc_runs() {
    require_root();
    become_subreaper();
    let rt = Runtime::new();
    let b = Bundle::new(&["true"]);
    std::fs::remove_file(b.dir.join("config.json")).unwrap();
    let o = rt.run(&["spec", "--bundle", b.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let mut config: Value = serde_json::from_slice(&std::fs::read(b.dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["root"]["path"], json!("rootfs"));
    assert_eq!(config["process"]["terminal"], json!(true));
    config["process"]["terminal"] = json!(false);
    config["process"]["args"] = json!(["sh", "-c", "exit 9"]);
    config["linux"]["cgroupsPath"] = json!(b.cgroup);
    std::fs::write(b.dir.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let o = rt.run(&["spec", "--bundle", b.path().to_str().unwrap()]);
    assert!(!o.status.success(), "spec overwrote config.json: {}", show(&o));
    let runc = Runtime::with_bin(RUNC.into());
    let id = unique("spec");
    let pid = runc.create(&b, &id);
    runc.start(&id);
    assert_eq!(reap(pid), 9);
    let _ = runc.run(&["delete", &id]);
}

/// `husk gc --oci-root ROOT`: a stopped container no engine deleted goes
/// (state, cgroup) while a running one in the same parent cgroup stays;
/// the parent husk made for the first goes with the last of them (no
/// /docker-like parent is left once the engine's containers are gone).
#[test]
fn gc_removes_stopped_containers_and_the_empty_parent_cgroup() {
    require_root();
    become_subreaper();
    // husk's own gc: always husk, whatever runtime the other tests drive.
    let rt = Runtime::with_bin(imagekit::husk_bin());
    let parent = format!("/{}", unique("gc-parent"));
    let mut live = Bundle::new(&["sleep", "1000"]);
    live.config["linux"]["cgroupsPath"] = json!(format!("{parent}/live"));
    live.cgroup = parent.clone();
    live.write();
    let mut done = Bundle::new(&["true"]);
    done.config["linux"]["cgroupsPath"] = json!(format!("{parent}/done"));
    done.cgroup = parent.clone();
    done.write();
    let (live_id, done_id) = (unique("gc-live"), unique("gc-done"));
    // The first container makes the parent; it is not the last to leave.
    let done_pid = rt.create(&done, &done_id);
    rt.start(&done_id);
    assert_eq!(reap(done_pid), 0);
    let live_pid = rt.create(&live, &live_id);
    rt.start(&live_id);
    let gc = || {
        let o = std::process::Command::new(imagekit::husk_bin())
            .args(["gc", "--json", "--min-age", "0s", "--oci-root"])
            .arg(rt.root.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "husk gc: {}", show(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("gc --json ({e}): {}", show(&o)));
        v["oci"].clone()
    };
    let report = gc();
    let me = |id: &str| json!(format!("{}/{id}", rt.root.path().display()));
    assert_eq!(report["removed"], json!([me(&done_id)]), "{report}");
    assert!(!rt.root.join(&done_id).exists(), "the stopped container's state is left");
    assert_eq!(cgroup_dirs(&format!("{parent}/done")), Vec::<std::path::PathBuf>::new());
    assert_eq!(rt.status(&live_id), "running", "gc touched a running container");
    assert!(!cgroup_dirs(&parent).is_empty(), "the parent went while a container is in it");
    let o = rt.run(&["kill", &live_id, "KILL"]);
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(reap(live_pid), 137);
    let report = gc();
    assert_eq!(report["removed"], json!([me(&live_id)]), "{report}");
    assert_eq!(cgroup_dirs(&parent), Vec::<std::path::PathBuf>::new(), "parent cgroup left: {report}");
}

/// `exec` with a terminal needs the socket the pty master goes to, and a
/// socket needs a terminal: either half alone is refused (husk's rule;
/// runc instead falls back to its own terminal), and the refused exec
/// leaves the container running. The whole path (`docker exec -it`) is
/// tests/oci_docker.rs `docker_exec_it_tty`.
#[test]
fn exec_terminal_without_console_socket_is_refused() {
    require_root();
    become_subreaper();
    let rt = Runtime::with_bin(imagekit::husk_bin());
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("exec-tty");
    let pid = rt.create(&b, &id);
    rt.start(&id);
    // `husk oci ...`: a bare `exec ID CMD` is husk's own exec otherwise.
    let exec = |args: &[&str]| {
        let mut c = std::process::Command::new(&rt.bin);
        c.arg("oci").arg("--root").arg(rt.root.path()).arg("exec").args(args).stdin(Stdio::null());
        c.output().unwrap()
    };
    let o = exec(&["-t", &id, "true"]);
    assert!(!o.status.success(), "exec -t without --console-socket ran: {}", show(&o));
    assert!(err(&o).contains("--console-socket"), "{}", show(&o));
    let sock = b.dir.join("console.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let o = exec(&["--console-socket", sock.to_str().unwrap(), &id, "true"]);
    assert!(!o.status.success(), "--console-socket without a terminal ran: {}", show(&o));
    assert_eq!(rt.status(&id), "running");
    let o = exec(&[&id, "true"]);
    assert!(o.status.success(), "a plain exec: {}", show(&o));
    let _ = rt.run(&["kill", &id, "KILL"]);
    assert_eq!(reap(pid), 137);
    let _ = rt.run(&["delete", &id]);
}
