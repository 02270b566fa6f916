//! Registries for the pull tests: Debian's `docker-registry` (distribution
//! 2.8) on 127.0.0.1 with a private config and root, filled with `skopeo
//! copy`; and a small hostile HTTP server (loopback) that serves an OCI
//! layout the way a registry would, with tampering hooks.
#![allow(dead_code)]

use crate::imagekit::TempDir;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// How the registry authenticates.
pub enum Auth {
    None,
    /// An htpasswd file (`htpasswd -B`) with this user and password.
    Basic(&'static str, &'static str),
    /// `auth.token`: tokens from `realm`, signed by the key of `cert`.
    Token {
        realm: String,
        cert: PathBuf,
    },
}

/// A running `docker-registry serve`; killed and reaped on drop.
pub struct Registry {
    child: Child,
    pub addr: String,
    pub dir: TempDir,
    log: PathBuf,
}

impl Registry {
    pub fn start(auth: Auth) -> Registry {
        let dir = TempDir::new("registry");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let auth_yaml = match &auth {
            Auth::None => String::new(),
            Auth::Basic(user, pass) => {
                let file = dir.join("htpasswd");
                let o = Command::new("htpasswd").args(["-Bbc", file.to_str().unwrap(), user, pass]).output().unwrap();
                assert!(o.status.success(), "htpasswd: {}", String::from_utf8_lossy(&o.stderr));
                format!("auth:\n  htpasswd:\n    realm: husk-test\n    path: {}\n", file.display())
            }
            Auth::Token { realm, cert } => format!(
                "auth:\n  token:\n    realm: {realm}\n    service: husk-test-registry\n    issuer: husk-test-issuer\n    rootcertbundle: {}\n",
                cert.display()
            ),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth_yaml}",
            dir.join("data").display()
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let log = dir.join("registry.log");
        let child = Command::new("/usr/bin/docker-registry")
            .args(["serve", dir.join("config.yml").to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("registry.err")).unwrap())
            .spawn()
            .expect("docker-registry (apt-get install docker-registry)");
        let r = Registry { child, addr, dir, log };
        r.wait_ready();
        r
    }

    /// Polls until it accepts connections (readiness, not a timing check).
    fn wait_ready(&self) {
        for _ in 0..500 {
            if TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("docker-registry did not listen on {}: {}", self.addr, self.stderr());
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.err")).unwrap_or_default()
    }

    /// The access log (combined format; distribution writes it to stdout).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default() + &self.stderr()
    }

    /// How many GETs of `blobs/<digest>` the registry answered 2xx/3xx.
    pub fn blob_gets(&self, digest: &str) -> usize {
        self.access_log()
            .lines()
            .filter(|l| l.contains("\"GET /v2/") && l.contains(&format!("/blobs/{digest} ")))
            .count()
    }

    /// `skopeo copy` of the OCI layout `layout` (its only image, or every
    /// platform with `all`) to `repo:tag` here.
    pub fn push(&self, layout: &Path, repo_tag: &str, creds: Option<&str>, all: bool) {
        let mut cmd = Command::new("skopeo");
        cmd.args(["--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false"]);
        if all {
            cmd.arg("--all");
        }
        if let Some(c) = creds {
            cmd.args(["--dest-creds", c]);
        }
        cmd.arg(format!("oci:{}", layout.display())).arg(format!("docker://{}/{repo_tag}", self.addr));
        let o = cmd.output().expect("skopeo (apt-get install skopeo)");
        assert!(
            o.status.success(),
            "skopeo copy to {repo_tag}: {}\nregistry: {}",
            String::from_utf8_lossy(&o.stderr),
            self.stderr()
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request as the hostile server saw it.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub authorization: Option<String>,
}

/// What the server answers.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Announce this Content-Length instead of the body's.
    pub length: Option<u64>,
}

impl Reply {
    pub fn ok(body: Vec<u8>) -> Reply {
        Reply { status: 200, headers: Vec::new(), body, length: None }
    }
    pub fn status(status: u16) -> Reply {
        Reply { status, headers: Vec::new(), body: Vec::new(), length: None }
    }
    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
}

pub type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A loopback HTTP/1.1 server answering with `handler`; every request is
/// recorded. Stopped (and its thread joined) on drop.
pub struct Server {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start(handler: Handler) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (reqs, stop2) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (h, reqs) = (handler.clone(), reqs.clone());
                std::thread::spawn(move || serve(conn, &h, &reqs));
            }
        });
        Server { addr, requests, stop, thread: Some(thread) }
    }

    pub fn count(&self, pred: impl Fn(&Request) -> bool) -> usize {
        self.requests.lock().unwrap().iter().filter(|r| pred(r)).count()
    }
}

fn serve(conn: TcpStream, handler: &Handler, reqs: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut authorization = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("authorization")
            {
                authorization = Some(v.trim().to_string());
            }
        }
        let req = Request { path, authorization };
        reqs.lock().unwrap().push(req.clone());
        let reply = handler(&req);
        let mut head = format!(
            "HTTP/1.1 {} X\r\nContent-Length: {}\r\n",
            reply.status,
            reply.length.unwrap_or(reply.body.len() as u64)
        );
        for (k, v) in &reply.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if conn.write_all(head.as_bytes()).is_err() || conn.write_all(&reply.body).is_err() {
            return;
        }
        if reply.length.is_some() {
            // A lying length: end the connection after the body.
            return;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads a request body-less GET's path components: `/v2/<repo>/<kind>/<ref>`.
pub fn split_v2(path: &str) -> Option<(String, String, String)> {
    let rest = path.strip_prefix("/v2/")?;
    for kind in ["manifests", "blobs"] {
        if let Some(i) = rest.rfind(&format!("/{kind}/")) {
            return Some((rest[..i].to_string(), kind.to_string(), rest[i + kind.len() + 2..].to_string()));
        }
    }
    None
}

/// Serves an OCI layout's blobs as a registry would: manifests by digest
/// or by any tag (the index's first manifest), blobs by digest.
pub fn layout_reply(layout: &Path, req: &Request) -> Reply {
    let Some((_, kind, r)) = split_v2(&req.path) else {
        return if req.path == "/v2/" { Reply::ok(b"{}".to_vec()) } else { Reply::status(404) };
    };
    let digest = if r.starts_with("sha256:") {
        r
    } else {
        let idx: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        idx["manifests"][0]["digest"].as_str().unwrap().to_string()
    };
    let file = layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let Ok(mut f) = std::fs::File::open(&file) else {
        return Reply::status(404);
    };
    let mut body = Vec::new();
    f.read_to_end(&mut body).unwrap();
    let mut reply = Reply::ok(body);
    if kind == "manifests" {
        reply = reply.header("Content-Type", "application/vnd.oci.image.manifest.v1+json");
    }
    reply
}

/// A token issuer for the registry's `auth.token` mode: RS256 JWTs signed
/// with a fresh self-signed key (openssl), granting pull+push on every
/// repository a request's `scope` names, to `user:password` only.
pub struct TokenIssuer {
    pub server: Server,
    pub cert: PathBuf,
    _dir: TempDir,
}

impl TokenIssuer {
    pub fn start(user: &'static str, password: &'static str) -> TokenIssuer {
        let dir = TempDir::new("issuer");
        let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
        let o = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=husk-test-issuer"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl");
        assert!(o.status.success(), "openssl req: {}", String::from_utf8_lossy(&o.stderr));
        let der = Command::new("openssl").args(["x509", "-outform", "DER", "-in"]).arg(&cert).output().unwrap().stdout;
        use base64::Engine;
        let std64 = base64::engine::general_purpose::STANDARD;
        let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "x5c": [std64.encode(&der)]});
        let want = format!("Basic {}", std64.encode(format!("{user}:{password}")));
        let key2 = key.clone();
        let server = Server::start(Arc::new(move |req: &Request| {
            if req.authorization.as_deref() != Some(want.as_str()) {
                return Reply::status(401);
            }
            let query = req.path.split_once('?').map(|(_, q)| q).unwrap_or("");
            let access: Vec<serde_json::Value> = query
                .split('&')
                .filter_map(|kv| kv.strip_prefix("scope="))
                .map(decode)
                .filter_map(|s| {
                    let mut p = s.splitn(3, ':');
                    let (kind, name) = (p.next()?, p.next()?);
                    Some(serde_json::json!({"type": kind, "name": name, "actions": ["pull", "push"]}))
                })
                .collect();
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
            let claims = serde_json::json!({
                "iss": "husk-test-issuer", "sub": user, "aud": "husk-test-registry",
                "exp": now + 600, "nbf": now - 60, "iat": now, "jti": format!("{now}-{}", query.len()),
                "access": access,
            });
            let b64 = |v: &serde_json::Value| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
            };
            let signing = format!("{}.{}", b64(&header), b64(&claims));
            let mut child = Command::new("openssl")
                .args(["dgst", "-sha256", "-sign"])
                .arg(&key2)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(signing.as_bytes()).unwrap();
            let sig = child.wait_with_output().unwrap().stdout;
            let jwt = format!("{signing}.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig));
            Reply::ok(serde_json::to_vec(&serde_json::json!({"token": jwt})).unwrap())
        }));
        TokenIssuer { server, cert, _dir: dir }
    }

    pub fn realm(&self) -> String {
        format!("http://{}/token", self.server.addr)
    }

    /// Token requests the issuer answered or refused.
    pub fn requests(&self) -> usize {
        self.server.count(|r| r.path.starts_with("/token"))
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(&b[i + 1..i + 3]), 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
