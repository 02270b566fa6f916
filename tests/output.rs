//! Output and the verdict: bounded capture of huge output with bounded
//! memory, invalid UTF-8 that still makes valid JSON, and the verdict file
//! next to passthrough stdio.
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
}
