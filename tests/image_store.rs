//! The image store: formats, sharing of layers between images, the
//! ls/inspect/rm/prune commands and concurrent imports. Layouts are built
//! in code (tests/imagekit); none of these need root.
mod imagekit;
use imagekit::*;
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Everything here runs as root and, in scripts/test.sh, as `tester`.
mod rootless {
    use super::*;

    fn base() -> Layer {
        Layer::gzip(Tar::new().dir("etc/", 0o755).file("etc/os-release", b"ID=test\n").file("bin/tool", b"#!").finish())
    }
    fn mid() -> Layer {
        Layer::zstd(Tar::new().dir("usr/lib/", 0o755).file("usr/lib/libx.so", &[1u8; 4096]).finish())
    }
    fn top() -> Layer {
        Layer::plain(Tar::new().dir("app/", 0o755).file("app/main", b"task").finish())
    }

    fn layer_dirs(store: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(store.join("layers"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn statuses(report: &Value) -> Vec<String> {
        report["layers"].as_array().unwrap().iter().map(|l| l["status"].as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn shared_base_layers_are_not_extracted_again() {
        let t = TempDir::new("shared");
        let store = t.join("store");
        let mut a = Layout::new(&t.join("a"));
        a.image(&[base(), mid()], json!({}), Some("v1"));
        let mut b = Layout::new(&t.join("b"));
        b.image(&[base(), mid(), top()], json!({}), Some("v1"));

        let ra = import_ok(&store, &a.dir, &[]);
        assert_eq!(statuses(&ra), ["extracted", "extracted"]);
        let base_dir = layer_dirs(&store).into_iter().find(|d| d.starts_with(&sha256(&base().tar)[7..])).unwrap();
        let ino = std::fs::metadata(store.join("layers").join(&base_dir)).unwrap().ino();

        let rb = import_ok(&store, &b.dir, &[]);
        assert_eq!(statuses(&rb), ["reused", "reused", "extracted"], "only the new layer is unpacked");
        assert_eq!((rb["extracted"].as_u64(), rb["reused"].as_u64()), (Some(1), Some(2)));
        assert_eq!(std::fs::metadata(store.join("layers").join(&base_dir)).unwrap().ino(), ino);
        assert_eq!(layer_dirs(&store).len(), 3);

        // Re-importing a stored image unpacks nothing.
        let again = import_ok(&store, &b.dir, &[]);
        assert_eq!(again["extracted"], 0);
        assert_eq!(again["id"], rb["id"]);
    }

    #[test]
    fn gzip_zstd_plain_and_docker_media_types_import() {
        let t = TempDir::new("media");
        let mut l = Layout::new(&t.join("l"));
        let mut docker = Layer::gzip(Tar::new().file("d/gz", b"docker gzip").finish());
        docker.media_type = DOCKER_GZIP;
        // Docker's gzip type on a plain tar (some tools do this): sniffed.
        let mut docker_plain = Layer::plain(Tar::new().file("d/plain", b"docker plain").finish());
        docker_plain.media_type = DOCKER_GZIP;
        l.image(&[base(), mid(), top(), docker, docker_plain], json!({}), None);
        let store = t.join("store");
        let r = import_ok(&store, &l.dir, &[]);
        assert_eq!(r["layers"].as_array().unwrap().len(), 5);
        assert_eq!(r["name"], "l:latest");
        let inspect = husk_in(&store, &["image", "inspect", "l"]);
        let v: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        for layer in v["layers"].as_array().unwrap() {
            assert_eq!(layer["present"], true);
        }
        let top_dir = v["layers"][2]["path"].as_str().unwrap();
        assert_eq!(std::fs::read(Path::new(top_dir).join("app/main")).unwrap(), b"task");
        // A media type that lies about the compression is refused.
        let mut liar = Layer::zstd(Tar::new().file("x", b"x").finish());
        liar.media_type = GZIP;
        let mut bad = Layout::new(&t.join("bad"));
        bad.image(&[liar], json!({}), None);
        let o = husk_in(&store, &["image", "import", bad.dir.to_str().unwrap()]);
        assert!(stderr(&o).contains("says Gzip but the blob's first bytes are Zstd data"), "{}", stderr(&o));
    }

    #[test]
    fn oci_archive_and_docker_save_tarballs_import() {
        let t = TempDir::new("archives");
        let store = t.join("store");
        let mut l = Layout::new(&t.join("layout"));
        l.image(&[base(), top()], json!({"Cmd": ["sh"]}), Some("1.0"));
        std::fs::write(t.join("img.tar"), tar_dir(&l.dir)).unwrap();
        let r = import_ok(&store, &t.join("img.tar"), &["--name", "fromarchive:1"]);
        assert_eq!(r["name"], "fromarchive:1");
        assert_eq!(r["extracted"], 2);

        // docker save: manifest.json, <config-digest>.json, <id>/layer.tar.
        let layers = [Layer::plain(Tar::new().file("etc/os-release", b"ID=docker\n").finish())];
        let config = serde_json::to_vec(&Layout::config(&layers, json!({"Env": ["A=1"]}), "amd64")).unwrap();
        let cfg_name = format!("{}.json", &sha256(&config)[7..]);
        let manifest = json!([{ "Config": cfg_name, "RepoTags": ["saved/app:2"], "Layers": ["abc/layer.tar"] }]);
        let tar = Tar::new()
            .file("manifest.json", &serde_json::to_vec(&manifest).unwrap())
            .file(&cfg_name, &config)
            .dir("abc/", 0o755)
            .file("abc/layer.tar", &layers[0].tar)
            .finish();
        std::fs::write(t.join("saved.tar"), tar).unwrap();
        let r = import_ok(&store, &t.join("saved.tar"), &[]);
        assert_eq!(r["name"], "saved/app:2");
        assert_eq!(r["manifest"], Value::Null);
        assert_eq!(r["id"].as_str().unwrap(), sha256(&config));
        let ls = husk_in(&store, &["image", "ls", "--json"]);
        let ls: Value = serde_json::from_slice(&ls.stdout).unwrap();
        let names: Vec<&str> = ls.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["fromarchive:1", "saved/app:2"]);
    }

    #[test]
    fn index_selects_by_tag_and_resolves_platforms() {
        let t = TempDir::new("select");
        let store = t.join("store");
        let mut l = Layout::new(&t.join("multi"));
        let d1 = l.image(&[base()], json!({}), Some("v1"));
        let d2 = l.image(&[base(), top()], json!({}), Some("v2"));
        let o = husk_in(&store, &["image", "import", l.dir.to_str().unwrap()]);
        assert!(stderr(&o).contains("pick one with PATH:TAG (tags: v1, v2)"), "{}", stderr(&o));
        let r = import_ok(&store, &t.join("multi:v2"), &[]);
        assert_eq!((r["name"].as_str(), r["id"].as_str()), (Some("multi:v2"), d2["digest"].as_str()));
        let r = import_ok(&store, &t.join("multi:v1"), &[]);
        assert_eq!(r["id"], d1["digest"]);

        // A manifest list: the amd64 entry is chosen.
        let mut m = Layout::new(&t.join("list"));
        let arm_layers = [Layer::gzip(Tar::new().file("arch", b"arm64").finish())];
        let arm_cfg = Layout::config(&arm_layers, json!({}), "arm64");
        let mut arm = m.manifest(&arm_layers, &arm_cfg);
        arm["platform"] = json!({"os": "linux", "architecture": "arm64", "variant": "v8"});
        let amd_layers = [Layer::gzip(Tar::new().file("arch", b"amd64").finish())];
        let amd_cfg = Layout::config(&amd_layers, json!({}), "amd64");
        let mut amd = m.manifest(&amd_layers, &amd_cfg);
        amd["platform"] = json!({"os": "linux", "architecture": "amd64"});
        let list = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [arm, amd.clone()]});
        let mut ld = m.put(&serde_json::to_vec(&list).unwrap(), "application/vnd.oci.image.index.v1+json");
        ld["annotations"] = json!({"org.opencontainers.image.ref.name": "latest"});
        m.manifests.push(ld);
        m.write_index();
        let r = import_ok(&store, &m.dir, &[]);
        assert_eq!(r["id"], amd["digest"]);
        assert_eq!(r["platform"], "linux/amd64");
    }

    #[test]
    fn ls_inspect_rm_prune_round_trip() {
        let t = TempDir::new("roundtrip");
        let store = t.join("store");
        let mut a = Layout::new(&t.join("a"));
        a.image(&[base(), mid()], json!({"Env": ["K=V"], "Cmd": ["run"], "WorkingDir": "/w"}), None);
        let mut b = Layout::new(&t.join("b"));
        b.image(&[base(), mid(), top()], json!({}), None);
        import_ok(&store, &a.dir, &["--name", "app"]);
        import_ok(&store, &b.dir, &["--name", "task:7"]);

        let ls = husk_in(&store, &["image", "ls"]);
        let text = stdout(&ls);
        assert!(text.starts_with("NAME") && text.contains("app:latest") && text.contains("task:7"), "{text}");
        let inspect: Value = serde_json::from_slice(&husk_in(&store, &["image", "inspect", "app"]).stdout).unwrap();
        assert_eq!(inspect["config"]["Env"], json!(["K=V"]));
        assert_eq!(inspect["config"]["WorkingDir"], "/w");
        assert_eq!(inspect["layers"].as_array().unwrap().len(), 2);
        assert!(inspect["unpacked_bytes"].as_u64().unwrap() > 4096);

        let missing = husk_in(&store, &["image", "inspect", "nope"]);
        assert!(!missing.status.success());
        assert!(stderr(&missing).contains("no image named \"nope:latest\""));

        let rm = husk_in(&store, &["image", "rm", "task:7", "--json"]);
        assert!(rm.status.success(), "{}", stderr(&rm));
        let prune: Value = serde_json::from_slice(&husk_in(&store, &["image", "prune", "--json"]).stdout).unwrap();
        assert_eq!(prune["layers_removed"], 1, "only the layer task:7 alone used: {prune}");
        assert_eq!(layer_dirs(&store).len(), 2);
        // app still runs its layers: nothing it uses was touched.
        let inspect: Value = serde_json::from_slice(&husk_in(&store, &["image", "inspect", "app"]).stdout).unwrap();
        assert!(inspect["layers"].as_array().unwrap().iter().all(|l| l["present"] == true));

        assert!(husk_in(&store, &["image", "rm", "app"]).status.success());
        let prune: Value = serde_json::from_slice(&husk_in(&store, &["image", "prune", "--json"]).stdout).unwrap();
        assert_eq!(prune["layers_removed"], 2);
        assert!(layer_dirs(&store).is_empty());
        assert!(tree(&store.join("blobs")).is_empty());
    }

    fn record_files(store: &Path) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(store.join("images")).unwrap().flatten().map(|e| e.path()).collect()
    }

    #[test]
    fn truncated_image_record_is_listed_as_damaged_with_its_repair() {
        let t = TempDir::new("torn-record");
        let store = t.join("store");
        let mut a = Layout::new(&t.join("a"));
        a.image(&[base(), mid()], json!({}), None);
        import_ok(&store, &a.dir, &["--name", "app"]);
        let rec = record_files(&store).pop().unwrap();
        let bytes = std::fs::read(&rec).unwrap();
        std::fs::write(&rec, &bytes[..bytes.len() / 2]).unwrap();

        let ls = husk_in(&store, &["image", "ls"]);
        assert!(ls.status.success(), "{}", stderr(&ls));
        let row = stdout(&ls).lines().find(|l| l.contains("app:latest")).map(str::to_string);
        assert!(row.as_deref().is_some_and(|r| r.contains("DAMAGED")), "not listed as damaged: {}", stdout(&ls));
        let repair = format!("husk image import {} --name app:latest", a.dir.display());
        assert!(stderr(&ls).contains(&repair), "no repair command in: {}", stderr(&ls));
        let json: Value = serde_json::from_slice(&husk_in(&store, &["image", "ls", "--json"]).stdout).unwrap();
        assert_eq!(json[0]["damaged"], true, "{json}");
        assert_eq!(json[0]["name"], "app:latest");

        // Using it names the damage and the repair; prune keeps its layers.
        let inspect = husk_in(&store, &["image", "inspect", "app"]);
        assert!(stderr(&inspect).contains("record is damaged") && stderr(&inspect).contains(&repair));
        let prune = husk_in(&store, &["image", "prune"]);
        assert!(!prune.status.success() && stderr(&prune).contains("nothing pruned"), "{}", stderr(&prune));
        assert_eq!(layer_dirs(&store).len(), 2);

        // The advised repair works, without unpacking again.
        let r = import_ok(&store, &a.dir, &["--name", "app:latest"]);
        assert_eq!(r["extracted"], 0);
        let ls = husk_in(&store, &["image", "ls"]);
        assert!(!stdout(&ls).contains("DAMAGED") && stdout(&ls).contains("app:latest"), "{}", stdout(&ls));
        assert!(stderr(&ls).is_empty(), "{}", stderr(&ls));

        // A record whose name did not survive is still listed, and rm of
        // a known name removes a damaged record.
        std::fs::write(&rec, b"{").unwrap();
        let ls = husk_in(&store, &["image", "ls"]);
        assert!(stdout(&ls).contains("DAMAGED") && stderr(&ls).contains(&rec.display().to_string()), "{}", stderr(&ls));
        let rm = husk_in(&store, &["image", "rm", "app"]);
        assert!(rm.status.success(), "{}", stderr(&rm));
        assert!(record_files(&store).is_empty());
    }

    fn tmp_entries(store: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(store.join("tmp"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Starts importing `src` and SIGKILLs the import once its layer build
    /// directory exists; returns that directory's name.
    fn kill_import_mid_build(store: &Path, src: &Path) -> String {
        let before = tmp_entries(store);
        let mut child = std::process::Command::new(husk_bin())
            .args(["image", "import", "--json", src.to_str().unwrap()])
            .env("HUSK_ROOT", store)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        loop {
            if let Some(new) = std::fs::read_dir(store.join("tmp")).ok().and_then(|rd| {
                rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).find(|n| !before.contains(n))
            }) {
                child.kill().unwrap();
                child.wait().unwrap();
                return new;
            }
            assert!(child.try_wait().unwrap().is_none(), "the import ended before it could be killed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn killed_import_leaves_no_partial_build_after_the_next_import_or_gc() {
        let t = TempDir::new("killed-import");
        let store = t.join("store");
        // Many small files: the build lasts long enough to be killed in.
        let mut tar = Tar::new();
        for i in 0..40_000 {
            tar.file(&format!("d{}/f{i}", i / 1000), b"x");
        }
        let mut big = Layout::new(&t.join("big"));
        big.image(&[Layer::gzip(tar.finish())], json!({}), None);
        let mut small = Layout::new(&t.join("small"));
        small.image(&[base()], json!({}), None);
        import_ok(&store, &small.dir, &[]);

        // A build in progress (its layer lock held) is never swept.
        let live_key = "ab".repeat(32);
        std::fs::create_dir_all(store.join("tmp").join(format!("{live_key}.1.live")).join("usr")).unwrap();
        let lock = std::fs::File::create(store.join("locks").join(format!("layer-{live_key}"))).unwrap();
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
        let live = format!("{live_key}.1.live");

        let stale = kill_import_mid_build(&store, &big.dir);
        assert_eq!(tmp_entries(&store), sorted(vec![live.clone(), stale]), "the kill left its build behind");
        let state = t.join("state");
        let gc = std::process::Command::new(husk_bin())
            .args(["--state-dir", state.to_str().unwrap(), "gc", "--json"])
            .env("HUSK_ROOT", &store)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&gc.stdout).unwrap_or_else(|_| panic!("{}", stderr(&gc)));
        assert_eq!(report["images"]["partial_builds_removed"], 1, "{report}");
        assert_eq!(tmp_entries(&store), std::slice::from_ref(&live));

        let stale = kill_import_mid_build(&store, &big.dir);
        assert!(tmp_entries(&store).contains(&stale));
        import_ok(&store, &small.dir, &[]);
        assert_eq!(tmp_entries(&store), [live], "the next import sweeps what the killed one left");
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn overwritten_blob_is_replaced_by_the_reimport_husk_advises() {
        let t = TempDir::new("bad-blob");
        let store = t.join("store");
        let mut a = Layout::new(&t.join("a"));
        a.image(&[base()], json!({"Env": ["K=V"]}), None);
        let r = import_ok(&store, &a.dir, &[]);
        let config = store.join("blobs").join(&r["config"].as_str().unwrap()[7..]);
        let good = std::fs::read(&config).unwrap();
        std::fs::write(&config, b"{\"garbage\": true}").unwrap();
        let inspect = husk_in(&store, &["image", "inspect", "a"]);
        assert!(stderr(&inspect).contains("re-import the image"), "{}", stderr(&inspect));

        let again = import_ok(&store, &a.dir, &[]);
        assert_eq!(again["blobs_replaced"], 1, "{again}");
        assert_eq!(std::fs::read(&config).unwrap(), good);
        let inspect = husk_in(&store, &["image", "inspect", "a"]);
        assert!(inspect.status.success(), "{}", stderr(&inspect));
        let v: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        assert_eq!(v["config"]["Env"], json!(["K=V"]));
    }

    #[test]
    fn parallel_imports_of_images_sharing_layers_keep_the_store_consistent() {
        let t = TempDir::new("parallel");
        let store = t.join("store");
        // Bigger layers so the builds overlap in time.
        let big = |seed: u8| {
            let data: Vec<u8> = (0..4_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed).collect();
            Layer::gzip(Tar::new().file(&format!("blob{seed}"), &data).finish())
        };
        let mut a = Layout::new(&t.join("a"));
        a.image(&[big(1), big(2)], json!({}), None);
        let mut b = Layout::new(&t.join("b"));
        b.image(&[big(1), big(2), big(3)], json!({}), None);
        let children: Vec<_> = (0..6)
            .map(|i| {
                let src = if i % 2 == 0 { &a.dir } else { &b.dir };
                std::process::Command::new(husk_bin())
                    .args(["image", "import", "--json", "--name", &format!("img{i}"), src.to_str().unwrap()])
                    .env("HUSK_ROOT", &store)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut extracted = 0;
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            let r: Value = serde_json::from_slice(&o.stdout).unwrap();
            extracted += r["extracted"].as_u64().unwrap();
        }
        assert_eq!(extracted, 3, "each distinct layer is unpacked exactly once");
        assert_eq!(layer_dirs(&store).len(), 3);
        assert!(tree(&store.join("tmp")).is_empty());
        let ls: Value = serde_json::from_slice(&husk_in(&store, &["image", "ls", "--json"]).stdout).unwrap();
        assert_eq!(ls.as_array().unwrap().len(), 6);
    }

    #[test]
    fn modes_and_mtimes_are_kept_even_for_read_only_directories() {
        use std::os::unix::fs::PermissionsExt;
        let t = TempDir::new("modes");
        let tar = Tar::new()
            .dir("d/", 0o750)
            .dir("ro/", 0o555)
            .file_mode("ro/inside", 0o640, 0, b"x")
            .dir("ro/sub/", 0o500)
            .file_mode("ro/sub/deep", 0o400, 0, b"y")
            .dir("tmp/", 0o1777)
            .dir("sgid/", 0o2755)
            .file_mode("bin/tool", 0o755, 0, b"#!")
            // Group/other write bits: kept only if the import's umask is 0
            // (it then skips the chmod for modes it created exactly).
            .dir("g/", 0o775)
            .file_mode("g/w", 0o666, 0, b"w")
            .finish();
        let mut l = Layout::new(&t.join("m"));
        l.image(&[Layer::gzip(tar)], json!({}), None);
        let store = t.join("store");
        import_ok(&store, &l.dir, &[]);
        let dir = store.join("layers").join(&layer_dirs(&store)[0]);
        let mode = |p: &str| std::fs::symlink_metadata(dir.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            [
                mode("d"),
                mode("ro"),
                mode("ro/inside"),
                mode("ro/sub"),
                mode("ro/sub/deep"),
                mode("tmp"),
                mode("bin/tool")
            ],
            [0o750, 0o555, 0o640, 0o500, 0o400, 0o1777, 0o755]
        );
        assert_eq!(mode("sgid") & 0o2000, 0o2000);
        assert_eq!((mode("g"), mode("g/w")), (0o775, 0o666), "group/other write bits lost");
        let mtime = std::fs::symlink_metadata(dir.join("ro/inside")).unwrap().mtime();
        assert_eq!(mtime, 1_700_000_000);
        assert_eq!(std::fs::symlink_metadata(dir.join("ro")).unwrap().mtime(), 1_700_000_000);
        // prune can remove read-only trees it does not own the modes of.
        assert!(husk_in(&store, &["image", "rm", "m"]).status.success());
        assert!(husk_in(&store, &["image", "prune"]).status.success());
        assert!(layer_dirs(&store).is_empty());
    }
}
