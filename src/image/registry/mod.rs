//! OCI Distribution v2 client: manifests and blobs over HTTP(S), with the
//! anonymous / Basic / Bearer (`WWW-Authenticate` challenge) auth flows.
//!
//! Built on `ureq` (sync, rustls): husk's supervisor is single-threaded and
//! a pull runs before a sandbox is cloned, so an async runtime would be
//! dead weight; nothing here runs (no TLS or resolver state) unless an
//! image is pulled. Redirects are followed here, not by ureq, so that each
//! hop is checked (loops, plain HTTP to non-loopback hosts) and credentials
//! never follow a redirect to another host.

pub mod auth;
pub mod creds;
pub mod mirror;
pub mod push;

use super::digest::truncate;
use auth::Challenge;
use creds::Credential;
use std::collections::HashSet;
use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;
use ureq::http::{HeaderMap, Response, Uri};

/// Redirect hops followed for one request.
const MAX_REDIRECTS: usize = 5;
/// Attempts for a request answered 429/5xx or not at all.
const ATTEMPTS: u32 = 4;
/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Total time one client (one pull or push from one source) waits
/// between retries, whatever the registry asks: a registry answering
/// every request `429 Retry-After: 3600` ends the pull after this, not
/// after 30 s per request. HUSK_REGISTRY_RETRY_BUDGET (seconds) sets it.
const RETRY_BUDGET: Duration = Duration::from_secs(60);
/// Token realms on another origin that may receive the registry's
/// credentials without configuration: Docker Hub's and GitLab.com's (their
/// registries and token services are different hosts by design).
const BUILTIN_REALMS: &[(&str, &str)] =
    &[("registry-1.docker.io", "https://auth.docker.io"), ("registry.gitlab.com", "https://gitlab.com")];
/// Error bodies and token responses are read within this.
const MAX_SMALL_BODY: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{url}: {why}")]
    Http { url: String, why: String },
    #[error("{url}: the registry answered {status}{detail}")]
    Status { url: String, status: u16, detail: String },
    #[error("{registry}: authentication failed: {why}")]
    Auth { registry: String, why: String },
    #[error(
        "{url}: plain HTTP is only used for loopback registries; pass --insecure-registry {host} (or HUSK_INSECURE_REGISTRY) to allow it"
    )]
    Insecure { url: String, host: String },
    #[error("{url}: {why}")]
    Redirect { url: String, why: String },
    #[error("{what}: {why}")]
    Refused { what: String, why: String },
    #[error(
        "{last}; giving up: the {budget} s this pull may spend waiting between retries are used up (HUSK_REGISTRY_RETRY_BUDGET)"
    )]
    RetriesExhausted { last: Box<RegistryError>, budget: u64 },
}

impl RegistryError {
    /// Whether a 404 (the manifest or blob does not exist).
    pub fn is_not_found(&self) -> bool {
        matches!(self, RegistryError::Status { status: 404, .. })
    }
}

/// Settings of one client.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// `HOST:PORT`s that may be spoken to over plain HTTP.
    pub insecure: Vec<String>,
    /// PEM files of extra root CAs (added to the bundled Mozilla roots).
    pub ca_files: Vec<std::path::PathBuf>,
    /// Mirrors given on the command line or in the environment (tried
    /// before those of `<store root>/registries.json`).
    pub mirrors: Vec<mirror::Mirror>,
}

impl ClientOptions {
    /// From the flags' values (`--insecure-registry`, `--registry-ca`,
    /// `--registry-mirror`, which clap also fills from HUSK_INSECURE_REGISTRY,
    /// HUSK_REGISTRY_CA and HUSK_REGISTRY_MIRROR).
    pub fn new(
        insecure: &[String],
        ca_files: &[std::path::PathBuf],
        mirrors: &[String],
    ) -> Result<ClientOptions, mirror::MirrorError> {
        Ok(ClientOptions {
            insecure: insecure.to_vec(),
            ca_files: ca_files.to_vec(),
            mirrors: mirrors.iter().map(|m| mirror::parse_flag(m)).collect::<Result<_, _>>()?,
        })
    }

    /// From HUSK_INSECURE_REGISTRY, HUSK_REGISTRY_CA and HUSK_REGISTRY_MIRROR
    /// (comma-separated), for pulls no flag configures (`verify --repair`).
    pub fn from_env() -> Result<ClientOptions, mirror::MirrorError> {
        let list = |k: &str| -> Vec<String> {
            std::env::var(k)
                .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
                .unwrap_or_default()
        };
        let ca: Vec<std::path::PathBuf> = list("HUSK_REGISTRY_CA").into_iter().map(Into::into).collect();
        ClientOptions::new(&list("HUSK_INSECURE_REGISTRY"), &ca, &list("HUSK_REGISTRY_MIRROR"))
    }
}

/// A client for one registry and repository (tokens are scoped to it).
pub struct Client {
    agent: ureq::Agent,
    /// `host[:port]` of the API.
    host: String,
    base: String,
    repository: String,
    insecure: Vec<String>,
    cred: Option<Credential>,
    /// The Authorization header value that worked last.
    auth: Mutex<Option<String>>,
    /// Token scope actions asked for when a challenge names none.
    actions: &'static str,
    /// Origins (`scheme://host[:port]`) of token realms trusted with the
    /// credential besides the registry's own (HUSK_TRUSTED_TOKEN_REALMS).
    trusted_realms: Vec<String>,
    /// Time left for waiting between retries (see RETRY_BUDGET).
    retry_left: Mutex<Duration>,
}

/// `scheme://authority` of a URI, lowercased (an origin, RFC 6454, with an
/// explicit default port kept as written).
fn origin(uri: &Uri) -> Option<String> {
    Some(format!("{}://{}", uri.scheme_str()?, uri.authority()?.as_str()).to_ascii_lowercase())
}

/// HUSK_TRUSTED_TOKEN_REALMS: comma-separated origins or realm URLs.
fn trusted_realms_from_env() -> Vec<String> {
    std::env::var("HUSK_TRUSTED_TOKEN_REALMS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter_map(|s| s.parse::<Uri>().ok().and_then(|u| origin(&u)))
        .collect()
}

/// HUSK_REGISTRY_RETRY_BUDGET (whole seconds), else RETRY_BUDGET.
fn retry_budget_from_env() -> Duration {
    std::env::var("HUSK_REGISTRY_RETRY_BUDGET")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(RETRY_BUDGET)
}

/// Whether `host` (without port) is a loopback address.
pub fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn split_host_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split(']').next().map(|h| &h[1..]).unwrap_or(authority);
    }
    authority.rsplit_once(':').map(|(h, _)| h).unwrap_or(authority)
}

impl Client {
    /// `host`: the API's `host[:port]`; plain HTTP for loopback hosts and
    /// those in `opts.insecure`, HTTPS otherwise.
    pub fn new(
        host: &str,
        repository: &str,
        cred: Option<Credential>,
        opts: &ClientOptions,
    ) -> Result<Client, RegistryError> {
        let plain = is_loopback(split_host_port(host)) || opts.insecure.iter().any(|i| i == host);
        let base = format!("{}://{host}", if plain { "http" } else { "https" });
        let mut tls = ureq::tls::TlsConfig::builder();
        if !opts.ca_files.is_empty() {
            let mut certs = Vec::new();
            for f in &opts.ca_files {
                let pem = std::fs::read(f)
                    .map_err(|e| RegistryError::Refused { what: f.display().to_string(), why: e.to_string() })?;
                for item in ureq::tls::parse_pem(&pem) {
                    if let Ok(ureq::tls::PemItem::Certificate(c)) = item {
                        certs.push(c.to_owned());
                    }
                }
            }
            if certs.is_empty() {
                return Err(RegistryError::Refused {
                    what: "--registry-ca".into(),
                    why: "no PEM certificate in the given files".into(),
                });
            }
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        // No global/resolve timeout: with one, ureq resolves names on a
        // detached thread, and a run that pulls must be single-threaded
        // again before it clones. Connect and read timeouts bound a
        // stalled registry instead.
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .timeout_per_read(Some(Duration::from_secs(60)))
            .user_agent(concat!("husk/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build()
            .into();
        Ok(Client {
            agent,
            host: host.to_string(),
            base,
            repository: repository.to_string(),
            insecure: opts.insecure.clone(),
            cred,
            auth: Mutex::new(None),
            actions: "pull",
            trusted_realms: trusted_realms_from_env(),
            retry_left: Mutex::new(retry_budget_from_env()),
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/v2/{}/{path}", self.base, self.repository)
    }

    fn check_scheme(&self, uri: &Uri) -> Result<(), RegistryError> {
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        match uri.scheme_str() {
            Some("https") => Ok(()),
            Some("http") if is_loopback(split_host_port(authority)) || self.insecure.iter().any(|i| i == authority) => {
                Ok(())
            }
            Some("http") => Err(RegistryError::Insecure { url: uri.to_string(), host: authority.to_string() }),
            _ => Err(RegistryError::Redirect { url: uri.to_string(), why: "not an http(s) URL".into() }),
        }
    }

    /// GET `url` with the auth, redirect and retry rules; the final
    /// response has a 2xx status.
    pub fn get(&self, url: &str, accept: &[&str]) -> Result<Response<ureq::Body>, RegistryError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.get_once(url, accept) {
                Ok(r) => return Ok(r),
                Err((e, Some(retry_after))) if attempt < ATTEMPTS => {
                    let wait = retry_after.unwrap_or_else(|| backoff(attempt - 1));
                    let mut left = self.retry_left.lock().unwrap_or_else(|p| p.into_inner());
                    if left.is_zero() {
                        return Err(RegistryError::RetriesExhausted {
                            last: Box::new(e),
                            budget: retry_budget_from_env().as_secs(),
                        });
                    }
                    // The last wait is cut to what is left of the budget:
                    // one more try, then the refusal above.
                    let wait = wait.min(*left);
                    *left -= wait;
                    drop(left);
                    tracing_note(&format!("{e}; retrying in {:.1}s", wait.as_secs_f64()));
                    std::thread::sleep(wait);
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// One attempt; on failure, whether to retry (None: do not), after
    /// the registry's Retry-After (Some(Some)) or a backoff (Some(None)).
    #[allow(clippy::type_complexity)]
    fn get_once(
        &self,
        url: &str,
        accept: &[&str],
    ) -> Result<Response<ureq::Body>, (RegistryError, Option<Option<Duration>>)> {
        let fatal = |e| (e, None);
        let mut url = url.to_string();
        let mut seen = HashSet::new();
        let mut authed_after_challenge = false;
        loop {
            let uri: Uri = url
                .parse()
                .map_err(|e| fatal(RegistryError::Redirect { url: truncate(&url, 200), why: format!("{e}") }))?;
            self.check_scheme(&uri).map_err(fatal)?;
            if !seen.insert(url.clone()) {
                return Err(fatal(RegistryError::Redirect { url, why: "redirect loop".into() }));
            }
            if seen.len() > MAX_REDIRECTS + 1 {
                return Err(fatal(RegistryError::Redirect {
                    url,
                    why: format!("more than {MAX_REDIRECTS} redirects"),
                }));
            }
            // Credentials go only to the registry itself, never to a host
            // a redirect names (blob storage, a CDN).
            let same_host = uri.authority().map(|a| a.as_str()) == Some(self.host.as_str());
            let mut req = self.agent.get(&url);
            if !accept.is_empty() {
                req = req.header("Accept", accept.join(", "));
            }
            let auth = self.auth.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if same_host && let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(e) => {
                    let retry = transient(&e).then_some(None);
                    let why = match &e {
                        ureq::Error::Tls(_) | ureq::Error::Rustls(_) if uri.scheme_str() == Some("https") => format!(
                            "{e} (if this registry speaks plain HTTP, pass --insecure-registry {})",
                            uri.authority().map(|a| a.as_str()).unwrap_or("")
                        ),
                        _ => e.to_string(),
                    };
                    return Err((RegistryError::Http { url: url.clone(), why }, retry));
                }
            };
            let status = resp.status().as_u16();
            match status {
                200..=299 => return Ok(resp),
                301 | 302 | 303 | 307 | 308 => {
                    let loc = header(resp.headers(), "location").ok_or_else(|| {
                        fatal(RegistryError::Redirect { url: url.clone(), why: format!("{status} without a Location") })
                    })?;
                    url = resolve_location(&uri, &loc);
                }
                401 if same_host && !authed_after_challenge => {
                    let ch = header(resp.headers(), "www-authenticate").ok_or_else(|| {
                        fatal(RegistryError::Auth {
                            registry: self.host.clone(),
                            why: "401 without a WWW-Authenticate challenge".into(),
                        })
                    })?;
                    let ch = Challenge::parse(&ch)
                        .map_err(|e| fatal(RegistryError::Auth { registry: self.host.clone(), why: e.to_string() }))?;
                    let value = self.answer(&ch).map_err(fatal)?;
                    *self.auth.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
                    authed_after_challenge = true;
                    seen.remove(&url);
                }
                401 | 403 => {
                    let hint = match &self.cred {
                        Some(c) => format!("the credentials of {} were refused", c.origin),
                        None => format!("no credentials for {}; run `husk login {}`", self.host, self.host),
                    };
                    return Err(fatal(RegistryError::Auth {
                        registry: self.host.clone(),
                        why: format!("{status}: {hint}"),
                    }));
                }
                429 | 500..=599 => {
                    let wait = header(resp.headers(), "retry-after")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                    let detail = error_detail(resp);
                    return Err((RegistryError::Status { url, status, detail }, Some(wait)));
                }
                _ => {
                    let detail = error_detail(resp);
                    return Err(fatal(RegistryError::Status { url, status, detail }));
                }
            }
        }
    }

    /// The Authorization header value that answers a challenge.
    fn answer(&self, ch: &Challenge) -> Result<String, RegistryError> {
        let auth_err = |why: String| RegistryError::Auth { registry: self.host.clone(), why };
        match ch {
            Challenge::Basic => match &self.cred {
                Some(c) => Ok(c.basic_header()),
                None => Err(auth_err(format!(
                    "the registry wants a user name and password; run `husk login {}`",
                    self.host
                ))),
            },
            Challenge::Bearer { realm, service, scope } => {
                // `husk login` checks credentials on no repository.
                let scope = scope.clone().or_else(|| {
                    (!self.repository.is_empty()).then(|| format!("repository:{}:{}", self.repository, self.actions))
                });
                let mut query = Vec::new();
                if let Some(s) = &scope {
                    query.push(format!("scope={}", encode(s)));
                }
                if let Some(s) = service {
                    query.push(format!("service={}", encode(s)));
                }
                let mut url = realm.clone();
                if !query.is_empty() {
                    url.push(if realm.contains('?') { '&' } else { '?' });
                    url.push_str(&query.join("&"));
                }
                let uri: Uri = url.parse().map_err(|e| auth_err(format!("token realm {realm:?}: {e}")))?;
                self.check_scheme(&uri)?;
                // The credential is the registry's: a realm on another
                // origin (scheme, host, port) gets it only when trusted,
                // else a hostile registry could name any server as its
                // realm and collect the password.
                let realm_origin = origin(&uri).unwrap_or_default();
                let trusted = self.trusted_realm(&realm_origin);
                // `husk login` (no repository) checks the credentials: an
                // anonymous token would prove nothing about them.
                if self.cred.is_some() && !trusted && self.repository.is_empty() {
                    return Err(auth_err(format!(
                        "cannot check the credentials: the token service at {realm_origin} is not on the registry's origin ({}), and husk sends credentials only there; if {realm_origin} is this registry's, trust it with HUSK_TRUSTED_TOKEN_REALMS={realm_origin}",
                        self.base
                    )));
                }
                let mut req = self.agent.get(&url);
                if let Some(c) = &self.cred
                    && trusted
                {
                    req = req.header("Authorization", c.basic_header());
                }
                let resp = req.call().map_err(|e| RegistryError::Http { url: realm.clone(), why: e.to_string() })?;
                let status = resp.status().as_u16();
                if status == 401 || status == 403 {
                    let why = match &self.cred {
                        Some(c) if !trusted => format!(
                            "the token service at {realm_origin} wants credentials, and husk sends the credentials of {} only to a token service on the registry's own origin ({}); if {realm_origin} is this registry's, trust it with HUSK_TRUSTED_TOKEN_REALMS={realm_origin}",
                            c.origin, self.base
                        ),
                        Some(c) => format!("the token service refused the credentials of {}", c.origin),
                        None => format!("the token service wants credentials; run `husk login {}`", self.host),
                    };
                    return Err(auth_err(why));
                }
                if !(200..300).contains(&status) {
                    return Err(RegistryError::Status { url: realm.clone(), status, detail: error_detail(resp) });
                }
                let body = read_small(resp.into_body(), MAX_SMALL_BODY)
                    .map_err(|why| RegistryError::Http { url: realm.clone(), why })?;
                auth::token_from(&body).map(|t| format!("Bearer {t}")).map_err(|e| auth_err(e.to_string()))
            }
        }
    }

    /// Whether a token realm at `realm_origin` may receive the credential:
    /// the registry's own origin, a built-in pair, or configured.
    fn trusted_realm(&self, realm_origin: &str) -> bool {
        realm_origin == self.base.to_ascii_lowercase()
            || BUILTIN_REALMS.iter().any(|(h, r)| *h == self.host && *r == realm_origin)
            || self.trusted_realms.iter().any(|t| t == realm_origin)
    }

    /// Checks the registry answers (and our credentials work) at `/v2/`.
    pub fn ping(&self) -> Result<(), RegistryError> {
        self.get(&format!("{}/v2/", self.base), &[]).map(|_| ())
    }
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

pub fn response_header(r: &Response<ureq::Body>, name: &str) -> Option<String> {
    header(r.headers(), name)
}

/// Whether a failed request may succeed when tried again (a reset or
/// refused connection, a timeout); a name that does not resolve or a TLS
/// failure will not.
fn transient(e: &ureq::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        ureq::Error::Timeout(_) | ureq::Error::ConnectionFailed => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            K::ConnectionReset
                | K::ConnectionAborted
                | K::ConnectionRefused
                | K::TimedOut
                | K::UnexpectedEof
                | K::BrokenPipe
                | K::Interrupted
        ),
        _ => false,
    }
}

/// Exponential backoff, 0.5 s doubling.
fn backoff(n: u32) -> Duration {
    Duration::from_millis(500 << n.min(5))
}

fn resolve_location(base: &Uri, loc: &str) -> String {
    if loc.contains("://") {
        return loc.to_string();
    }
    let scheme = base.scheme_str().unwrap_or("https");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    if loc.starts_with("//") {
        return format!("{scheme}:{loc}");
    }
    if loc.starts_with('/') {
        return format!("{scheme}://{authority}{loc}");
    }
    let path = base.path();
    let dir = &path[..path.rfind('/').map(|i| i + 1).unwrap_or(0)];
    format!("{scheme}://{authority}{dir}{loc}")
}

/// Percent-encoding for a query value.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads a whole body within `limit` bytes.
pub fn read_small(body: ureq::Body, limit: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    body.into_reader().take(limit + 1).read_to_end(&mut out).map_err(|e| e.to_string())?;
    if out.len() as u64 > limit {
        return Err(format!("the response is larger than {limit} bytes"));
    }
    Ok(out)
}

/// The registry's error message (distribution's `{"errors":[...]}`), short.
fn error_detail(resp: Response<ureq::Body>) -> String {
    let body = read_small(resp.into_body(), 64 << 10).unwrap_or_default();
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        code: Option<String>,
        message: Option<String>,
    }
    match serde_json::from_slice::<Errors>(&body) {
        Ok(e) if !e.errors.is_empty() => {
            let parts: Vec<String> = e
                .errors
                .iter()
                .take(3)
                .map(|i| {
                    format!("{} {}", i.code.as_deref().unwrap_or(""), truncate(i.message.as_deref().unwrap_or(""), 200))
                })
                .collect();
            format!(": {}", parts.join("; ").trim())
        }
        _ => String::new(),
    }
}

/// A retry is worth a line on stderr (the user sees why a pull is slow).
fn tracing_note(msg: &str) {
    crate::errln!("husk: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognized() {
        assert!(
            is_loopback("127.0.0.1") && is_loopback("127.3.2.1") && is_loopback("localhost") && is_loopback("[::1]")
        );
        assert!(!is_loopback("10.0.0.1") && !is_loopback("example.com") && !is_loopback("127.0.0.1.nip.io"));
        assert_eq!(split_host_port("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(split_host_port("[::1]:5000"), "::1");
    }

    #[test]
    fn redirect_locations_resolve_against_the_request() {
        let base: Uri = "http://127.0.0.1:5000/v2/x/blobs/sha256:ab".parse().unwrap();
        assert_eq!(resolve_location(&base, "/other"), "http://127.0.0.1:5000/other");
        assert_eq!(resolve_location(&base, "https://cdn.example/b?x=1"), "https://cdn.example/b?x=1");
        assert_eq!(resolve_location(&base, "c"), "http://127.0.0.1:5000/v2/x/blobs/c");
        assert_eq!(resolve_location(&base, "//h/p"), "http://h/p");
        assert_eq!(encode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }
}
