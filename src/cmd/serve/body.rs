//! Request bodies of the API and the husk arguments they become. Unknown
//! keys are refused (a typo must not silently mean "default"), every value
//! becomes one `--flag=value` argument, and nothing a client sends can add
//! a flag the API does not name.

use super::ApiError;
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
fn pairs(flag: &str, key: &str, map: &BTreeMap<String, String>, out: &mut Vec<String>) -> Result<(), ApiError> {
    for (k, v) in map {
        if k.is_empty() || k.contains('=') {
            return Err(ApiError::new(400, "request", format!("{key}: {k:?} is not a valid name (non-empty, no '=')")));
        }
        out.push(format!("--{flag}={}={}", clean(key, k)?, clean(key, v)?));
    }
    Ok(())
}

/// `secret_env` as (name, value) pairs, handed to the command as files
/// (`--secret-file NAME=/proc/self/fd/N`, serve's `secret_files`): never
/// in argv, and never as husk's own environment, where a name like
/// `HUSK_NO_CGROUP` or `LD_PRELOAD` would change husk itself.
pub type Secrets = Vec<(String, String)>;

/// Checks `secret_env`'s names; the pairs.
fn secrets(map: &BTreeMap<String, String>) -> Result<Secrets, ApiError> {
    let mut out = Vec::new();
    for (k, v) in map {
        if !crate::cli::secret::valid_name(k) {
            return Err(ApiError::new(
                400,
                "request",
                format!("secret_env: {k:?} is not an environment variable name"),
            ));
        }
        out.push((k.clone(), clean("secret_env", v)?));
    }
    Ok(out)
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

    /// `husk create` arguments, and the secrets as environment variables
    /// for it (never in argv).
    pub fn to_args(&self, address: &str) -> Result<(Vec<String>, Secrets), ApiError> {
        let mut a = Vec::new();
        for (flag, v) in [
            ("image", &self.image),
            ("rootfs", &self.rootfs),
            ("runtime", &self.runtime),
            ("network", &self.network),
            ("workdir", &self.workdir),
            ("user", &self.user),
            ("name", &self.name),
            ("warm", &self.warm),
            ("session", &self.session),
        ] {
            if let Some(v) = v {
                a.push(format!("--{flag}={}", clean(flag, v)?));
            }
        }
        for (flag, key, v) in [
            ("memory", "memory", &self.memory),
            ("cpus", "cpus", &self.cpus),
            ("pids", "pids", &self.pids),
            ("ttl", "ttl", &self.ttl),
            ("max-lifetime", "max_lifetime", &self.max_lifetime),
            ("ready-timeout", "ready_timeout", &self.ready_timeout),
            ("egress-bytes", "egress_bytes", &self.egress_bytes),
        ] {
            if let Some(v) = v {
                a.push(format!("--{flag}={}", scalar(key, v)?));
            }
        }
        for rule in &self.allow_hosts {
            a.push(format!("--allow-host={}", clean("allow_hosts", rule)?));
        }
        for p in &self.publish {
            a.push(format!("--publish={}", clean("publish", p)?));
        }
        for (name, ip) in &self.add_hosts {
            a.push(format!("--add-host={}:{}", clean("add_hosts", name)?, clean("add_hosts", ip)?));
        }
        pairs("env", "env", &self.env, &mut a)?;
        // Pool labels are serve's own: a sandbox labelled as a member could
        // be adopted by a restarted serve and handed to another caller.
        if let Some(k) = self.labels.keys().find(|k| k.starts_with(crate::sandbox::pool::POOL_LABEL)) {
            return Err(ApiError::new(400, "request", format!("labels: {k:?} is reserved for husk serve's pools")));
        }
        let mut labels = self.labels.clone();
        labels.insert(super::SERVE_LABEL.into(), address.into());
        pairs("label", "labels", &labels, &mut a)?;
        if self.concurrent {
            a.push("--concurrent".into());
        }
        if let Some(cmd) = &self.ready_cmd {
            if cmd.is_empty() {
                return Err(ApiError::new(400, "request", "ready_cmd: give the command as [argv...]"));
            }
            let words: Result<Vec<String>, ApiError> =
                cmd.iter().map(|w| clean("ready_cmd", w).map(|w| shell_quote(&w))).collect();
            a.push(format!("--ready-cmd={}", words?.join(" ")));
        }
        Ok((a, secrets(&self.secret_env)?))
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

/// `husk exec` options and the command.
pub struct ExecArgs {
    pub opts: Vec<String>,
    pub command: Vec<String>,
    pub secrets: Secrets,
}

impl ExecBody {
    /// The exec's arguments and the bytes for its stdin.
    /// `code_timeout`: the timeout of code that gives none (a code call is
    /// what a model sends, and a loop in it would run until the sandbox's
    /// maximum lifetime).
    pub fn to_args(&self, stream: bool, code_timeout: std::time::Duration) -> Result<(ExecArgs, Vec<u8>), ApiError> {
        let bad = |m: String| ApiError::new(400, "request", m);
        let mut stdin = match (&self.stdin, &self.stdin_b64) {
            (Some(_), Some(_)) => return Err(bad("give stdin or stdin_b64, not both".into())),
            (Some(s), None) => s.as_bytes().to_vec(),
            (None, Some(b)) => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).map_err(|e| bad(format!("stdin_b64: {e}")))?
            }
            (None, None) => Vec::new(),
        };
        let command = match (&self.argv, &self.code) {
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
            (None, Some(code)) => {
                // The code goes on stdin: any size, and never in argv, where
                // execve's limit (E2BIG) and the host's `ps` would meet it.
                // `husk exec --code -` hands it to the sandbox's warm
                // interpreter or session, or runs it cold (docs/warm.md).
                if !stdin.is_empty() {
                    return Err(bad("code is sent on stdin; stdin cannot be given too".into()));
                }
                stdin = code.as_bytes().to_vec();
                match self.language.as_deref().unwrap_or("python") {
                    "python" | "python3" | "bash" | "sh" => {}
                    other => return Err(bad(format!("language {other:?}: one of python, bash, sh"))),
                }
                Vec::new()
            }
        };
        let mut opts = vec![if stream { "--json-stream" } else { "--json" }.to_string()];
        if self.code.is_some() {
            opts.push("--code=-".into());
            if let Some(l) = &self.language {
                opts.push(format!("--language={}", clean("language", l)?));
            }
        }
        for (flag, key, v) in
            [("timeout", "timeout", &self.timeout), ("output-limit", "output_limit", &self.output_limit)]
        {
            if let Some(v) = v {
                opts.push(format!("--{flag}={}", scalar(key, v)?));
            }
        }
        if self.code.is_some() && self.timeout.is_none() {
            opts.push(format!("--timeout={}ms", code_timeout.as_millis()));
        }
        pairs("env", "env", &self.env, &mut opts)?;
        if let Some(u) = &self.user {
            opts.push(format!("--user={}", clean("user", u)?));
        }
        if let Some(c) = &self.cwd {
            opts.push(format!("--workdir={}", clean("cwd", c)?));
        }
        if self.wait {
            opts.push("--wait".into());
        }
        Ok((ExecArgs { opts, command, secrets: secrets(&self.secret_env)? }, stdin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_value_can_become_a_flag_of_its_own() {
        let b: CreateBody = parse(br#"{"memory": "--privileged", "env": {"A": "--x"}, "labels": {"k": "v"}}"#).unwrap();
        let (a, _) = b.to_args("unix:/s").unwrap();
        assert!(a.iter().all(|x| x.starts_with("--") && x.contains('=')), "{a:?}");
        assert!(a.contains(&"--memory=--privileged".to_string()));
        assert!(a.contains(&"--label=husk-serve=unix:/s".to_string()));
    }

    #[test]
    fn egress_keys_become_the_create_flags() {
        let b: CreateBody = parse(
            br#"{"network": "allow=a.test", "allow_hosts": ["b.test:443"], "add_hosts": {"a.test": "127.0.0.5"}, "egress_bytes": "10M", "publish": ["0:8080"]}"#,
        )
        .unwrap();
        let (a, _) = b.to_args("unix:/s").unwrap();
        for want in [
            "--network=allow=a.test",
            "--allow-host=b.test:443",
            "--add-host=a.test:127.0.0.5",
            "--egress-bytes=10M",
            "--publish=0:8080",
        ] {
            assert!(a.contains(&want.to_string()), "{want}: {a:?}");
        }
    }

    #[test]
    fn unknown_keys_and_bare_env_names_are_refused() {
        assert!(parse::<CreateBody>(br#"{"memroy": "1G"}"#).is_err());
        let b: ExecBody = parse(br#"{"argv": ["true"], "env": {"HOME": "x", "": "y"}}"#).unwrap();
        assert!(b.to_args(false, std::time::Duration::from_secs(600)).is_err());
    }

    #[test]
    fn code_goes_on_stdin_not_argv() {
        let b: ExecBody = parse(br#"{"code": "print(1)", "language": "python"}"#).unwrap();
        let (a, stdin) = b.to_args(false, std::time::Duration::from_secs(600)).unwrap();
        assert!(a.command.is_empty());
        assert!(a.opts.contains(&"--code=-".to_string()) && a.opts.contains(&"--language=python".to_string()));
        assert_eq!(stdin, b"print(1)");
    }
}
