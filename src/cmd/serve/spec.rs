//! A pool's spec: what `--pool NAME=SOURCE[,KEY=VALUE...]:SIZE`, a
//! `--pool-file` entry and a POST /v1/pools body say, validated once, and
//! the create request (`sandbox::CreateOptions`) every member is made with.

use crate::sandbox::CreateOptions;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most members one pool may keep (each is a supervisor and a sandbox).
pub const MAX_SIZE: u32 = 256;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("pool {given:?}: {why}; expected NAME=SOURCE[,KEY=VALUE...]:SIZE, e.g. py=python:3.12,memory=256M:4")]
    Syntax { given: String, why: String },
    #[error("pool {name:?}: {why}")]
    Invalid { name: String, why: String },
    #[error("--pool-file {path}: {why}")]
    File { path: String, why: String },
}

/// One pool. The JSON form is the API's and the pool file's.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<String>,
    pub size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<String>,
    /// `husk create --session` of the members: `python[:MODS]` or `bash`,
    /// the interpreter started (and its modules imported) before a claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Each member's `--max-lifetime` (husk create's default when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lifetime: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFile {
    pools: Vec<PoolSpec>,
}

/// `--pool NAME=SOURCE[,KEY=VALUE...]:SIZE`. SOURCE is an image reference
/// (which may hold ':' itself: SIZE is after the last one) or rootfs=DIR.
pub fn parse_arg(given: &str) -> Result<PoolSpec, SpecError> {
    let syntax = |why: &str| SpecError::Syntax { given: given.to_string(), why: why.to_string() };
    let (name, rest) = given.split_once('=').ok_or_else(|| syntax("no '=' after the pool's name"))?;
    let (body, size) = rest.rsplit_once(':').ok_or_else(|| syntax("no ':SIZE' at the end"))?;
    let size: u32 = size.parse().map_err(|_| syntax(&format!("SIZE {size:?} is not a whole number")))?;
    let mut items = body.split(',');
    let source = items.next().unwrap_or("");
    let mut spec = PoolSpec {
        name: name.to_string(),
        image: None,
        rootfs: None,
        size,
        memory: None,
        cpus: None,
        pids: None,
        network: None,
        runtime: None,
        warm: None,
        session: None,
        max_lifetime: None,
    };
    match source.split_once('=') {
        Some(("rootfs", dir)) => spec.rootfs = Some(dir.to_string()),
        Some(("image", r)) => spec.image = Some(r.to_string()),
        Some((k, _)) => return Err(syntax(&format!("the first item must be the image or rootfs=DIR, not {k}="))),
        None => spec.image = Some(source.to_string()),
    }
    let mut last_key = "";
    for item in items {
        // warm=python:numpy,pandas: a module list goes on after its comma
        // (session=python:numpy,pandas too).
        if matches!(last_key, "warm" | "session") && !item.contains('=') {
            let list = if last_key == "warm" { &mut spec.warm } else { &mut spec.session };
            if let Some(w) = list {
                w.push(',');
                w.push_str(item);
            }
            continue;
        }
        let (k, v) = item.split_once('=').ok_or_else(|| syntax(&format!("{item:?} is not KEY=VALUE")))?;
        last_key = k;
        let v = v.to_string();
        let slot = match k {
            "memory" => &mut spec.memory,
            "cpus" => &mut spec.cpus,
            "pids" => &mut spec.pids,
            "max_lifetime" => &mut spec.max_lifetime,
            "network" => {
                spec.network = Some(v);
                continue;
            }
            "runtime" => {
                spec.runtime = Some(v);
                continue;
            }
            "warm" => {
                spec.warm = Some(v);
                continue;
            }
            "session" => {
                spec.session = Some(v);
                continue;
            }
            _ => {
                return Err(syntax(&format!(
                    "unknown key {k:?} (memory, cpus, pids, network, runtime, warm, session, max_lifetime)"
                )));
            }
        };
        *slot = Some(Value::String(v));
    }
    Ok(spec)
}

/// `--pool-file FILE`.
pub fn parse_file(path: &std::path::Path) -> Result<Vec<PoolSpec>, SpecError> {
    let err = |why: String| SpecError::File { path: path.display().to_string(), why };
    let bytes = crate::userfile::read("--pool-file", path, 1 << 20).map_err(|e| err(e.to_string()))?;
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    let f: PoolFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        err(format!("{at}: {}; see docs/warm.md for the format", e.into_inner()))
    })?;
    Ok(f.pools)
}

impl PoolSpec {
    fn invalid(&self, why: impl Into<String>) -> SpecError {
        SpecError::Invalid { name: self.name.clone(), why: why.into() }
    }

    /// The create request of a member: the CLI's defaults on this host
    /// (`cli::spec::sandbox_defaults`) and what the pool's spec gives.
    pub fn to_options(&self) -> Result<CreateOptions, SpecError> {
        let text = |key: &str, v: &str| -> Result<String, SpecError> {
            if v.is_empty() || v.contains('\0') {
                return Err(self.invalid(format!("{key}: empty or holds a NUL byte")));
            }
            Ok(v.to_string())
        };
        let scalar = |key: &str, v: &Value| -> Result<String, SpecError> {
            match v {
                Value::String(s) => text(key, s),
                Value::Number(n) => Ok(n.to_string()),
                v => Err(self.invalid(format!("{key}: expected a string or a number, got {v}"))),
            }
        };
        let mut o = CreateOptions {
            sandbox: crate::cli::spec::sandbox_defaults().map_err(|e| {
                let text = e.to_string();
                self.invalid(text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string())
            })?,
            ..CreateOptions::default()
        };
        match (&self.image, &self.rootfs) {
            (Some(i), None) => o.sandbox.image = Some(text("image", i)?),
            (None, Some(r)) => o.sandbox.rootfs = Some(text("rootfs", r)?.into()),
            _ => return Err(self.invalid("give exactly one of image and rootfs")),
        }
        for (slot, key, v) in [
            (&mut o.sandbox.memory, "memory", &self.memory),
            (&mut o.sandbox.cpus, "cpus", &self.cpus),
            (&mut o.sandbox.pids, "pids", &self.pids),
        ] {
            if let Some(v) = v {
                *slot = Some(scalar(key, v)?);
            }
        }
        if let Some(v) = &self.max_lifetime {
            let t = scalar("max_lifetime", v)?;
            let d = crate::units::parse_duration(&t).map_err(|e| self.invalid(format!("max_lifetime {t:?}: {e}")))?;
            o.max_lifetime = Some(d);
        }
        if let Some(n) = &self.network {
            o.sandbox.network = vec![text("network", n)?];
        }
        if let Some(r) = &self.runtime {
            o.sandbox.runtime = match text("runtime", r)?.as_str() {
                "native" => crate::spec::RuntimeChoice::Native,
                "runsc" => crate::spec::RuntimeChoice::Runsc,
                "auto" => crate::spec::RuntimeChoice::Auto,
                other => return Err(self.invalid(format!("runtime {other:?}: one of native, runsc, auto"))),
            };
        }
        o.warm = self.warm.as_deref().map(|w| text("warm", w)).transpose()?;
        o.session = self.session.as_deref().map(|w| text("session", w)).transpose()?;
        Ok(o)
    }

    /// Checks the whole spec the way `husk create` will read it (the
    /// request's own lowering): a bad pool is refused when it is made, not
    /// at the first refill. The members' create request.
    pub fn validate(&self) -> Result<CreateOptions, SpecError> {
        crate::sandbox::state::check_name(&self.name).map_err(|_| {
            self.invalid("the name must be 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit")
        })?;
        if self.size > MAX_SIZE {
            return Err(self.invalid(format!("size {} is more than {MAX_SIZE}", self.size)));
        }
        self.check_limits()?;
        if let Some(w) = &self.warm {
            crate::spec::WarmSpec::parse_warm(w).map_err(|e| self.invalid(format!("warm: {e}")))?;
        }
        if let Some(w) = &self.session {
            crate::spec::WarmSpec::parse_session(w).map_err(|e| self.invalid(format!("session: {e}")))?;
        }
        if self.warm.is_some() && self.session.is_some() {
            return Err(
                self.invalid("give one of warm= (calls start fresh) and session= (calls share state), not both")
            );
        }
        let o = self.to_options()?;
        crate::request::lower::create_spec(&o).map_err(|e| self.invalid(e.to_string()))?;
        Ok(o)
    }

    /// The limits' values, read the way husk create reads them: a bad one
    /// is refused when the pool is made, not at every refill.
    fn check_limits(&self) -> Result<(), SpecError> {
        let text = |v: &Value| match v {
            Value::String(s) => Some(s.trim().to_string()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        let unlimited = |s: &str| matches!(s, "unlimited" | "max" | "-1");
        if let Some(v) = &self.memory {
            let s = text(v).unwrap_or_default();
            if !unlimited(&s) && !crate::units::parse_size(&s).is_ok_and(|n| n > 0) {
                return Err(self.invalid(format!("memory {v}: give a size like 256M or 2G, or unlimited")));
            }
        }
        if let Some(v) = &self.cpus {
            let s = text(v).unwrap_or_default();
            if !s.parse::<f64>().is_ok_and(|c| c > 0.0 && c.is_finite()) {
                return Err(self.invalid(format!("cpus {v}: give a number of cpus above 0, like 0.5 or 2")));
            }
        }
        if let Some(v) = &self.pids {
            let s = text(v).unwrap_or_default();
            if !unlimited(&s) && !s.parse::<u64>().is_ok_and(|n| n > 0) {
                return Err(self.invalid(format!("pids {v}: give a task count above 0, or unlimited")));
            }
        }
        Ok(())
    }

    /// What a member reserves of the pools' memory budget: its memory
    /// limit (husk's default limit when the spec sets none; the host's RAM
    /// for "unlimited").
    pub fn cost(&self, mem_total: u64) -> u64 {
        let given = match &self.memory {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        match given.as_deref().map(str::trim) {
            None => crate::cgroup::limits::default_memory(mem_total),
            Some("unlimited" | "max" | "-1") => mem_total,
            Some(s) => crate::units::parse_size(s).unwrap_or(mem_total),
        }
    }

    /// A digest of what makes members alike (everything but the size): a
    /// restarted serve adopts members of the same digest only.
    pub fn digest(&self) -> String {
        use sha2::Digest;
        let mut same = self.clone();
        same.size = 0;
        let bytes = serde_json::to_vec(&same).unwrap_or_default();
        let d = sha2::Sha256::digest(&bytes);
        d.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_args_parse_image_refs_with_colons_and_keys() {
        let s = parse_arg("py=registry:5000/python:3.12,memory=256M,cpus=1:4").unwrap();
        assert_eq!(s.name, "py");
        assert_eq!(s.image.as_deref(), Some("registry:5000/python:3.12"));
        assert_eq!(s.size, 4);
        let o = s.to_options().unwrap();
        assert_eq!(o.sandbox.image.as_deref(), Some("registry:5000/python:3.12"));
        assert_eq!((o.sandbox.memory.as_deref(), o.sandbox.cpus.as_deref()), (Some("256M"), Some("1")));
        let w = parse_arg("np=python:3.12,warm=python:numpy,pandas,memory=1G:2").unwrap();
        assert_eq!(w.warm.as_deref(), Some("python:numpy,pandas"));
        assert_eq!(w.to_options().unwrap().warm.as_deref(), Some("python:numpy,pandas"));
        let s = parse_arg("ses=python:3.12,session=python:json,csv,pids=64:4").unwrap();
        assert_eq!(s.session.as_deref(), Some("python:json,csv"));
        assert_eq!(s.to_options().unwrap().session.as_deref(), Some("python:json,csv"));
        let r = parse_arg("bb=rootfs=/srv/bb,pids=64:2").unwrap();
        assert_eq!(r.rootfs.as_deref(), Some("/srv/bb"));
        let o = r.to_options().unwrap();
        assert_eq!(o.sandbox.rootfs.as_deref(), Some(std::path::Path::new("/srv/bb")));
        assert_eq!(o.sandbox.pids.as_deref(), Some("64"));
    }

    #[test]
    fn bad_pool_args_say_what_is_wrong() {
        for (bad, says) in [
            ("py", "no '='"),
            ("py=python", "SIZE"),
            ("py=python:x", "whole number"),
            ("py=python,color=red:1", "unknown key"),
            ("py=python,memory:1", "KEY=VALUE"),
            ("py=cpus=1:1", "first item"),
        ] {
            let e = parse_arg(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let big = parse_arg("py=python:100000").unwrap();
        assert!(big.validate().unwrap_err().to_string().contains("more than"));
        let name = parse_arg("-x=python:1").unwrap();
        assert!(name.validate().is_err());
        for (bad, says) in [
            ("s=rootfs=/,session=ruby:1", "session"),
            ("s=rootfs=/,session=bash:json:1", "no modules"),
            ("s=rootfs=/,warm=python,session=python:1", "not both"),
        ] {
            let e = parse_arg(bad).unwrap().validate().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn digest_ignores_size_only() {
        let a = parse_arg("py=python,memory=1G:1").unwrap();
        let b = parse_arg("py=python,memory=1G:9").unwrap();
        let c = parse_arg("py=python,memory=2G:1").unwrap();
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
    }

    #[test]
    fn member_cost_is_its_memory_limit() {
        let s = parse_arg("py=python,memory=256M:1").unwrap();
        assert_eq!(s.cost(8 << 30), 256 << 20);
        let d = parse_arg("py=python:1").unwrap();
        assert_eq!(d.cost(8 << 30), crate::cgroup::limits::default_memory(8 << 30));
    }
}
