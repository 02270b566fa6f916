//! Hostile image input: each case gets a clear error (or a documented
//! neutralization) and nothing is created outside the store, nor left in
//! it. Layouts are built in code (tests/imagekit).
mod imagekit;
use imagekit::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Everything here runs as root and, in scripts/test.sh, as `tester`.
mod rootless {
    use super::*;

    /// A scratch dir with a store, a layout and an `outside` dir that must
    /// stay empty.
    struct Case {
        t: TempDir,
        layout: Layout,
    }

    impl Case {
        fn new(tag: &str) -> Case {
            let t = TempDir::new(tag);
            std::fs::create_dir_all(t.join("outside")).unwrap();
            let layout = Layout::new(&t.join("layout"));
            Case { t, layout }
        }
        fn store(&self) -> PathBuf {
            self.t.join("store")
        }
        fn outside(&self) -> PathBuf {
            self.t.join("outside")
        }
        fn import(&self, extra: &[&str]) -> std::process::Output {
            let mut args = vec!["image", "import", self.layout.dir.to_str().unwrap()];
            args.extend_from_slice(extra);
            husk_in(&self.store(), &args)
        }
        /// Import must fail naming `needles`; store and outside stay clean.
        fn refused(&self, needles: &[&str]) -> String {
            let o = self.import(&[]);
            let err = stderr(&o);
            assert!(!o.status.success(), "import succeeded but should be refused; stdout: {}", stdout(&o));
            for n in needles {
                assert!(err.contains(n), "error should mention {n:?}: {err}");
            }
            assert_store_clean(&self.store());
            assert_eq!(tree(&self.outside()), Vec::<String>::new(), "something was created outside the store");
            err
        }
    }

    fn single_layer(tag: &str, tar: Vec<u8>) -> Case {
        let mut c = Case::new(tag);
        c.layout.image(&[Layer::gzip(tar)], json!({}), None);
        c
    }

    fn evil_path(tag: &str) -> PathBuf {
        PathBuf::from(format!("/tmp/husk-evil-{tag}-{}", std::process::id()))
    }

    #[test]
    fn path_traversal_entry_is_refused() {
        let target = evil_path("traversal");
        let name = format!("../../../../../../../../../..{}", target.display());
        let c = single_layer("traversal", Tar::new().file("ok", b"x").file(&name, b"pwned").finish());
        c.refused(&["'..' component refused"]);
        assert!(!target.exists());
    }

    #[test]
    fn absolute_entry_is_refused() {
        let c0 = Case::new("absolute-probe");
        let target = c0.outside().join("x");
        let c = single_layer("absolute", Tar::new().file(target.to_str().unwrap(), b"pwned").finish());
        c.refused(&["absolute path refused"]);
        assert!(!target.exists());
    }

    #[test]
    fn write_through_symlink_parent_is_refused() {
        let mut c = Case::new("symparent");
        let outside = c.outside();
        let tar = Tar::new().symlink("d", outside.to_str().unwrap()).file("d/pwned", b"x").finish();
        c.layout.image(&[Layer::gzip(tar)], json!({}), None);
        c.refused(&["parent \"d\" is a symlink"]);
        // Relative form, climbing out of the build directory.
        let mut c = Case::new("symparent-rel");
        let tar = Tar::new().symlink("up", "../../../../../../../..").file("up/tmp/husk-pwned", b"x").finish();
        c.layout.image(&[Layer::gzip(tar)], json!({}), None);
        c.refused(&["is a symlink"]);
        assert!(!Path::new("/tmp/husk-pwned").exists());
    }

    #[test]
    fn root_replacing_symlink_entry_is_refused() {
        for name in [".", "./", ""] {
            let c = single_layer("rootlink", Tar::new().symlink(name, "/").file("etc/x", b"x").finish());
            c.refused(&["may not replace the layer root"]);
        }
    }

    #[test]
    fn hardlink_to_host_shadow_is_refused() {
        let c = single_layer("hl-abs", Tar::new().hardlink("shadow", "/etc/shadow").finish());
        c.refused(&["hardlink target \"/etc/shadow\"", "absolute path refused"]);
        let c = single_layer("hl-rel", Tar::new().hardlink("shadow", "../../../../../../etc/shadow").finish());
        c.refused(&["'..' component refused"]);
        // A relative name is looked up in the layer only, never the host.
        let c = single_layer("hl-missing", Tar::new().hardlink("shadow", "etc/shadow").finish());
        c.refused(&["is not a file of this layer"]);
    }

    #[test]
    fn whiteout_of_dotdot_is_refused() {
        let c = single_layer("wh-dotdot", Tar::new().dir("a/", 0o755).file("a/.wh...", b"").finish());
        c.refused(&["whiteout of \"..\" refused"]);
    }

    #[test]
    fn blob_digest_mismatch_is_refused_naming_the_blob() {
        let mut c = Case::new("digest");
        let tar = Tar::new().file("a", b"hello").finish();
        let m = c.layout.image(&[Layer::plain(tar)], json!({}), None);
        let manifest = c.layout.read_json(m["digest"].as_str().unwrap());
        let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_string();
        let mut bytes = std::fs::read(c.layout.blob_path(&layer)).unwrap();
        let i = bytes.iter().position(|&b| b == b'h').unwrap();
        bytes[i] = b'j';
        std::fs::write(c.layout.blob_path(&layer), bytes).unwrap();
        c.refused(&[&format!("blob {layer} has digest sha256:")]);
    }

    #[test]
    fn wrong_size_is_refused() {
        for delta in [1i64, -1] {
            let mut c = Case::new("size");
            let tar = Tar::new().file("a", b"hello").finish();
            let layer = Layer::gzip(tar);
            let config = Layout::config(std::slice::from_ref(&layer), json!({}), "amd64");
            let cfg = c.layout.put(&serde_json::to_vec(&config).unwrap(), "application/vnd.oci.image.config.v1+json");
            let mut ld = c.layout.put(&layer.blob, GZIP);
            let digest = ld["digest"].as_str().unwrap().to_string();
            ld["size"] = json!(layer.blob.len() as i64 + delta);
            let m = json!({"schemaVersion": 2, "config": cfg, "layers": [ld]});
            c.layout
                .manifests
                .push(c.layout.put(&serde_json::to_vec(&m).unwrap(), "application/vnd.oci.image.manifest.v1+json"));
            c.layout.write_index();
            let err = c.refused(&[&format!("blob {digest}")]);
            assert!(err.contains("its descriptor says") || err.contains("is longer than"), "{err}");
        }
    }

    #[test]
    fn truncated_gzip_is_refused() {
        let mut c = Case::new("truncated");
        let tar = Tar::new().file("a", &vec![7u8; 100_000]).finish();
        let mut layer = Layer::gzip(tar);
        layer.blob.truncate(layer.blob.len() / 2);
        c.layout.image(&[layer], json!({}), None);
        c.refused(&["Gzip data is corrupt or truncated"]);
    }

    #[test]
    fn missing_blob_is_refused() {
        let mut c = Case::new("missing");
        let m = c.layout.image(&[Layer::gzip(Tar::new().file("a", b"x").finish())], json!({}), None);
        let manifest = c.layout.read_json(m["digest"].as_str().unwrap());
        let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_string();
        std::fs::remove_file(c.layout.blob_path(&layer)).unwrap();
        c.refused(&["cannot open", layer.trim_start_matches("sha256:")]);
    }

    #[test]
    fn manifest_only_for_another_platform_is_refused() {
        let mut c = Case::new("platform");
        let layers = [Layer::gzip(Tar::new().file("a", b"x").finish())];
        let config = Layout::config(&layers, json!({}), "arm64");
        let mut d = c.layout.manifest(&layers, &config);
        d["platform"] = json!({"os": "linux", "architecture": "arm64", "variant": "v8"});
        c.layout.manifests.push(d);
        c.layout.write_index();
        c.refused(&["only for linux/arm64/v8", "this host runs linux/amd64"]);
        // No platform in the index: the config's architecture is checked.
        let mut c = Case::new("platform-config");
        let d = c.layout.manifest(&layers, &config);
        c.layout.manifests.push(d);
        c.layout.write_index();
        c.refused(&["the image is for linux/arm64"]);
    }

    #[test]
    fn gzip_bomb_stops_at_the_bound() {
        // 100 gzip members of 100 MiB of zeros each: ~10 MB that inflate to
        // ~10 GB. The first member starts with a valid tar (one small file),
        // the rest is "padding" after the end-of-archive marker, which still
        // counts: the diff_id covers the whole stream.
        let mut head = Tar::new().file("a", b"x").finish();
        let chunk = 100 << 20;
        head.resize(chunk, 0);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut e, &head).unwrap();
        let first = e.finish().unwrap();
        let zeros = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            std::io::Write::write_all(&mut e, &vec![0u8; chunk]).unwrap();
            e.finish().unwrap()
        };
        let mut blob = first;
        for _ in 1..100 {
            blob.extend_from_slice(&zeros);
        }
        assert!(blob.len() < 12 << 20, "bomb is {} bytes", blob.len());
        // diff_id of the claimed content does not matter: the bound trips first.
        let layer = Layer { blob, tar: Tar::new().file("a", b"x").finish(), media_type: GZIP };
        let mut c = Case::new("bomb");
        c.layout.image(&[layer], json!({}), None);
        let o = c.import(&["--max-layer-size", "256M"]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("exceeds the bound of 268435456 bytes"), "{}", stderr(&o));
        assert_store_clean(&c.store());
        // With default limits the ratio bound (250x above 1 GiB) stops it.
        let o = c.import(&[]);
        assert!(stderr(&o).contains("exceeds the bound of"), "{}", stderr(&o));
        assert_store_clean(&c.store());
    }

    #[test]
    fn huge_declared_file_is_refused_before_reading_it() {
        let mut t = Tar::new();
        t.entry(Entry { size: 10 << 30, ..Entry::new(b"big", b'0') });
        let c = single_layer("declared", t.finish());
        let o = c.import(&["--max-layer-size", "1G"]);
        assert!(stderr(&o).contains("a file's declared size exceeds the bound"), "{}", stderr(&o));
        assert_store_clean(&c.store());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut t = Tar::new();
        let mut name = String::new();
        for _ in 0..5000 {
            name.push_str("a/");
            t.dir(&name, 0o755);
        }
        let c = single_layer("deep", t.finish());
        c.refused(&["257 directories deep (bound 256)"]);
    }

    #[test]
    fn ten_thousand_character_name_is_refused() {
        let c = single_layer("longname", Tar::new().file(&"x".repeat(10_000), b"x").finish());
        c.refused(&["path is 10000 bytes long (bound 4096)"]);
        let c = single_layer("longcomp", Tar::new().file(&"y".repeat(300), b"x").finish());
        c.refused(&["a component is 300 bytes long"]);
    }

    #[test]
    fn malformed_json_is_refused_naming_the_document() {
        let c = Case::new("badindex");
        std::fs::write(c.layout.dir.join("index.json"), b"{\"schemaVersion\": 2, \"manifests\": [").unwrap();
        c.refused(&["index.json is not valid JSON"]);

        let mut c = Case::new("badmanifest");
        let d = c.layout.put(b"{\"schemaVersion\": 2, \"config\": 7}", "application/vnd.oci.image.manifest.v1+json");
        c.layout.manifests.push(d.clone());
        c.layout.write_index();
        c.refused(&[&format!("manifest {} is not valid JSON", d["digest"].as_str().unwrap())]);

        let mut c = Case::new("badconfig");
        let layers = [Layer::gzip(Tar::new().file("a", b"x").finish())];
        let m = c.layout.manifest(&layers, &json!({"rootfs": "nope"}));
        c.layout.manifests.push(m);
        c.layout.write_index();
        c.refused(&["config sha256:", "is not valid JSON"]);
    }

    #[test]
    fn diff_id_mismatch_is_refused() {
        let mut c = Case::new("diffid");
        let mut layer = Layer::gzip(Tar::new().file("a", b"x").finish());
        layer.tar = Tar::new().file("a", b"different").finish();
        c.layout.image(&[layer], json!({}), None);
        c.refused(&["its uncompressed content has digest", "diff_id"]);
    }

    #[test]
    fn metadata_is_never_applied_through_a_symlink() {
        // CVE-2021-32760 shape: a symlink to a host file, then an entry of the
        // same name with new permissions. The entry replaces the symlink.
        let c0 = Case::new("meta");
        let victim = c0.outside().join("victim");
        std::fs::write(&victim, b"host data").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let vdir = c0.outside().join("vdir");
        std::fs::create_dir(&vdir).unwrap();
        std::fs::set_permissions(&vdir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let tar = Tar::new()
            .symlink("f", victim.to_str().unwrap())
            .file_mode("f", 0o4777, 0, b"layer data")
            .symlink("d", vdir.to_str().unwrap())
            .dir("d/", 0o777)
            .finish();
        let mut c = c0;
        c.layout.image(&[Layer::gzip(tar)], json!({}), None);
        let o = c.import(&["--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(std::fs::read(&victim).unwrap(), b"host data");
        assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::metadata(&vdir).unwrap().permissions().mode() & 0o7777, 0o700);
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["layers"][0]["unpack"]["files"], 1);
    }

    #[test]
    fn devices_and_fifos_are_skipped_and_reported() {
        let mut t = Tar::new();
        t.entry(Entry { devmajor: 8, devminor: 0, ..Entry::new(b"dev/sda", b'4') });
        t.entry(Entry { devmajor: 1, devminor: 3, ..Entry::new(b"dev/null", b'3') });
        t.entry(Entry::new(b"run/fifo", b'6'));
        t.file("ok", b"x");
        let c = single_layer("devices", t.finish());
        let o = c.import(&["--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let u = &r["layers"][0]["unpack"];
        assert_eq!(u["skipped_count"], 3);
        assert_eq!(u["skipped"], json!(["dev/sda", "dev/null", "run/fifo"]));
    }

    #[test]
    fn file_capabilities_and_overlay_xattrs_are_dropped_setuid_kept() {
        let mut t = Tar::new();
        t.pax(&[("SCHILY.xattr.security.capability", b"\x01\x00\x00\x02\x00\x20\x00\x00")]);
        t.file_mode("usr/bin/ping", 0o4755, 0, b"#!/bin/sh\n");
        t.pax(&[("SCHILY.xattr.user.overlay.opaque", b"y"), ("SCHILY.xattr.trusted.overlay.redirect", b"/etc")]);
        t.dir("forged/", 0o755);
        let c = single_layer("xattrs", t.finish());
        let o = c.import(&["--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let u = &r["layers"][0]["unpack"];
        assert_eq!(u["capabilities_dropped"], 1);
        assert_eq!(u["xattrs_dropped"], 2);
        let diff = r["layers"][0]["diff_id"].as_str().unwrap().trim_start_matches("sha256:").to_string();
        let layer = std::fs::read_dir(c.store().join("layers"))
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&diff) && e.path().is_dir())
            .unwrap()
            .path();
        let mode = std::fs::metadata(layer.join("usr/bin/ping")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o4755, "setuid is kept (the sandbox mounts nosuid)");
    }
}
