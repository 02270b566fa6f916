//! Output and the verdict: bounded capture of huge output with bounded
//! memory, invalid UTF-8 that still makes valid JSON, the verdict file next
//! to passthrough stdio, and output that cannot be delivered (a full disk,
//! a closed pipe) failing loudly or ending quietly, never panicking.
mod common;

mod rootless {
    use super::common::*;
    use base64::Engine;
    use serde_json::Value;
    use std::io::Read;
    use std::process::Stdio;

    /// Peak resident set of a live process, in bytes.
    fn vm_hwm(pid: u32) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kb: u64 =
            status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    }

    #[test]
    fn capture_bounds_huge_output() {
        const TOTAL: u64 = 1 << 30;
        const LIMIT: u64 = 1 << 20;
        const PATTERN: &[u8] = b"abcdefghijklmnop\n";
        let script = format!("yes abcdefghijklmnop | head -c {TOTAL}");
        let mut child = husk(&["run", "--json", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        // The verdict (~1 MiB) does not fit the pipe: after the first read
        // husk is still alive, blocked writing it, with its peak behind it.
        let mut first = vec![0u8; 4096];
        let n = stdout.read(&mut first).unwrap();
        let peak = vm_hwm(child.id());
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest).unwrap();
        let status = child.wait().unwrap();
        let mut all = first[..n].to_vec();
        all.extend(rest);
        let v: Value = serde_json::from_slice(&all).expect("one JSON verdict");
        assert_eq!(status.code(), Some(0), "{}", v["error"]);

        let out = &v["stdout"];
        assert_eq!(out["bytes"], TOTAL, "stdout_bytes must count every byte");
        assert_eq!(out["truncated"], true);
        assert_eq!(out["base64"], Value::Null);
        let text = out["text"].as_str().unwrap();
        let byte_at = |i: u64| PATTERN[(i % PATTERN.len() as u64) as usize];
        let head: Vec<u8> = (0..LIMIT / 2).map(byte_at).collect();
        let tail: Vec<u8> = (TOTAL - LIMIT / 2..TOTAL).map(byte_at).collect();
        let marker = format!("[husk: {} bytes truncated]", TOTAL - LIMIT);
        assert!(text.as_bytes().starts_with(&head), "head is not the first {} bytes", LIMIT / 2);
        assert!(text.as_bytes().ends_with(&tail), "tail is not the last {} bytes", LIMIT / 2);
        assert!(text.contains(&marker), "no marker {marker:?}");
        assert!((text.len() as u64) < LIMIT + 100, "verdict text is {} bytes", text.len());

        let peak = peak.expect("husk's /proc status while it wrote the verdict");
        eprintln!("husk peak RSS while capturing 1 GiB: {} KiB", peak / 1024);
        assert!(peak < 64 << 20, "husk's peak RSS {} MiB is not bounded", peak >> 20);

        // A custom bound.
        let (v, _) = run_json(&["--output-limit", "1K"], &["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x"]);
        assert_eq!(v["stdout"]["bytes"], 100000);
        assert!(v["stdout"]["text"].as_str().unwrap().len() < 1024 + 64);
    }

    /// Captured output is held in husk's own memory, which no `--memory`
    /// charges: a limit above the in-memory ceiling (16 MiB per stream) is
    /// refused before anything runs, for `run` and `exec` alike.
    #[test]
    fn output_limit_beyond_the_in_memory_ceiling_is_refused() {
        let out =
            husk(&["run", "--json", "--output-limit", "1T", "--memory", "64M", "--", "echo", "ran"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"), "the command must not run");
        assert!(err.contains("--output-limit") && err.contains("16 MiB"), "the bound is named: {err}");
        assert!(err.contains("--verdict-file"), "the way to more output is named: {err}");
        let out = husk(&["exec", "no-such-sandbox", "--json", "--output-limit", "17M", "--", "true"]).output().unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(String::from_utf8_lossy(&out.stderr).contains("16 MiB"), "{}", String::from_utf8_lossy(&out.stderr));
        let (v, code) = run_json(&["--output-limit", "16M"], &["echo", "ran"]);
        assert_eq!((code, v["stdout"]["text"].as_str()), (0, Some("ran\n")), "the ceiling itself is allowed");
    }

    /// At the ceiling, 512 MiB of binary output (lossy text plus base64 in
    /// the verdict, the most expensive kind to keep) leaves husk's peak RSS
    /// bounded and the verdict counting every byte.
    #[test]
    fn capture_at_the_ceiling_keeps_husk_memory_bounded() {
        const TOTAL: u64 = 512 << 20;
        const LIMIT: u64 = 16 << 20;
        let script = format!("head -c {TOTAL} /dev/urandom");
        let mut child = husk(&["run", "--json", "--output-limit", "16M", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        // The verdict (~60 MiB) does not fit the pipe: after the first read
        // husk is still alive, blocked writing it, with its peak behind it.
        let mut first = vec![0u8; 4096];
        let n = stdout.read(&mut first).unwrap();
        let peak = vm_hwm(child.id()).expect("husk's /proc status while it wrote the verdict");
        let mut all = first[..n].to_vec();
        stdout.read_to_end(&mut all).unwrap();
        let status = child.wait().unwrap();
        let v: Value = serde_json::from_slice(&all).expect("one JSON verdict");
        assert_eq!(status.code(), Some(0), "{}", v["error"]);
        assert_eq!(v["stdout"]["bytes"], TOTAL, "every byte is counted");
        assert_eq!(v["stdout"]["truncated"], true);
        let kept = base64::engine::general_purpose::STANDARD.decode(v["stdout"]["base64"].as_str().unwrap()).unwrap();
        // Kept: the halves of the limit (less up to 3 bytes each that cut a
        // character), with the marker between them counting what was not.
        let text = v["stdout"]["text"].as_str().unwrap();
        let dropped: u64 = text
            .split_once("[husk: ")
            .and_then(|(_, r)| r.split_once(" bytes truncated]"))
            .and_then(|(n, _)| n.parse().ok())
            .expect("a truncation marker");
        assert!((TOTAL - LIMIT..=TOTAL - LIMIT + 6).contains(&dropped), "{dropped}");
        let marker = format!("\n[husk: {dropped} bytes truncated]\n");
        assert_eq!(kept.len() as u64, TOTAL - dropped + marker.len() as u64, "head + marker + tail");
        eprintln!("husk peak RSS capturing 512 MiB at --output-limit 16M: {} MiB", peak >> 20);
        assert!(peak < 128 << 20, "husk's peak RSS {} MiB is not bounded by the ceiling", peak >> 20);
    }

    #[test]
    fn invalid_utf8_output_is_valid_json() {
        let (v, code) = run_json(&[], &["sh", "-c", r"printf 'a\377\376b\n'; printf '\300x' >&2"]);
        assert_eq!(code, 0, "{v:#}");
        let decode = |s: &Value| base64::engine::general_purpose::STANDARD.decode(s.as_str().unwrap()).unwrap();
        assert_eq!(v["stdout"]["text"], "a\u{fffd}\u{fffd}b\n");
        assert_eq!(decode(&v["stdout"]["base64"]), b"a\xff\xfeb\n");
        assert_eq!(v["stdout"]["bytes"], 5);
        assert_eq!(decode(&v["stderr"]["base64"]), b"\xc0x");
        // Valid UTF-8 carries no base64.
        let (v, _) = run_json(&[], &["sh", "-c", "printf 'h\\303\\251llo'"]);
        assert_eq!(v["stdout"]["text"], "héllo");
        assert_eq!(v["stdout"]["base64"], Value::Null);
        // Truncated and invalid together: the kept bytes round-trip.
        let (v, _) = run_json(&["--output-limit", "64"], &["sh", "-c", "head -c 5000 /dev/urandom"]);
        assert_eq!(v["stdout"]["truncated"], true);
        assert_eq!(v["stdout"]["bytes"], 5000);
        assert!(!decode(&v["stdout"]["base64"]).is_empty());
    }

    #[test]
    fn verdict_file_written_with_passthrough() {
        let dir = TempDir::new("verdict");
        let file = dir.join("v.json");
        let out = husk(&[
            "run",
            "--verdict-file",
            file.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo to-stdout; echo to-stderr >&2; exit 5",
        ])
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(5));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "to-stdout\n", "stdout must pass through untouched");
        assert!(String::from_utf8_lossy(&out.stderr).contains("to-stderr"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("verdict file")).unwrap();
        assert_eq!(v["termination"], "exited");
        assert_eq!(v["exit_code"], 5);
        assert_eq!(v["stdout"], Value::Null, "the verdict file carries no captured output");
        assert_eq!(v["stderr"], Value::Null);
        assert!(v["isolation"]["namespaces"].as_array().is_some_and(|a| !a.is_empty()));
    }

    /// A verdict file that is not a regular file (FIFO, device, /dev/fd/N)
    /// is written in place, never replaced: as root, replacing
    /// `--verdict-file /dev/null` would break the host's /dev/null.
    #[test]
    fn verdict_file_that_is_a_fifo_is_written_in_place() {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let dir = TempDir::new("fifo");
        let fifo = dir.join("verdict.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Opened for reading first (non-blocking), so husk's open for
        // writing finds a reader; the verdict waits in the pipe buffer.
        let mut reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        let out = husk(&["run", "--verdict-file", fifo.to_str().unwrap(), "--", "true"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
        let mut data = Vec::new();
        let _ = reader.read_to_end(&mut data);
        let v: Value = serde_json::from_slice(&data).expect("the verdict came through the FIFO");
        assert_eq!(v["termination"], "exited");
    }

    /// husk's stdout on /dev/full (every write fails with ENOSPC).
    fn full() -> Stdio {
        Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap())
    }

    /// husk's stdout on a pipe whose reader is already gone (EPIPE).
    fn closed_pipe() -> Stdio {
        let (r, w) = nix::unistd::pipe().unwrap();
        drop(r);
        Stdio::from(w)
    }

    /// Commands that print on stdout, with a private store and state dir
    /// (nothing here touches what other tests or the host have).
    fn printers(store: &TempDir, state: &TempDir) -> Vec<Vec<String>> {
        let g = |rest: &[&str]| {
            let mut a = vec![
                "--root".to_string(),
                store.path().display().to_string(),
                "--state-dir".to_string(),
                state.path().display().to_string(),
            ];
            a.extend(rest.iter().map(|s| s.to_string()));
            a
        };
        vec![
            g(&["run", "--json", "--", "true"]),
            g(&["seccomp", "show", "default"]),
            g(&["seccomp", "check", "strict"]),
            g(&["image", "ls"]),
            g(&["image", "ls", "--json"]),
            g(&["ls"]),
            g(&["ls", "--json"]),
        ]
    }

    /// `husk ... > /dev/full`: the output is lost, so husk failed (125,
    /// saying why on stderr), whatever the command did; before, husk said
    /// nothing and exited 0, or panicked (101).
    #[test]
    fn output_lost_to_a_full_disk_fails_with_125_and_says_so() {
        let (store, state) = (TempDir::new("full-store"), TempDir::new("full-state"));
        for args in printers(&store, &state) {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = husk(&a).stdout(full()).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(125), "husk {}: {err}", a[4..].join(" "));
            assert!(err.contains("writing to stdout failed"), "husk {}: {err}", a[4..].join(" "));
            assert!(!err.contains("panicked"), "husk {}: {err}", a[4..].join(" "));
        }
    }

    /// `husk ... | head -c1`: the reader went away; husk ends as `ls` does
    /// then (killed by SIGPIPE, 141 in a shell, nothing on stderr), not by
    /// a panic.
    #[test]
    fn closed_pipe_on_stdout_ends_husk_quietly_like_ls() {
        use std::os::unix::process::ExitStatusExt;
        let (store, state) = (TempDir::new("pipe-store"), TempDir::new("pipe-state"));
        for args in printers(&store, &state) {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = husk(&a).stdout(closed_pipe()).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "husk {}: {:?} {err}", a[4..].join(" "), out.status);
            assert_eq!(err, "", "husk {}", a[4..].join(" "));
        }
    }

    /// A verdict file husk could not write at the end would lose the run's
    /// result: a path in a missing directory, or a directory, is refused
    /// before the command runs (125), with or without --json.
    #[test]
    fn verdict_file_that_cannot_be_written_is_refused_before_the_command_runs() {
        let dir = TempDir::new("vfile");
        let marker = dir.join("ran");
        let script = format!("touch {}", marker.display());
        let missing = dir.join("no/such/dir/v.json");
        for (target, why) in [(missing.as_path(), "create it first"), (dir.path(), "is a directory")] {
            for json in [false, true] {
                let mut a = vec!["run", "--verdict-file", target.to_str().unwrap()];
                if json {
                    a.push("--json");
                }
                a.extend(["--", "sh", "-c", &script]);
                let out = husk(&a).output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(125), "{target:?}: {err}");
                assert!(err.contains("--verdict-file") && err.contains(why), "{target:?}: {err}");
                assert!(!marker.exists(), "{target:?}: the command ran although its verdict had nowhere to go");
                if json {
                    let v: Value = serde_json::from_slice(&out.stdout).expect("the early verdict on stdout");
                    assert_eq!(v["error"]["step"], "arguments");
                }
            }
        }
        // A file that exists only as a link to nothing fails the same way.
        let dangling = dir.join("dangling.json");
        std::os::unix::fs::symlink(dir.join("nothing/here"), &dangling).unwrap();
        let out = husk(&["run", "--verdict-file", dangling.to_str().unwrap(), "--", "true"]).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
