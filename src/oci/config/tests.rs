use super::*;

fn spec(v: serde_json::Value) -> RawSpec {
    serde_json::from_value(v).unwrap()
}

fn bundle() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("husk-oci-cfg-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("rootfs")).unwrap();
    dir
}

fn base() -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["sh"], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "mount"}, {"type": "pid"}, {"type": "uts"}]},
        "someFutureField": {"x": 1}
    })
}

#[test]
fn unknown_fields_are_ignored_like_runc() {
    let p = plan(&bundle(), spec(base())).unwrap();
    assert!(p.has_new(Ns::Pid) && p.has_new(Ns::Mount));
    assert!(p.rootfs.ends_with("rootfs"));
}

#[test]
fn isolation_relevant_fields_husk_cannot_honour_are_refused() {
    let b = bundle();
    for (path, value, needle) in [
        ("/linux/namespaces", serde_json::json!([{"type": "pid"}]), "mount namespace"),
        ("/linux/sysctl", serde_json::json!({"kernel.panic": "1"}), "kernel.panic"),
        ("/linux/resources", serde_json::json!({"network": {"classID": 1}}), "network"),
        (
            "/linux/seccomp",
            serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/x",
                "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOTIFY"}]}),
            "SCMP_ACT_NOTIFY",
        ),
        ("/hostname", serde_json::json!("h"), "hostname"),
        ("/linux/personality", serde_json::json!({"domain": "LINUX32"}), "personality"),
    ] {
        let mut v = base();
        if path == "/hostname" {
            v["linux"]["namespaces"] = serde_json::json!([{"type": "mount"}]);
        }
        let (parent, key) = path.rsplit_once('/').unwrap();
        let target = if parent.is_empty() { &mut v } else { v.pointer_mut(parent).unwrap() };
        target[key] = value;
        let e = plan(&b, spec(v)).unwrap_err().to_string();
        assert!(e.contains(needle), "{path}: {e}");
    }
}

#[test]
fn mount_options_split_into_flags_propagation_and_data() {
    let m = RawMount {
        destination: "/dev/shm".into(),
        kind: Some("tmpfs".into()),
        source: Some("shm".into()),
        options: vec![
            "nosuid".into(),
            "noexec".into(),
            "nodev".into(),
            "mode=1777".into(),
            "size=65536k".into(),
            "rprivate".into(),
        ],
        ..Default::default()
    };
    let p = mount_plan(&m, Path::new("/b"), 0).unwrap();
    assert_eq!(p.flags, libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NODEV);
    assert_eq!(p.propagation, libc::MS_PRIVATE | libc::MS_REC);
    assert_eq!(p.data, "mode=1777,size=65536k");
    assert_eq!(p.kind, MountKind::Fs("tmpfs".into()));
    let b = RawMount {
        destination: "/x".into(),
        kind: Some("bind".into()),
        source: Some("/h".into()),
        options: vec!["rbind".into(), "ro".into()],
        ..Default::default()
    };
    let p = mount_plan(&b, Path::new("/b"), 0).unwrap();
    assert_eq!(p.kind, MountKind::Bind { recursive: true });
    assert_eq!(p.flags, libc::MS_RDONLY);
}

#[test]
fn device_rules_become_v1_lines() {
    let r = resources(
        serde_json::from_value(serde_json::json!({"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
            {"allow": true, "type": "c", "major": 136, "access": "rwm"}
        ]}))
        .unwrap(),
    )
    .unwrap();
    let lines: Vec<String> = r.devices.iter().map(|d| d.v1_line()).collect();
    assert_eq!(lines[..3], ["a", "c 1:3 rwm", "c 136:* rwm"]);
}

#[test]
fn recursive_options_become_mount_setattr_bits_and_the_last_wins() {
    let m = RawMount {
        destination: "/v".into(),
        kind: Some("bind".into()),
        source: Some("/h".into()),
        options: vec![
            "rbind".into(),
            "rnosuid".into(),
            "rnoatime".into(),
            "rsuid".into(),
            "rrelatime".into(),
            "rnodev".into(),
        ],
        ..Default::default()
    };
    let p = mount_plan(&m, Path::new("/b"), 0).unwrap();
    // nodev set; nosuid cleared (rsuid came last); atime field replaced by relatime (0).
    assert_eq!(p.recursive_attrs, (0x04, 0x02 | 0x70));
    let bad = RawMount { options: vec!["rsync".into()], ..m };
    assert!(mount_plan(&bad, Path::new("/b"), 0).is_err(), "no mount_setattr bit for sync: refused");
}
