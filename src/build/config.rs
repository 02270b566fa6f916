//! The image being built: its layers, its run config (what `husk run`
//! reads back: Env, Cmd, Entrypoint, WorkingDir, User, plus Labels,
//! ExposedPorts, StopSignal, Volumes) and history; written at the end as an OCI
//! config and manifest, byte-stable for the same inputs.

use crate::image::digest::Digest;
use crate::image::store::LayerRef;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
pub struct State {
    pub layers: Vec<LayerRef>,
    pub env: Vec<(String, String)>,
    pub cmd: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub workdir: String,
    pub user: String,
    pub labels: BTreeMap<String, String>,
    pub exposed: BTreeSet<String>,
    /// `VOLUME` paths: the config's `Volumes`.
    pub volumes: BTreeSet<String>,
    pub stop_signal: Option<String>,
    pub shell: Vec<String>,
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub history: Vec<Value>,
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v?.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
}

impl State {
    pub fn scratch() -> State {
        let p = crate::image::oci::host_platform();
        State {
            shell: vec!["/bin/sh".into(), "-c".into()],
            os: p.os,
            architecture: p.architecture,
            variant: p.variant,
            ..State::default()
        }
    }

    /// The state of a stored image (its config JSON and layers).
    pub fn from_image(config: &[u8], layers: Vec<LayerRef>) -> Result<State, serde_json::Error> {
        let v: Value = serde_json::from_slice(config)?;
        let c = v.get("config").cloned().unwrap_or(Value::Null);
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let env = strings(c.get("Env"))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| e.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        let labels = c
            .get("Labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default();
        let exposed =
            c.get("ExposedPorts").and_then(Value::as_object).map(|m| m.keys().cloned().collect()).unwrap_or_default();
        let volumes =
            c.get("Volumes").and_then(Value::as_object).map(|m| m.keys().cloned().collect()).unwrap_or_default();
        let base = State::scratch();
        Ok(State {
            volumes,
            layers,
            env,
            cmd: strings(c.get("Cmd")),
            entrypoint: strings(c.get("Entrypoint")),
            workdir: s("WorkingDir"),
            user: s("User"),
            labels,
            exposed,
            stop_signal: c.get("StopSignal").and_then(Value::as_str).map(str::to_string),
            shell: strings(c.get("Shell")).filter(|s| !s.is_empty()).unwrap_or(base.shell),
            os: v.get("os").and_then(Value::as_str).map(str::to_string).unwrap_or(base.os),
            architecture: v
                .get("architecture")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or(base.architecture),
            variant: v.get("variant").and_then(Value::as_str).map(str::to_string),
            history: v.get("history").and_then(Value::as_array).cloned().unwrap_or_default(),
        })
    }

    pub fn set_env(&mut self, k: &str, v: &str) {
        match self.env.iter_mut().find(|(key, _)| key == k) {
            Some(e) => e.1 = v.to_string(),
            None => self.env.push((k.to_string(), v.to_string())),
        }
    }

    pub fn diff_ids(&self) -> Vec<Digest> {
        self.layers.iter().map(|l| l.diff_id.clone()).collect()
    }

    pub fn add_history(&mut self, created_by: &str, empty_layer: bool) {
        let mut h = Map::new();
        h.insert("created".into(), json!(created()));
        h.insert("created_by".into(), json!(created_by));
        if empty_layer {
            h.insert("empty_layer".into(), json!(true));
        }
        self.history.push(Value::Object(h));
    }

    /// The OCI image config (serde_json sorts object keys: stable bytes).
    pub fn config_json(&self) -> Vec<u8> {
        let mut c = Map::new();
        if !self.env.is_empty() {
            c.insert("Env".into(), json!(self.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>()));
        }
        if let Some(cmd) = &self.cmd {
            c.insert("Cmd".into(), json!(cmd));
        }
        if let Some(e) = &self.entrypoint {
            c.insert("Entrypoint".into(), json!(e));
        }
        if !self.workdir.is_empty() {
            c.insert("WorkingDir".into(), json!(self.workdir));
        }
        if !self.user.is_empty() {
            c.insert("User".into(), json!(self.user));
        }
        if !self.labels.is_empty() {
            c.insert("Labels".into(), json!(self.labels));
        }
        if !self.exposed.is_empty() {
            let ports: Map<String, Value> = self.exposed.iter().map(|p| (p.clone(), json!({}))).collect();
            c.insert("ExposedPorts".into(), Value::Object(ports));
        }
        if let Some(s) = &self.stop_signal {
            c.insert("StopSignal".into(), json!(s));
        }
        if !self.volumes.is_empty() {
            let vols: Map<String, Value> = self.volumes.iter().map(|p| (p.clone(), json!({}))).collect();
            c.insert("Volumes".into(), Value::Object(vols));
        }
        let mut v = json!({
            "architecture": self.architecture,
            "os": self.os,
            "created": created(),
            "config": Value::Object(c),
            "rootfs": {"type": "layers", "diff_ids": self.diff_ids()},
            "history": self.history,
        });
        if let Some(var) = &self.variant {
            v["variant"] = json!(var);
        }
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// The OCI manifest for `config` (its bytes) and the layers.
    pub fn manifest_json(&self, config: &[u8]) -> Vec<u8> {
        let layers: Vec<Value> = self
            .layers
            .iter()
            .map(|l| {
                json!({
                    "mediaType": if l.media_type.is_empty() { super::layer::MEDIA_TAR } else { &l.media_type },
                    "digest": l.blob.as_ref().unwrap_or(&l.diff_id),
                    "size": l.size,
                })
            })
            .collect();
        let v = json!({
            "schemaVersion": 2,
            "mediaType": crate::image::oci::MEDIA_OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": Digest::of(config),
                "size": config.len(),
            },
            "layers": layers,
        });
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

/// RFC 3339 time of SOURCE_DATE_EPOCH (else the Unix epoch): the same
/// inputs give the same config.
fn created() -> String {
    let secs = super::layer::epoch() as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let (y, m, d) = crate::units::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates_are_right() {
        assert_eq!(crate::units::civil_from_days(0), (1970, 1, 1));
        assert_eq!(crate::units::civil_from_days(19723), (2024, 1, 1));
        assert_eq!(crate::units::civil_from_days(11016), (2000, 2, 29));
    }
}
