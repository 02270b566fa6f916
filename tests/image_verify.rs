//! Damage to the image store after import (a layer file overwritten, a
//! file removed, a blob corrupted: disk faults, stray writes, a power loss)
//! is found by `husk image verify`, repaired by `--repair` or a re-import,
//! and named by `husk run` when it makes the command fail to start.
mod imagekit;
use imagekit::*;
use serde_json::{Value, json};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

fn layout(dir: &Path) -> Layout {
    let mut l = Layout::new(dir);
    let app = Layer::gzip(Tar::new().dir("app/", 0o755).file("app/data", b"payload\n").finish());
    l.image(&[Layer::gzip(busybox_tar()), app], json!({}), None);
    l
}

/// The unpacked directory of the store's layer whose content has `file`.
fn layer_with(store: &Path, file: &str) -> PathBuf {
    std::fs::read_dir(store.join("layers"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir() && std::fs::symlink_metadata(p.join(file)).is_ok())
        .unwrap_or_else(|| panic!("no layer holds {file}"))
}

/// Overwrites the start of `path` in place: same size, other content.
fn scribble(path: &Path) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(b"garbage written into the layer").unwrap();
}

fn verify(store: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["image", "verify", "--json"];
    args.extend_from_slice(extra);
    let o = husk_in(store, &args);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("verify --json: {e}: {}", stderr(&o)));
    (o.status.code().unwrap(), v)
}

fn run(store: &Path, cmd: &[&str]) -> Value {
    let mut args = vec!["run", "--json", "--image", "img", "--"];
    args.extend_from_slice(cmd);
    let o = husk_in(store, &args);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("no verdict ({e}): {}", stderr(&o)))
}

/// Everything here runs as root and, in scripts/test.sh, as `tester`.
mod rootless {
    use super::*;

    #[test]
    fn unpack_records_a_manifest_of_every_file_with_its_hash() {
        let t = TempDir::new("manifest");
        let store = t.join("store");
        let l = layout(&t.join("src"));
        import_ok(&store, &l.dir, &["--name", "img"]);
        let dir = layer_with(&store, "bin/busybox");
        let files = dir.with_file_name(format!("{}.files.json", dir.file_name().unwrap().to_string_lossy()));
        let m: Value = serde_json::from_slice(&std::fs::read(&files).unwrap()).unwrap();
        let entries = m["entries"].as_array().unwrap();
        let bb = entries.iter().find(|e| e["path"] == "bin/busybox").unwrap();
        assert_eq!(bb["type"], "file");
        assert_eq!(bb["sha256"].as_str().unwrap(), &sha256(&std::fs::read("/bin/busybox").unwrap())[7..]);
        assert_eq!(bb["mode"], 0o755);
        let sh = entries.iter().find(|e| e["path"] == "bin/sh").unwrap();
        assert_eq!((&sh["type"], &sh["target"]), (&json!("symlink"), &json!("busybox")));
        let tmp = entries.iter().find(|e| e["path"] == "tmp").unwrap();
        assert_eq!((&tmp["type"], &tmp["mode"]), (&json!("dir"), &json!(0o1777)));
        let (code, v) = verify(&store, &[]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["images"][0]["status"], "ok", "{v}");
    }

    #[test]
    fn overwritten_layer_file_and_blob_are_found_repaired_and_run_again() {
        let t = TempDir::new("scribble");
        let store = t.join("store");
        let l = layout(&t.join("src"));
        let r = import_ok(&store, &l.dir, &["--name", "img"]);
        // Same size, other bytes: only hashing finds it.
        scribble(&layer_with(&store, "bin/busybox").join("bin/busybox"));
        let config = store.join("blobs").join(&r["config"].as_str().unwrap()[7..]);
        std::fs::write(&config, b"{}").unwrap();

        let (code, v) = verify(&store, &["img"]);
        assert_eq!(code, 1, "damage found is exit 1: {v}");
        let img = &v["images"][0];
        assert_eq!(img["status"], "damaged", "{v}");
        assert_eq!(img["repair"], "husk image verify img:latest --repair");
        let bad_layer = img["layers"].as_array().unwrap().iter().find(|l| l["status"] != "ok").unwrap();
        assert_eq!(bad_layer["damaged"][0]["path"], "bin/busybox", "{v}");
        assert!(bad_layer["damaged"][0]["why"].as_str().unwrap().contains("content differs"), "{v}");
        let bad_blob = img["blobs"].as_array().unwrap().iter().find(|b| b["status"] != "ok").unwrap();
        assert_eq!(bad_blob["role"], "config", "{v}");

        let (code, v) = verify(&store, &["img", "--repair"]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["images"][0]["status"], "repaired", "{v}");
        let (code, v) = verify(&store, &[]);
        assert_eq!(code, 0, "after the repair: {v}");
        let v = run(&store, &["sh", "-c", "cat /app/data"]);
        assert_eq!(v["termination"], "exited", "{v}");
        assert_eq!(v["stdout"]["text"], "payload\n", "{v}");
    }

    #[test]
    fn run_of_a_damaged_image_names_the_layer_and_the_repair() {
        let t = TempDir::new("blame");
        let store = t.join("store");
        let l = layout(&t.join("src"));
        import_ok(&store, &l.dir, &["--name", "img"]);
        let layer = layer_with(&store, "bin/busybox");
        scribble(&layer.join("bin/busybox"));
        let v = run(&store, &["/bin/busybox", "true"]);
        assert_eq!((v["termination"].as_str(), v["exit_code"].as_u64()), (Some("setup_failed"), Some(126)), "{v}");
        let hint = v["error"]["hint"].as_str().unwrap_or_default();
        let key = layer.file_name().unwrap().to_string_lossy().into_owned();
        assert!(hint.contains(&key[..64]) && hint.contains("bin/busybox"), "names the layer and file: {v}");
        assert!(hint.contains("husk image verify img:latest --repair"), "{v}");

        // A file gone from a layer: the run fails with 127, the quick check
        // finds it.
        std::fs::remove_file(layer.join("bin/busybox")).unwrap();
        let v = run(&store, &["/bin/busybox", "true"]);
        assert_eq!(v["exit_code"], 127, "{v}");
        let hint = v["error"]["hint"].as_str().unwrap_or_default();
        assert!(hint.contains("bin/busybox: missing") && hint.contains("--repair"), "{v}");
    }

    #[test]
    fn reimport_replaces_a_layer_that_no_longer_matches_its_manifest() {
        let t = TempDir::new("reimport");
        let store = t.join("store");
        let l = layout(&t.join("src"));
        import_ok(&store, &l.dir, &["--name", "img"]);
        let app = layer_with(&store, "app/data");
        std::fs::write(app.join("app/data"), b"changed, and longer than before\n").unwrap();
        let again = import_ok(&store, &l.dir, &["--name", "img"]);
        let statuses: Vec<_> = again["layers"].as_array().unwrap().iter().map(|l| l["status"].clone()).collect();
        assert_eq!(statuses, [json!("reused"), json!("replaced")], "{again}");
        assert_eq!(again["replaced"], 1);
        assert!(again["layers"][1]["damage"].as_str().unwrap().contains("app/data: size"), "{again}");
        assert_eq!(std::fs::read(app.join("app/data")).unwrap(), b"payload\n");
        assert_eq!(verify(&store, &[]).0, 0);
        assert_eq!(std::fs::read_dir(store.join("tmp")).unwrap().count(), 0, "the damaged copy is gone from tmp/");
    }

    #[test]
    fn repair_without_the_source_says_to_import_again() {
        let t = TempDir::new("nosource");
        let store = t.join("store");
        let l = layout(&t.join("src"));
        import_ok(&store, &l.dir, &["--name", "img"]);
        std::fs::remove_dir_all(layer_with(&store, "app/data").join("app")).unwrap();
        std::fs::remove_dir_all(&l.dir).unwrap();
        let (code, v) = verify(&store, &["--repair"]);
        assert_eq!(code, 1, "{v}");
        let img = &v["images"][0];
        assert_eq!(img["status"], "unrepairable", "{v}");
        assert!(img["repair"].as_str().unwrap().contains("husk image import PATH --name img:latest"), "{v}");
        assert!(img["repair_error"].as_str().unwrap().contains("no such file"), "{v}");
        let o = husk_in(&store, &["image", "verify"]);
        assert_eq!(o.status.code(), Some(1));
        assert!(stdout(&o).contains("app: missing"), "{}", stdout(&o));
    }

    #[test]
    fn verify_of_an_unknown_image_fails_as_a_husk_error() {
        let t = TempDir::new("unknown");
        let o = husk_in(&t.join("store"), &["image", "verify", "nope"]);
        assert_eq!(o.status.code(), Some(125));
        assert!(stderr(&o).contains("no image named \"nope:latest\""), "{}", stderr(&o));
    }
}
