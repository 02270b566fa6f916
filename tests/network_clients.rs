//! Real package managers and clients behind `--network allow=`: they get
//! only the proxy environment husk sets (HTTP_PROXY, HTTPS_PROXY,
//! ALL_PROXY, NO_PROXY) and must reach loopback servers the tests start,
//! named through `--add-host`, with nothing configured for the proxy.
//! Host-mode sandboxes: the clients are the host's (Debian's pip, git,
//! curl, npm on node).

mod common;

use common::{husk, verdict_of};
use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `husk run --json --bind DIR:/t:rw ARGS -- sh -c SCRIPT` in host mode.
fn run(dir: &Path, args: &[&str], script: &str) -> (Value, i32) {
    let bind = format!("{}:/t:rw", dir.display());
    let mut a = vec!["run", "--json", "--timeout", "120", "--bind", &bind];
    a.extend_from_slice(args);
    a.extend(["--", "sh", "-c", script]);
    let out = husk(&a).output().expect("spawn husk");
    (verdict_of(&out), out.status.code().unwrap_or(-1))
}

fn out(v: &Value) -> String {
    format!("{}{}", common::stdout_of(v), common::stderr_of(v))
}

fn destination<'a>(v: &'a Value, host: &str, port: u16) -> Option<&'a Value> {
    v["network"]["destinations"].as_array()?.iter().find(|d| d["host"] == host && d["port"] == port)
}

fn denied<'a>(v: &'a Value, host: &str, reason: &str) -> Option<&'a Value> {
    v["network"]["denied"].as_array()?.iter().find(|d| d["host"] == host && d["reason"] == reason)
}

fn sh(dir: &Path, cmd: &str) {
    let s = Command::new("sh").arg("-c").arg(cmd).current_dir(dir).output().expect("sh");
    assert!(s.status.success(), "{cmd}: {}{}", String::from_utf8_lossy(&s.stdout), String::from_utf8_lossy(&s.stderr));
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A test CA (`ca.pem`) and a server certificate for `names` (`srv.pem`,
/// `srv.key`) in `dir`, made with openssl.
fn certs(dir: &Path, names: &[&str]) {
    sh(
        dir,
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=husk-test-ca 2>/dev/null",
    );
    sh(dir, "openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=server 2>/dev/null");
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    std::fs::write(dir.join("ext.cnf"), format!("subjectAltName={}\n", san.join(","))).unwrap();
    sh(
        dir,
        "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext.cnf 2>/dev/null",
    );
}

/// Python's `http.server` serving `root` on ADDR:PORT (TLS with `srv.pem`
/// from `certs` when `tls`), logging each request line to `log`. Killed
/// on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const SERVE_PY: &str = r#"
import http.server, os, ssl, sys
root, addr, port, tls, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def log_message(self, fmt, *args):
        with open(log, "a") as f:
            f.write(self.requestline + "\n")
srv = http.server.ThreadingHTTPServer((addr, port), H)
if tls != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(tls, "srv.pem"), os.path.join(tls, "srv.key"))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

fn serve(root: &Path, addr: &str, port: u16, tls: Option<&Path>, log: &Path) -> Server {
    let tls = tls.map(|p| p.display().to_string()).unwrap_or_else(|| "-".into());
    let child = Command::new("python3")
        .args(["-c", SERVE_PY])
        .arg(root)
        .args([addr, &port.to_string(), &tls])
        .arg(log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 http.server");
    let up = common::wait_until(Duration::from_secs(20), || TcpStream::connect((addr, port)).is_ok());
    assert!(up, "http.server did not listen on {addr}:{port}");
    Server(child)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A simple-repository (PEP 503) index under `root` with one pure-Python
/// wheel, `huskdemo 0.1`, built by hand (a wheel is a zip with a RECORD),
/// so nothing is fetched from PyPI to make it.
const INDEX_PY: &str = r#"
import base64, hashlib, os, sys, zipfile
root = sys.argv[1]
name, ver = "huskdemo", "0.1"
files = {
    f"{name}/__init__.py": b'GREETING = "hello from the local index"\n',
    f"{name}-{ver}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n".encode(),
    f"{name}-{ver}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: husk-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def digest(b):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
record = "".join(f"{p},{digest(b)},{len(b)}\n" for p, b in files.items()) + f"{name}-{ver}.dist-info/RECORD,,\n"
files[f"{name}-{ver}.dist-info/RECORD"] = record.encode()
whl = f"{name}-{ver}-py3-none-any.whl"
os.makedirs(f"{root}/simple/{name}")
os.makedirs(f"{root}/packages")
with zipfile.ZipFile(f"{root}/packages/{whl}", "w") as z:
    for p, b in files.items():
        z.writestr(p, b)
sha = hashlib.sha256(open(f"{root}/packages/{whl}", "rb").read()).hexdigest()
open(f"{root}/simple/index.html", "w").write(f'<a href="{name}/">{name}</a>\n')
open(f"{root}/simple/{name}/index.html", "w").write(f'<a href="../../packages/{whl}#sha256={sha}">{whl}</a>\n')
"#;

/// The issue's done-when, as written: `pip install` in a sandbox allowed
/// only `pypi.internal:443`, the name pinned to 127.0.0.5, against an
/// HTTPS index there. pip is configured for nothing but the index URL and
/// the test CA; the proxy comes from the environment. A second index on
/// pypi.org is tried too and refused, so the verdict lists both what was
/// reached and what was not.
#[test]
fn pip_install_from_allowed_local_index() {
    require_root!(); // port 443
    if !have("pip") {
        common::skip("no pip on the host (Debian: python3-pip, in scripts/test.sh's PACKAGES)");
        return;
    }
    let dir = common::TempDir::new("egress-pip");
    certs(dir.path(), &["pypi.internal"]);
    std::fs::create_dir(dir.join("index")).unwrap();
    let st = Command::new("python3").args(["-c", INDEX_PY]).arg(dir.join("index/www")).status().unwrap();
    assert!(st.success(), "building the index failed");
    // The sandbox writes here as its own root, which is not the host's.
    std::fs::create_dir(dir.join("site")).unwrap();
    std::fs::set_permissions(dir.join("site"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = dir.join("index/access.log");
    let _srv = serve(&dir.join("index/www"), "127.0.0.5", 443, Some(dir.path()), &log);

    // PIP_CONFIG_FILE=/dev/null: no pip.conf of the host's applies.
    let (v, code) = run(
        dir.path(),
        &[
            "--network=allow=pypi.internal:443",
            "--add-host",
            "pypi.internal:127.0.0.5",
            "--env",
            "PIP_CONFIG_FILE=/dev/null",
        ],
        "pip install --no-cache-dir --disable-pip-version-check --no-input --retries 0 --timeout 30 \
           --cert /t/ca.pem --index-url https://pypi.internal/simple/ --extra-index-url https://pypi.org/simple/ \
           --target /t/site huskdemo \
         && PYTHONPATH=/t/site python3 -c 'import huskdemo; print(huskdemo.GREETING)'",
    );
    assert_eq!(code, 0, "{}\n{:#}", out(&v), v["network"]);
    assert!(common::stdout_of(&v).contains("hello from the local index"), "{}", out(&v));
    let served = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(served.contains("GET /packages/huskdemo-0.1-py3-none-any.whl"), "{served}");
    let d = destination(&v, "pypi.internal", 443).unwrap_or_else(|| panic!("{:#}", v["network"]));
    assert!(d["connections"].as_u64() >= Some(1) && d["bytes_down"].as_u64() > Some(988), "{d}");
    assert!(denied(&v, "pypi.org", "not_allowed").is_some(), "{:#}", v["network"]);
    assert_eq!(v["network"]["rules"], serde_json::json!(["pypi.internal:443"]));
}

/// An npm registry of one package under `root/npm`: the packument
/// `npm/huskdemo` (plain JSON, as registries serve it) and its tarball,
/// whose URL names `base`.
const NPM_PY: &str = r#"
import base64, hashlib, io, json, os, sys, tarfile
root, base = sys.argv[1], sys.argv[2]
os.makedirs(f"{root}/npm")
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    for name, data in [("package/package.json", b'{"name": "huskdemo", "version": "0.1.0", "main": "index.js"}\n'),
                       ("package/index.js", b'module.exports = "hello from the local registry";\n')]:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(data))
tgz = buf.getvalue()
open(f"{root}/npm/huskdemo-0.1.0.tgz", "wb").write(tgz)
dist = {"tarball": f"{base}/npm/huskdemo-0.1.0.tgz", "shasum": hashlib.sha1(tgz).hexdigest(),
        "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}
doc = {"name": "huskdemo", "dist-tags": {"latest": "0.1.0"},
       "versions": {"0.1.0": {"name": "huskdemo", "version": "0.1.0", "main": "index.js", "dist": dist}}}
open(f"{root}/npm/huskdemo", "w").write(json.dumps(doc))
"#;

/// curl, git (clone over dumb HTTP) and npm (install from a registry) each
/// reach an allowed loopback server through the proxy with nothing but the
/// environment husk sets; Node's own `http` module, which ignores proxy
/// variables (before Node 24's NODE_USE_ENV_PROXY), finds no way out at all
/// rather than a way around the proxy.
#[test]
fn curl_git_node_honour_proxy_env() {
    for tool in ["curl", "git", "node", "npm"] {
        if !have(tool) {
            common::skip(&format!("no {tool} on the host (scripts/test.sh's PACKAGES has it)"));
            return;
        }
    }
    let dir = common::TempDir::new("egress-clients");
    let www = dir.join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("hello.txt"), "hello through the proxy\n").unwrap();
    // A bare repository served as plain files: git's "dumb" HTTP protocol
    // (info/refs from update-server-info), one commit.
    sh(
        dir.path(),
        "git init -q src && cd src && echo 'cloned through the proxy' > README \
         && git add README && git -c user.name=t -c user.email=t@t commit -qm one \
         && git clone -q --bare . ../www/repo.git && git -C ../www/repo.git update-server-info",
    );
    let port = free_port();
    let base = format!("http://web.test:{port}");
    let st = Command::new("python3").args(["-c", NPM_PY]).arg(&www).arg(&base).status().unwrap();
    assert!(st.success(), "building the npm registry failed");
    // The sandbox writes here as its own root, which is not the host's.
    std::fs::create_dir(dir.join("out")).unwrap();
    std::fs::set_permissions(dir.join("out"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = dir.join("access.log");
    let _srv = serve(&www, "127.0.0.1", port, None, &log);

    let script = format!(
        "set -e; export HOME=/t/out npm_config_cache=/t/out/npm-cache npm_config_update_notifier=false
         curl -sS {base}/hello.txt
         git clone -q {base}/repo.git /t/out/clone && cat /t/out/clone/README
         npm install --silent --no-audit --no-fund --registry {base}/npm/ --prefix /t/out/app huskdemo
         node -e 'console.log(require(\"/t/out/app/node_modules/huskdemo\"))'
         node -e 'require(\"http\").get(\"{base}/node-direct\", r => console.log(\"node reached\", r.statusCode)).on(\"error\", e => console.log(\"node direct:\", e.code))'"
    );
    let (v, code) =
        run(dir.path(), &[&format!("--network=allow=web.test:{port}"), "--add-host", "web.test:127.0.0.1"], &script);
    let o = out(&v);
    assert_eq!(code, 0, "{o}\n{:#}", v["network"]);
    for want in ["hello through the proxy", "cloned through the proxy", "hello from the local registry", "node direct:"]
    {
        assert!(o.contains(want), "no {want:?} in: {o}");
    }
    assert!(!o.contains("node reached"), "{o}");
    let served = std::fs::read_to_string(&log).unwrap_or_default();
    for want in ["GET /hello.txt", "GET /repo.git/info/refs", "GET /npm/huskdemo ", "GET /npm/huskdemo-0.1.0.tgz"] {
        assert!(served.contains(want), "the server never saw {want:?}: {served}");
    }
    assert!(!served.contains("/node-direct"), "{served}");
    let d = destination(&v, "web.test", port).unwrap_or_else(|| panic!("{:#}", v["network"]));
    assert!(d["connections"].as_u64() >= Some(4), "{d}");
}
