//! Request bodies of the API and the typed requests they become
//! (`sandbox::CreateOptions`, `sandbox::ExecOptions`). Unknown keys are
//! refused (a typo must not silently mean "default"); a body names only
//! what the API offers (no host binds, no capabilities): everything else
//! is the CLI's default on this host (`cli::spec::sandbox_defaults`, which
//! applies husk's environment as `husk create` would).

use super::ApiError;
use crate::sandbox::{CreateOptions, ExecOptions, ProcessOptions};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Parses a JSON body; a malformed one says where (line, column, key).
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        let msg = if at == "." || at.is_empty() { inner.to_string() } else { format!("{at}: {inner}") };
        ApiError::new(400, "request", format!("request body: {msg}"))
            .hint("the body must be a JSON object; see docs/api.md")
    })
}

/// A size, duration or count, given as a string ("512M", "30s") or a number.
pub fn scalar(key: &str, v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => clean(key, s),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(ApiError::new(400, "request", format!("{key}: expected a string or a number, got {v}"))),
    }
}

/// Text that becomes (part of) one argument: no NUL (it would cut the
/// argument short where the kernel reads it).
fn clean(key: &str, s: &str) -> Result<String, ApiError> {
    if s.contains('\0') {
        return Err(ApiError::new(400, "request", format!("{key}: contains a NUL byte")));
    }
    Ok(s.to_string())
}

/// `KEY=VALUE` pairs: KEY non-empty, without `=` (a bare KEY would copy the
/// value from husk serve's own environment).
fn pairs(key: &str, map: &BTreeMap<String, String>) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    for (k, v) in map {
        if k.is_empty() || k.contains('=') {
            return Err(ApiError::new(400, "request", format!("{key}: {k:?} is not a valid name (non-empty, no '=')")));
        }
        out.push(format!("{}={}", clean(key, k)?, clean(key, v)?));
    }
    Ok(out)
}

/// A value the CLI would have refused as a flag's value: 400, step
/// `arguments`, in clap's words.
fn invalid(flag: &str, shape: &str, given: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::new(400, "arguments", format!("invalid value '{given}' for '--{flag} <{shape}>': {why}"))
}

/// A duration of a body (`"30s"` or seconds), as the CLI's flag reads it.
pub fn duration(flag: &str, key: &str, v: &Value) -> Result<std::time::Duration, ApiError> {
    let t = scalar(key, v)?;
    crate::units::parse_duration(&t).map_err(|e| invalid(flag, "DURATION", &t, e))
}

/// A size of a body (`"10M"` or bytes).
fn size(flag: &str, key: &str, v: &Value) -> Result<u64, ApiError> {
    let t = scalar(key, v)?;
    crate::units::parse_size(&t).map_err(|e| invalid(flag, "SIZE", &t, e))
}

/// `secret_env` as the request's secrets: in memory only, never in argv or
/// husk's own environment (where a name like `HUSK_NO_CGROUP` or
/// `LD_PRELOAD` would change husk itself).
fn secrets(map: &BTreeMap<String, String>) -> Result<Vec<crate::redact::Secret>, ApiError> {
    let mut out = Vec::new();
    for (k, v) in map {
        if !crate::cli::secret::valid_name(k) {
            return Err(ApiError::new(
                400,
                "request",
                format!("secret_env: {k:?} is not an environment variable name"),
            ));
        }
        out.push(crate::redact::Secret { name: k.clone(), value: clean("secret_env", v)?.into_bytes() });
    }
    crate::request::secrets::check(out).map_err(|e| ApiError::new(400, "arguments", e.to_string()))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    image: Option<String>,
    rootfs: Option<String>,
    runtime: Option<String>,
    memory: Option<Value>,
    cpus: Option<Value>,
    pids: Option<Value>,
    ttl: Option<Value>,
    max_lifetime: Option<Value>,
    network: Option<String>,
    /// `--allow-host RULE` each (the egress allowlist, docs/network.md).
    #[serde(default)]
    allow_hosts: Vec<String>,
    /// `{NAME: IP}`: `--add-host NAME:IP` each.
    #[serde(default)]
    add_hosts: BTreeMap<String, String>,
    egress_bytes: Option<Value>,
    /// `--publish [HOSTIP:]HOSTPORT:PORT` each.
    #[serde(default)]
    publish: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    secret_env: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    workdir: Option<String>,
    user: Option<String>,
    name: Option<String>,
    #[serde(default)]
    concurrent: bool,
    ready_cmd: Option<Vec<String>>,
    ready_timeout: Option<Value>,
    /// `husk create --warm`: "python[:MOD,...]".
    warm: Option<String>,
    /// `husk create --session`: "python" or "bash".
    session: Option<String>,
    /// Claim a member of this pool (`husk serve --pool`).
    pool: Option<String>,
}

/// What a claim from a pool may ask: the sandbox's spec is the pool's.
pub struct ClaimArgs {
    pub pool: String,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ttl: std::time::Duration,
}

/// `husk create`'s default lease, for a claim that gives none.
const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(600);

impl CreateBody {
    /// A claim, when the body names a pool: only name, labels and ttl may
    /// come with it (anything else would silently not apply).
    pub fn claim(&self) -> Result<Option<ClaimArgs>, ApiError> {
        let Some(pool) = &self.pool else { return Ok(None) };
        let given: Vec<&str> = [
            ("image", self.image.is_some()),
            ("rootfs", self.rootfs.is_some()),
            ("runtime", self.runtime.is_some()),
            ("memory", self.memory.is_some()),
            ("cpus", self.cpus.is_some()),
            ("pids", self.pids.is_some()),
            ("max_lifetime", self.max_lifetime.is_some()),
            ("network", self.network.is_some()),
            ("env", !self.env.is_empty()),
            ("secret_env", !self.secret_env.is_empty()),
            ("workdir", self.workdir.is_some()),
            ("user", self.user.is_some()),
            ("concurrent", self.concurrent),
            ("ready_cmd", self.ready_cmd.is_some()),
            ("ready_timeout", self.ready_timeout.is_some()),
            ("warm", self.warm.is_some()),
            ("session", self.session.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        if !given.is_empty() {
            return Err(ApiError::new(
                400,
                "request",
                format!(
                    "pool {pool:?}: {} cannot go with a pool (its members are made with the pool's spec)",
                    given.join(", ")
                ),
            )
            .hint("give only pool, name, labels and ttl; or create without pool"));
        }
        let bad = |m: String| ApiError::new(400, "request", m);
        if let Some(n) = &self.name {
            crate::sandbox::state::check_name(n).map_err(|e| bad(e.to_string()))?;
        }
        for k in self.labels.keys() {
            if k.is_empty() || k.contains('=') || k.starts_with("husk.pool") || k == super::SERVE_LABEL {
                return Err(bad(format!("labels: {k:?} is not a label a claim may set")));
            }
        }
        let ttl = match &self.ttl {
            None => DEFAULT_TTL,
            Some(v) => {
                let t = scalar("ttl", v)?;
                match crate::units::parse_duration(&t) {
                    Ok(d) if !d.is_zero() => d,
                    Ok(_) => return Err(bad("ttl must be longer than 0 (e.g. 30s, 10m)".into())),
                    Err(e) => return Err(bad(format!("ttl {t:?}: {e}"))),
                }
            }
        };
        Ok(Some(ClaimArgs { pool: pool.clone(), name: self.name.clone(), labels: self.labels.clone(), ttl }))
    }

    /// The create request: the CLI's defaults on this host, and what the
    /// body gives (the labels with serve's own, `address`).
    pub fn to_options(&self, address: &str) -> Result<CreateOptions, ApiError> {
        let bad = |m: String| ApiError::new(400, "arguments", m);
        let mut sandbox = crate::cli::spec::sandbox_defaults().map_err(|e| {
            let text = e.to_string();
            bad(text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string())
        })?;
        let text = |key: &str, v: &Option<String>| v.as_deref().map(|s| clean(key, s)).transpose();
        if let Some(i) = text("image", &self.image)? {
            sandbox.image = Some(i);
        }
        if let Some(r) = text("rootfs", &self.rootfs)? {
            if self.image.is_some() {
                return Err(bad("the argument '--rootfs <DIR>' cannot be used with '--image <REF>'".into()));
            }
            sandbox.rootfs = Some(r.into());
        }
        if let Some(r) = text("runtime", &self.runtime)? {
            sandbox.runtime = match r.as_str() {
                "native" => crate::spec::RuntimeChoice::Native,
                "runsc" => crate::spec::RuntimeChoice::Runsc,
                "auto" => crate::spec::RuntimeChoice::Auto,
                other => {
                    return Err(bad(format!(
                        "invalid value '{other}' for '--runtime <RUNTIME>' [possible values: native, runsc, auto]"
                    )));
                }
            };
        }
        if let Some(n) = text("network", &self.network)? {
            sandbox.network = vec![n];
        }
        if let Some(w) = text("workdir", &self.workdir)? {
            sandbox.workdir = Some(w);
        }
        for (slot, key, v) in [
            (&mut sandbox.memory, "memory", &self.memory),
            (&mut sandbox.cpus, "cpus", &self.cpus),
            (&mut sandbox.pids, "pids", &self.pids),
        ] {
            if let Some(v) = v {
                *slot = Some(scalar(key, v)?);
            }
        }
        if let Some(v) = &self.egress_bytes {
            sandbox.egress_bytes = Some(size("egress-bytes", "egress_bytes", v)?);
        }
        for rule in &self.allow_hosts {
            sandbox.allow_hosts.push(clean("allow_hosts", rule)?);
        }
        for p in &self.publish {
            sandbox.publish.push(clean("publish", p)?);
        }
        for (name, ip) in &self.add_hosts {
            sandbox.add_hosts.push(format!("{}:{}", clean("add_hosts", name)?, clean("add_hosts", ip)?));
        }
        let mut o = CreateOptions { sandbox, ..CreateOptions::default() };
        o.process.env = pairs("env", &self.env)?;
        o.process.user = text("user", &self.user)?;
        o.process.secrets = secrets(&self.secret_env)?;
        o.name = text("name", &self.name)?;
        o.warm = text("warm", &self.warm)?;
        o.session = text("session", &self.session)?;
        if o.warm.is_some() && o.session.is_some() {
            return Err(bad("the argument '--warm <LANG[:MODULES]>' cannot be used with '--session <LANG>'".into()));
        }
        o.concurrent = self.concurrent;
        if let Some(v) = &self.ttl {
            o.ttl = duration("ttl", "ttl", v)?;
        }
        if let Some(v) = &self.max_lifetime {
            o.max_lifetime = Some(duration("max-lifetime", "max_lifetime", v)?);
        }
        // Pool labels are serve's own: a sandbox labelled as a member could
        // be adopted by a restarted serve and handed to another caller.
        if let Some(k) = self.labels.keys().find(|k| k.starts_with(crate::sandbox::pool::POOL_LABEL)) {
            return Err(ApiError::new(400, "request", format!("labels: {k:?} is reserved for husk serve's pools")));
        }
        for (k, v) in &self.labels {
            if k.is_empty() || k.contains('=') {
                return Err(ApiError::new(
                    400,
                    "request",
                    format!("labels: {k:?} is not a valid name (non-empty, no '=')"),
                ));
            }
            o.labels.insert(clean("labels", k)?, clean("labels", v)?);
        }
        o.labels.insert(super::SERVE_LABEL.into(), address.into());
        if let Some(cmd) = &self.ready_cmd {
            if cmd.is_empty() {
                return Err(ApiError::new(400, "request", "ready_cmd: give the command as [argv...]"));
            }
            let words: Result<Vec<String>, ApiError> =
                cmd.iter().map(|w| clean("ready_cmd", w).map(|w| shell_quote(&w))).collect();
            o.ready_cmd = Some(words?.join(" "));
        }
        if let Some(v) = &self.ready_timeout {
            if o.ready_cmd.is_none() {
                return Err(bad("the argument '--ready-timeout <DURATION>' requires '--ready-cmd <CMD>'".into()));
            }
            o.ready_timeout = duration("ready-timeout", "ready_timeout", v)?;
        }
        Ok(o)
    }
}

fn shell_quote(w: &str) -> String {
    if !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&b)) {
        return w.to_string();
    }
    format!("'{}'", w.replace('\'', r"'\''"))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    pub ttl: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    argv: Option<Vec<String>>,
    code: Option<String>,
    language: Option<String>,
    stdin: Option<String>,
    stdin_b64: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// `husk exec --secret-env`: this exec's secrets.
    #[serde(default)]
    secret_env: BTreeMap<String, String>,
    timeout: Option<Value>,
    output_limit: Option<Value>,
    cwd: Option<String>,
    user: Option<String>,
    /// Queue behind a running exec instead of 409 (`husk exec --wait`).
    #[serde(default)]
    wait: bool,
}

impl ExecBody {
    /// The exec request (for sandbox `id`) and the bytes for its stdin.
    /// `code_timeout`: the timeout of code that gives none (a code call is
    /// what a model sends, and a loop in it would run until the sandbox's
    /// maximum lifetime).
    pub fn to_options(
        &self,
        id: &str,
        stream: bool,
        code_timeout: std::time::Duration,
    ) -> Result<(ExecOptions, Vec<u8>), ApiError> {
        let bad = |m: String| ApiError::new(400, "request", m);
        let stdin = match (&self.stdin, &self.stdin_b64) {
            (Some(_), Some(_)) => return Err(bad("give stdin or stdin_b64, not both".into())),
            (Some(s), None) => s.as_bytes().to_vec(),
            (None, Some(b)) => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).map_err(|e| bad(format!("stdin_b64: {e}")))?
            }
            (None, None) => Vec::new(),
        };
        let argv = match (&self.argv, &self.code) {
            (Some(_), Some(_)) => return Err(bad("give argv or code, not both".into())),
            (None, None) => {
                return Err(bad("say what to run: {\"argv\": [...]} or {\"code\": ..., \"language\": ...}".into()));
            }
            (Some(argv), None) => {
                if argv.is_empty() {
                    return Err(bad("argv is empty".into()));
                }
                if self.language.is_some() {
                    return Err(bad("language goes with code, not argv".into()));
                }
                argv.iter().map(|w| clean("argv", w)).collect::<Result<Vec<_>, _>>()?
            }
            (None, Some(_)) => {
                // The code is the interpreter's input: any size, and never
                // in argv, where execve's limit (E2BIG) and the host's `ps`
                // would meet it. In the sandbox's warm interpreter or
                // session, or run cold (docs/warm.md).
                if !stdin.is_empty() {
                    return Err(bad("code is sent on stdin; stdin cannot be given too".into()));
                }
                match self.language.as_deref().unwrap_or("python") {
                    "python" | "python3" | "bash" | "sh" => {}
                    other => return Err(bad(format!("language {other:?}: one of python, bash, sh"))),
                }
                Vec::new()
            }
        };
        let arg_err = |flag: &str, shape: &str, given: &str, why: String| invalid(flag, shape, given, why);
        let timeout = match &self.timeout {
            Some(v) => {
                let d = duration("timeout", "timeout", v)?;
                if d.is_zero() {
                    let why = "a timeout of 0 would kill every run at once; leave --timeout out for no limit";
                    return Err(arg_err("timeout", "DURATION", &scalar("timeout", v)?, why.into()));
                }
                Some(d)
            }
            // A code call is what a model sends, and a loop in it would run
            // until the sandbox's maximum lifetime.
            None if self.code.is_some() => Some(code_timeout),
            None => None,
        };
        let limit = match &self.output_limit {
            Some(v) => {
                let n = size("output-limit", "output_limit", v)?;
                let given = scalar("output_limit", v)?;
                crate::capture::check_limit(n).map_err(|e| arg_err("output-limit", "BYTES", &given, e.to_string()))?
            }
            None => crate::spec::DEFAULT_OUTPUT_LIMIT,
        };
        let process = ProcessOptions {
            env: pairs("env", &self.env)?,
            user: self.user.as_deref().map(|u| clean("user", u)).transpose()?,
            timeout,
            capture: Some(limit),
            stream,
            secrets: secrets(&self.secret_env)?,
            ..ProcessOptions::default()
        };
        let opts = ExecOptions {
            sandbox: id.to_string(),
            argv,
            code: self.code.as_ref().map(|c| c.as_bytes().to_vec()),
            language: self.language.as_deref().map(|l| clean("language", l)).transpose()?,
            process,
            workdir: self.cwd.as_deref().map(|c| clean("cwd", c)).transpose()?,
            wait: self.wait,
        };
        Ok((opts, stdin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Access, NetworkMode, OutputSpec, RootSpec};
    use std::time::Duration;

    const CODE_TIMEOUT: Duration = Duration::from_secs(600);

    #[test]
    fn no_value_can_become_an_option_of_its_own() {
        let b: CreateBody = parse(br#"{"memory": "--privileged", "env": {"A": "--x"}, "labels": {"k": "v"}}"#).unwrap();
        let o = b.to_options("unix:/s").unwrap();
        assert_eq!(o.sandbox.memory.as_deref(), Some("--privileged"));
        assert_eq!(o.process.env, ["A=--x"]);
        assert_eq!(o.labels.get("husk-serve").map(String::as_str), Some("unix:/s"));
        // And the value is refused as a value, not read as a flag.
        let e = crate::request::lower::create_spec(&o).unwrap_err();
        assert!(e.to_string().contains("--memory"), "{e}");
    }

    #[test]
    fn egress_wire_names_become_the_sandbox_network() {
        let b: CreateBody = parse(
            br#"{"network": "allow=a.test", "allow_hosts": ["b.test:443"], "add_hosts": {"a.test": "127.0.0.5"}, "egress_bytes": "10M", "publish": ["0:8080"]}"#,
        )
        .unwrap();
        let o = b.to_options("unix:/s").unwrap();
        assert_eq!(o.sandbox.network, ["allow=a.test"]);
        assert_eq!(o.sandbox.allow_hosts, ["b.test:443"]);
        assert_eq!(o.sandbox.add_hosts, ["a.test:127.0.0.5"]);
        assert_eq!(o.sandbox.egress_bytes, Some(10 << 20));
        assert_eq!(o.sandbox.publish, ["0:8080"]);
        let (spec, _) = crate::request::lower::create_spec(&o).unwrap();
        assert_eq!(spec.network, NetworkMode::None);
        let egress = spec.egress.expect("an allowlist");
        assert_eq!(egress.rules, ["a.test", "b.test:443"]);
        assert_eq!(egress.egress_bytes, Some(10 << 20));
        assert_eq!(spec.publish.len(), 1);
    }

    #[test]
    fn create_wire_names_become_the_spec_and_the_lease() {
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let body = serde_json::json!({
            "rootfs": dir, "memory": "256M", "cpus": 1.5, "pids": 64, "ttl": "90s", "max_lifetime": 3600,
            "workdir": "/w", "user": "1000", "env": {"A": "1"}, "secret_env": {"TOKEN": "s3cret"},
            "name": "web", "labels": {"team": "x"}, "concurrent": true, "warm": "python",
            "ready_cmd": ["test", "-e", "/a b"], "ready_timeout": "5s", "runtime": "native",
        });
        let b: CreateBody = parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        let o = b.to_options("unix:/s").unwrap();
        assert_eq!((o.ttl, o.max_lifetime), (Duration::from_secs(90), Some(Duration::from_secs(3600))));
        assert_eq!(o.ready_cmd.as_deref(), Some("test -e '/a b'"));
        assert_eq!(o.ready_timeout, Duration::from_secs(5));
        assert_eq!((o.name.as_deref(), o.concurrent), (Some("web"), true));
        let (spec, secrets) = crate::request::lower::create_spec(&o).unwrap();
        assert_eq!(spec.root, RootSpec::Rootfs(dir));
        assert_eq!(spec.limits.memory, Some(256 << 20));
        assert_eq!(spec.limits.cpus_milli, Some(1500));
        assert_eq!(spec.limits.pids, Some(64));
        assert_eq!(spec.workdir.as_deref(), Some("/w"));
        assert_eq!(spec.user.as_deref(), Some("1000"));
        assert_eq!(spec.env, [("A".to_string(), "1".to_string())]);
        assert!(spec.warm.is_some());
        // The secret is the supervisor's, never the spec's (state.json).
        assert_eq!(secrets.len(), 1);
        assert!(!serde_json::to_string(&spec).unwrap().contains("s3cret"));
    }

    #[test]
    fn bad_wire_values_fail_naming_the_cli_flag() {
        for (body, says) in [
            (r#"{"ttl": "soon"}"#, "--ttl"),
            (r#"{"runtime": "docker"}"#, "--runtime"),
            (r#"{"egress_bytes": "lots"}"#, "--egress-bytes"),
            (r#"{"image": "a", "rootfs": "/"}"#, "--rootfs"),
            (r#"{"ready_timeout": "1s"}"#, "--ready-cmd"),
        ] {
            let b: CreateBody = parse(body.as_bytes()).unwrap();
            let e = b.to_options("unix:/s").unwrap_err();
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
    }

    #[test]
    fn unknown_keys_and_bare_env_names_are_refused() {
        assert!(parse::<CreateBody>(br#"{"memroy": "1G"}"#).is_err());
        let b: ExecBody = parse(br#"{"argv": ["true"], "env": {"HOME": "x", "": "y"}}"#).unwrap();
        assert!(b.to_options("id", false, CODE_TIMEOUT).is_err());
    }

    #[test]
    fn exec_wire_names_become_the_exec_request() {
        let b: ExecBody = parse(
            br#"{"argv": ["ls", "-l"], "env": {"A": "1"}, "timeout": "2s", "output_limit": "4K", "cwd": "/tmp", "user": "0", "wait": true, "stdin": "in"}"#,
        )
        .unwrap();
        let (o, stdin) = b.to_options("abc", true, CODE_TIMEOUT).unwrap();
        assert_eq!((o.sandbox.as_str(), o.argv.as_slice()), ("abc", ["ls".to_string(), "-l".to_string()].as_slice()));
        assert_eq!(o.process.timeout, Some(Duration::from_secs(2)));
        assert_eq!(o.process.capture, Some(4096));
        assert!(o.process.stream && o.wait);
        assert_eq!((o.workdir.as_deref(), o.process.user.as_deref()), (Some("/tmp"), Some("0")));
        assert_eq!(stdin, b"in");
        let mut spec = crate::spec::Spec::new(Vec::new());
        crate::request::lower::apply_process(&mut spec, &o.process).unwrap();
        assert_eq!(spec.output, OutputSpec::Capture { limit: 4096 });
        assert_eq!(spec.env, [("A".to_string(), "1".to_string())]);
    }

    #[test]
    fn code_goes_to_the_interpreter_not_argv() {
        let b: ExecBody = parse(br#"{"code": "print(1)", "language": "python"}"#).unwrap();
        let (o, stdin) = b.to_options("id", false, CODE_TIMEOUT).unwrap();
        assert!(o.argv.is_empty());
        assert_eq!(o.code.as_deref(), Some(&b"print(1)"[..]));
        assert_eq!(o.language.as_deref(), Some("python"));
        assert_eq!(o.process.timeout, Some(CODE_TIMEOUT));
        assert!(stdin.is_empty());
    }

    #[test]
    fn binds_are_lowered_with_their_access() {
        let dir = std::env::temp_dir();
        let o =
            crate::request::SandboxOptions { binds: vec![format!("{}:/data:rw", dir.display())], ..Default::default() };
        let mut spec = crate::spec::Spec::new(Vec::new());
        crate::request::lower::apply_sandbox(&mut spec, &o).unwrap();
        assert_eq!(spec.binds[0].access, Access::ReadWrite);
        assert_eq!(spec.binds[0].target, "/data");
    }
}
