//! `husk pull REF`, `husk login REGISTRY`, `husk logout REGISTRY`.

use crate::cli::{LoginArgs, LogoutArgs, PullArgs, RegistryArgs};
use crate::host::HostFacts;
use crate::image::import::{ImportOptions, Stored};
use crate::image::pull::{Event, PullOptions, parse_platform, pull};
use crate::image::reference::Reference;
use crate::image::registry::{Client, ClientOptions, creds};
use crate::image::root::owners_for;
use crate::image::{ImageError, Limits, Store};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use serde_json::json;
use std::io::Read;
use std::sync::Arc;

fn client_options(a: &RegistryArgs) -> Result<ClientOptions, ImageError> {
    Ok(ClientOptions::new(&a.insecure_registry, &a.registry_ca, &a.registry_mirror)?)
}

fn store_of(paths: &Result<Paths, PathsError>) -> Result<Store, ImageError> {
    let paths = paths.as_ref().map_err(|e| ImageError::Store { path: "?".into(), why: e.to_string() })?;
    Store::open(&paths.root)
}

pub fn pull_cmd(a: PullArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let json = a.json;
    match run_pull(a, paths) {
        Ok(()) => 0,
        Err(e) => {
            if json {
                // The stream's last line, verdict-shaped like every --json
                // failure, still tagged as pull's `error` event.
                let report = crate::outcome::ErrorReport::new(crate::step::Phase::Pull, e.to_string());
                let extra = [("event", json!("error"))].into_iter().collect();
                crate::cli::report::json_failure(report, extra, false);
            }
            crate::errln!("husk: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

fn run_pull(a: PullArgs, paths: &Result<Paths, PathsError>) -> Result<(), ImageError> {
    let r = Reference::parse(&a.reference)?;
    let platform = parse_platform(&a.platform).map_err(|e| ImageError::Platform(e.to_string()))?;
    let store = store_of(paths)?;
    let host = HostFacts::probe();
    let id_range = match &a.id_range {
        Some(s) => Some(crate::userns::parse_range(s).map_err(|e| ImageError::Source(e.to_string()))?),
        None => None,
    };
    let owners = owners_for(&host, id_range);
    let tty = nix::unistd::isatty(std::io::stderr()).unwrap_or(false);
    let progress: Option<crate::image::pull::Progress> = if a.json {
        Some(Arc::new(|e: Event| crate::outln!("{}", serde_json::to_string(&e).unwrap_or_default())))
    } else if a.quiet {
        None
    } else {
        // One line per layer event; on a TTY the layers' live bars
        // (ImportOptions::progress) replace the per-layer lines.
        Some(Arc::new(move |e: Event| match e {
            Event::Resolved { reference, digest, platform, layers } => {
                crate::errln!("{reference}: {digest} ({platform}, {layers} layers)")
            }
            Event::Downloading { .. } | Event::Downloaded { .. } if tty => {}
            Event::Downloading { digest, size } => crate::errln!("{}: downloading {}", digest.short(), mib(size)),
            Event::Downloaded { digest, size } => crate::errln!("{}: downloaded {}", digest.short(), mib(size)),
        }))
    };
    let opts = PullOptions {
        platform,
        client: client_options(&a.registry)?,
        progress,
        import: ImportOptions {
            name: None,
            limits: Limits { max_layer_bytes: a.max_layer_size, ..Limits::default() },
            owners,
            progress: tty && !a.json && !a.quiet,
            // As an explicit import: stored layers are checked (quickly)
            // against their manifests and unpacked again if damaged.
            stored: Stored::Check,
            replace: Vec::new(),
            expect_id: None,
        },
    };
    let rep = pull(&store, &r, &opts)?;
    if a.json {
        let mut v = serde_json::to_value(&rep).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("event".into(), json!("result"));
            o.insert("reference".into(), json!(r.to_string()));
            o.insert("registry".into(), json!(r.registry));
            o.insert("repository".into(), json!(r.repository));
            o.insert("tag".into(), json!(r.tag));
            o.insert("digest".into(), json!(rep.manifest));
        }
        crate::outln!("{v}");
    } else if a.quiet {
        crate::outln!("{}", rep.name);
    } else {
        let digest = rep.manifest.as_ref().map(|d| d.to_string()).unwrap_or_default();
        crate::outln!(
            "pulled {} ({digest}; {} layers: {} downloaded, {} already stored; {:.2}s)",
            rep.name,
            rep.layers.len(),
            rep.extracted,
            rep.reused,
            rep.seconds
        );
    }
    Ok(())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

pub fn login_cmd(a: LoginArgs, paths: &Result<Paths, PathsError>) -> i32 {
    match run_login(a, paths) {
        Ok(msg) => {
            crate::outln!("{msg}");
            0
        }
        Err(e) => {
            crate::errln!("husk: login: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

/// Why `husk login` stored nothing.
#[derive(Debug, thiserror::Error)]
enum LoginError {
    #[error("{given:?} is not a registry HOST[:PORT] ({source})")]
    Registry { given: String, source: crate::image::reference::ReferenceError },
    #[error("pass the password (or token) on stdin with --password-stdin")]
    NoPasswordStdin,
    #[error("reading stdin: {0}")]
    Stdin(std::io::Error),
    #[error("the user name and password must not be empty")]
    Empty,
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Client(#[from] crate::image::registry::RegistryError),
    #[error(transparent)]
    Creds(#[from] creds::CredsError),
}

fn run_login(a: LoginArgs, paths: &Result<Paths, PathsError>) -> Result<String, LoginError> {
    let registry = Reference::parse(&format!("{}/x", a.registry.trim_end_matches('/')))
        .map_err(|source| LoginError::Registry { given: a.registry.clone(), source })?
        .registry;
    if !a.password_stdin {
        return Err(LoginError::NoPasswordStdin);
    }
    let mut pw = String::new();
    std::io::stdin().take(64 << 10).read_to_string(&mut pw).map_err(LoginError::Stdin)?;
    let pw = pw.trim_end_matches(['\n', '\r']).to_string();
    if pw.is_empty() || a.username.is_empty() {
        return Err(LoginError::Empty);
    }
    let store = store_of(paths)?;
    if !a.no_verify {
        let cred = creds::Credential { user: a.username.clone(), secret: pw.clone(), origin: "the given user".into() };
        let api = Reference::parse(&format!("{registry}/x")).map_err(ImageError::from)?;
        let client = Client::new(api.api_host(), "", Some(cred), &client_options(&a.registry_args)?)?;
        client.ping()?;
    }
    let file = creds::save(&registry, &a.username, &pw, store.root())?;
    // Say which it was: a person reading "stored" could not tell whether
    // the registry accepted the credentials.
    let how = if a.no_verify { "not checked (--no-verify)" } else { "accepted by the registry" };
    Ok(format!("login to {registry} {how}; stored in {}", file.display()))
}

pub fn logout_cmd(a: LogoutArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let res = store_of(paths)
        .map_err(|e| e.to_string())
        .and_then(|s| creds::forget(&a.registry, s.root()).map_err(|e| e.to_string()));
    match res {
        Ok(true) => {
            crate::outln!("removed credentials for {}", a.registry);
            0
        }
        Ok(false) => {
            crate::errln!("husk: logout: no stored credentials for {}", a.registry);
            EXIT_HUSK_FAILED
        }
        Err(e) => {
            crate::errln!("husk: logout: {e}");
            EXIT_HUSK_FAILED
        }
    }
}
