//! The build: stages walked in order, each instruction applied to the
//! image state; RUN, COPY and ADD make layers (RUN's from a cache hit when
//! the same step ran on the same parent before). The image record is
//! written last, so a failed build stores no image; layers it completed
//! stay for the next build's cache (`husk image prune` removes them when
//! no image refers to them).

use super::cache::{self, Cache};
use super::config::State;
use super::copy::{Context, CopyJob, StageTree, Tree};
use super::dockerfile::{CmdForm, CopyArgs, Inst, Instruction, ParseError};
use super::ignore::Ignore;
use super::words::{self, WordError};
use super::{diff, layer, run};
use crate::host::HostFacts;
use crate::image::digest::Digest;
use crate::image::store::{LayerRef, Record, Store, now_secs};
use crate::image::view::LayeredView;
use crate::image::{ImageError, Owners, normalize_name};
use crate::outcome::Termination;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub context: PathBuf,
    pub dockerfile: Option<PathBuf>,
    pub tag: String,
    pub build_args: Vec<(String, String)>,
    pub target: Option<String>,
    pub no_cache: bool,
    pub store_root: PathBuf,
    /// How FROM pulls an image the store lacks.
    pub registry: crate::spec::RegistrySpec,
    /// `--network allow=`: RUN steps reach what these rules allow, through
    /// the egress proxy `husk run` uses; `None`: no network.
    pub egress: Option<crate::net::EgressSpec>,
    /// Where RUN steps' output goes while they run.
    pub step_output: run::StepOutput,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("{file}:{line}: {why}")]
    At { file: String, line: usize, why: String },
    #[error("{file}:{line}: RUN failed with exit code {code}: {text}{tail}")]
    RunFailed { file: String, line: usize, code: i32, text: String, tail: String },
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Image(#[from] ImageError),
}

impl BuildError {
    /// The exit code a failing RUN's own status gives (else 125).
    pub fn exit_code(&self) -> i32 {
        match self {
            BuildError::RunFailed { code, .. } if *code > 0 => 1,
            _ => crate::outcome::EXIT_HUSK_FAILED,
        }
    }
}

/// One line of progress (plain text or a `--json` event).
#[derive(Debug, Clone, Serialize)]
pub struct StepEvent {
    pub step: usize,
    pub total: usize,
    pub line: usize,
    pub instruction: String,
    pub cached: bool,
    pub seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<Digest>,
    /// Something the step did not do as written (HEALTHCHECK, ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BuildReport {
    pub name: String,
    pub id: Digest,
    pub config: Digest,
    pub layers: Vec<Digest>,
    pub steps: usize,
    pub cached: usize,
    pub seconds: f64,
}

struct Stage {
    alias: Option<String>,
    state: State,
}

struct Build<'a> {
    opts: &'a BuildOptions,
    store: &'a Store,
    host: HostFacts,
    owners: Owners,
    file: String,
    escape: char,
    context: Context,
    cache: Cache,
    work: PathBuf,
    global_args: BTreeMap<String, String>,
    step: usize,
    total: usize,
    cached: usize,
}

fn at(file: &str, line: usize) -> impl Fn(String) -> BuildError + '_ {
    move |why| BuildError::At { file: file.to_string(), line, why }
}

fn word_at(file: &str, line: usize) -> impl Fn(WordError) -> BuildError + '_ {
    move |e| BuildError::At { file: file.to_string(), line, why: e.to_string() }
}

/// Builds the image `opts` describes; `progress` sees each step as it ends.
pub fn build(opts: &BuildOptions, progress: &mut dyn FnMut(&StepEvent)) -> Result<BuildReport, BuildError> {
    let t0 = Instant::now();
    let name = normalize_name(&opts.tag)?;
    let ctx_meta = std::fs::metadata(&opts.context)
        .map_err(|e| BuildError::Input(format!("build context {}: {e}; give a directory", opts.context.display())))?;
    if !ctx_meta.is_dir() {
        return Err(BuildError::Input(format!("build context {} is not a directory", opts.context.display())));
    }
    let df_path = opts.dockerfile.clone().unwrap_or_else(|| opts.context.join("Dockerfile"));
    let bytes = crate::userfile::read("-f", &df_path, super::dockerfile::MAX_DOCKERFILE)
        .map_err(|e| BuildError::Input(e.to_string()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| BuildError::Input(format!("{}: not UTF-8 text", df_path.display())))?;
    let file = df_path.display().to_string();
    let df = super::dockerfile::parse(&file, &text)?;
    let ignore = match crate::userfile::read(".dockerignore", &opts.context.join(".dockerignore"), 1 << 20) {
        Ok(b) => Ignore::parse(&String::from_utf8_lossy(&b)),
        Err(crate::userfile::UserFileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ignore::default()
        }
        Err(e) => return Err(BuildError::Input(e.to_string())),
    };
    let context = Context::open(&opts.context, ignore)
        .map_err(|e| BuildError::Input(format!("build context {}: {e}", opts.context.display())))?;

    let store = Store::open(&opts.store_root)?;
    // Shared, like an import: prune waits until the record is written, so
    // nothing this build publishes or reuses is removed meanwhile.
    let _lock = store.lock_store(false)?;
    let _ = store.sweep_tmp();
    let mut host = HostFacts::probe();
    host.store_root = opts.store_root.clone();
    let owners = crate::image::root::owners_for(&host, None);
    let work = opts.store_root.join("tmp").join(format!("build-{}-{}", std::process::id(), crate::ids::new_id()));
    sweep_builds(&opts.store_root.join("tmp"));
    std::fs::create_dir(&work).map_err(|e| BuildError::Input(format!("{}: {e}", work.display())))?;
    // Held while the build lives: a later build sweeps the directory of a
    // killed one (its lock is free) and never one still running.
    let _work_lock = std::fs::File::open(&work)
        .ok()
        .and_then(|f| nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).ok());
    let cache = Cache::open(&opts.store_root)?;

    let insts = select_stages(&df.instructions, opts.target.as_deref(), &file)?;
    let total = insts.len();
    let mut b = Build {
        opts,
        store: &store,
        host,
        owners,
        file: file.clone(),
        escape: df.escape,
        context,
        cache,
        work: work.clone(),
        global_args: BTreeMap::new(),
        step: 0,
        total,
        cached: 0,
    };
    let result = b.run_all(&insts, progress);
    let _ = remove_work(&work);
    let state = result?;

    let config = state.config_json();
    let config_digest = Digest::of(&config);
    let manifest = state.manifest_json(&config);
    let manifest_digest = Digest::of(&manifest);
    store.put_blob(&config_digest, &config)?;
    store.put_blob(&manifest_digest, &manifest)?;
    let platform = match &state.variant {
        Some(v) => format!("{}/{}/{v}", state.os, state.architecture),
        None => format!("{}/{}", state.os, state.architecture),
    };
    let rec = Record {
        name: name.clone(),
        manifest: Some(manifest_digest.clone()),
        config: config_digest.clone(),
        platform,
        source: format!("{}{}", crate::image::store::BUILT_PREFIX, opts.context.display()),
        pulled: None,
        layers: state.layers.clone(),
        imported_at: now_secs(),
    };
    store.write_record(&rec)?;
    Ok(BuildReport {
        name,
        id: manifest_digest,
        config: config_digest,
        layers: state.diff_ids(),
        steps: b.step,
        cached: b.cached,
        seconds: crate::outcome::round3(t0.elapsed().as_secs_f64()),
    })
}

/// Removes the working directories of builds that were killed (their
/// lock is free); a failure leaves them for `husk image prune`.
fn sweep_builds(tmp: &Path) {
    let Ok(rd) = std::fs::read_dir(tmp) else { return };
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().starts_with("build-") {
            continue;
        }
        let Ok(f) = std::fs::File::open(e.path()) else { continue };
        if let Ok(_lock) = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            let _ = remove_work(&e.path());
        }
    }
}

fn remove_work(work: &Path) -> Result<(), nix::errno::Errno> {
    let parent = nix::fcntl::open(
        work.parent().unwrap_or(Path::new("/")),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let name = work.file_name().map(|n| n.as_encoded_bytes().to_vec()).unwrap_or_default();
    crate::image::fsutil::remove_tree(std::os::fd::AsFd::as_fd(&parent), &crate::image::fsutil::cname(&name))
}

/// The instructions to run: global ARGs, then every stage up to the
/// target (by name or index), or all.
fn select_stages(all: &[Instruction], target: Option<&str>, file: &str) -> Result<Vec<Instruction>, BuildError> {
    let Some(t) = target else { return Ok(all.to_vec()) };
    let t = t.to_ascii_lowercase();
    let mut stage = 0usize;
    let mut end = None;
    for (i, ins) in all.iter().enumerate() {
        if let Inst::From { alias, .. } = &ins.inst {
            if end.is_some() {
                return Ok(all[..i].to_vec());
            }
            if alias.as_deref() == Some(t.as_str()) || t == stage.to_string() {
                end = Some(i);
            }
            stage += 1;
        }
    }
    match end {
        Some(_) => Ok(all.to_vec()),
        None => Err(BuildError::Input(format!("--target {t}: {file} has no stage named {t}"))),
    }
}

impl Build<'_> {
    fn run_all(&mut self, insts: &[Instruction], progress: &mut dyn FnMut(&StepEvent)) -> Result<State, BuildError> {
        let mut stages: Vec<Stage> = Vec::new();
        let mut cur: Option<Stage> = None;
        let mut args: BTreeMap<String, String> = BTreeMap::new();
        for ins in insts {
            let t = Instant::now();
            self.step += 1;
            let mut cached = false;
            let mut layer = None;
            let file = self.file.clone();
            let err = at(&file, ins.line);
            match (&ins.inst, cur.as_mut()) {
                (Inst::Arg(decls), None) => {
                    for (k, default) in decls {
                        let v = self.arg_value(k, default.as_deref(), &self.global_args.clone(), ins.line)?;
                        if let Some(v) = v {
                            self.global_args.insert(k.clone(), v);
                        }
                    }
                }
                (Inst::From { image, alias, platform }, _) => {
                    if let Some(done) = cur.take() {
                        stages.push(done);
                    }
                    let image =
                        words::expand(image, &self.global_args, self.escape).map_err(word_at(&self.file, ins.line))?;
                    if let Some(p) = platform {
                        let p =
                            words::expand(p, &self.global_args, self.escape).map_err(word_at(&self.file, ins.line))?;
                        let host = crate::image::oci::host_platform().to_string();
                        if !host.starts_with(&p) {
                            return Err(err(format!(
                                "FROM --platform={p}: husk builds for this host's platform ({host}) only"
                            )));
                        }
                    }
                    let state = self.from(&image, &stages).map_err(|e| err(e.to_string()))?;
                    args = BTreeMap::new();
                    cur = Some(Stage { alias: alias.clone(), state });
                }
                (_, None) => return Err(err("instruction before FROM".into())),
                (inst, Some(stage)) => {
                    let (c, l) = self.apply(inst, ins, stage, &stages, &mut args)?;
                    cached = c;
                    layer = l;
                }
            }
            if cached {
                self.cached += 1;
            }
            progress(&StepEvent {
                step: self.step,
                total: self.total,
                line: ins.line,
                instruction: crate::image::digest::truncate(&ins.text, 200),
                cached,
                seconds: crate::outcome::round3(t.elapsed().as_secs_f64()),
                layer,
                warning: matches!(ins.inst, Inst::Healthcheck(_)).then(|| {
                    "HEALTHCHECK is ignored: the OCI image config husk writes has no health check (buildah does \
                     the same); run the check yourself, e.g. with husk exec"
                        .to_string()
                }),
            });
        }
        cur.map(|s| s.state).ok_or_else(|| BuildError::Input("no stage to build".into()))
    }

    /// An ARG's value: --build-arg, else its default, else (in a stage)
    /// the global ARG of the same name.
    fn arg_value(
        &self,
        k: &str,
        default: Option<&str>,
        vars: &BTreeMap<String, String>,
        line: usize,
    ) -> Result<Option<String>, BuildError> {
        if let Some((_, v)) = self.opts.build_args.iter().rev().find(|(n, _)| n == k) {
            return Ok(Some(v.clone()));
        }
        match default {
            Some(d) => Ok(Some(words::expand(d, vars, self.escape).map_err(word_at(&self.file, line))?)),
            None => Ok(self.global_args.get(k).cloned()),
        }
    }

    fn from(&self, image: &str, stages: &[Stage]) -> Result<State, ImageError> {
        if image.eq_ignore_ascii_case("scratch") {
            return Ok(State::scratch());
        }
        let lower = image.to_ascii_lowercase();
        if let Some(s) = stages.iter().rev().find(|s| s.alias.as_deref() == Some(lower.as_str())) {
            return Ok(s.state.clone());
        }
        let name = crate::image::root::stored_name(
            self.store,
            image,
            crate::spec::PullPolicy::Missing,
            &self.opts.registry,
            self.owners,
            false,
        )?;
        let rec = self.store.find(&name)?;
        let config = self.store.get_blob(&rec.config)?;
        State::from_image(&config, rec.layers.clone())
            .map_err(|e| ImageError::Config(format!("image {name}: its config does not parse: {e}")))
    }

    /// Variables for expansion: ARGs in scope, ENV over them.
    fn vars(state: &State, args: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut v = args.clone();
        for (k, val) in &state.env {
            v.insert(k.clone(), val.clone());
        }
        v
    }

    fn apply(
        &mut self,
        inst: &Inst,
        ins: &Instruction,
        stage: &mut Stage,
        stages: &[Stage],
        args: &mut BTreeMap<String, String>,
    ) -> Result<(bool, Option<Digest>), BuildError> {
        let line = ins.line;
        let file = self.file.clone();
        let err = at(&file, line);
        let vars = Self::vars(&stage.state, args);
        let x = |w: &str| words::expand(w, &vars, self.escape).map_err(word_at(&self.file, line));
        let st = &mut stage.state;
        match inst {
            Inst::Arg(decls) => {
                for (k, default) in decls {
                    if let Some(v) = self.arg_value(k, default.as_deref(), &vars, line)? {
                        args.insert(k.clone(), v);
                    }
                }
                st.add_history(&format!("ARG {}", ins.text.split_once(' ').map(|x| x.1).unwrap_or("")), true);
            }
            Inst::Env(pairs) => {
                for (k, v) in pairs {
                    let v = x(v)?;
                    st.set_env(k, &v);
                }
                st.add_history(&ins.text, true);
            }
            Inst::Label(pairs) => {
                for (k, v) in pairs {
                    st.labels.insert(x(k)?, x(v)?);
                }
                st.add_history(&ins.text, true);
            }
            Inst::Workdir(w) => {
                let w = x(w)?;
                let joined = if w.starts_with('/') {
                    w
                } else {
                    format!("{}/{w}", if st.workdir.is_empty() { "" } else { st.workdir.trim_end_matches('/') })
                };
                st.workdir = crate::rootfs::resolve::normalize_target(&joined)
                    .map(|t| format!("/{t}"))
                    .map_err(|e| err(format!("WORKDIR {joined}: {e}")))?;
                st.add_history(&ins.text, true);
            }
            Inst::User(u) => {
                st.user = x(u)?;
                st.add_history(&ins.text, true);
            }
            Inst::Cmd(c) => {
                st.cmd = Some(self.argv(c, &st.shell));
                st.add_history(&ins.text, true);
            }
            Inst::Entrypoint(c) => {
                st.entrypoint = Some(self.argv(c, &st.shell));
                // Docker: ENTRYPOINT resets a CMD inherited from the base.
                st.cmd = None;
                st.add_history(&ins.text, true);
            }
            Inst::Expose(ports) => {
                for p in ports {
                    let p = x(p)?;
                    let full = if p.contains('/') { p.to_ascii_lowercase() } else { format!("{p}/tcp") };
                    let (num, proto) = full.split_once('/').unwrap_or((&full, "tcp"));
                    let ok =
                        num.split('-').all(|n| n.parse::<u16>().is_ok()) && matches!(proto, "tcp" | "udp" | "sctp");
                    if !ok {
                        return Err(err(format!("EXPOSE {p}: expected PORT[/tcp|udp|sctp]")));
                    }
                    st.exposed.insert(full);
                }
                st.add_history(&ins.text, true);
            }
            Inst::Shell(s) => {
                st.shell = s.clone();
                st.add_history(&ins.text, true);
            }
            Inst::StopSignal(s) => {
                st.stop_signal = Some(x(s)?);
                st.add_history(&ins.text, true);
            }
            Inst::Volume(paths) => {
                for p in paths {
                    let p = x(p)?;
                    if !p.starts_with('/') {
                        return Err(err(format!("VOLUME {p}: give an absolute path")));
                    }
                    st.volumes.insert(p);
                }
                st.add_history(&ins.text, true);
            }
            Inst::Healthcheck(_) => {}
            Inst::Run(c) => {
                let argv = self.argv(c, &st.shell);
                let (cached, layer) = self.run_step(argv, &ins.text, line, st, args)?;
                st.add_history(&ins.text, false);
                return Ok((cached, Some(layer)));
            }
            Inst::Copy(a) | Inst::Add(a) => {
                let what = if matches!(inst, Inst::Add(_)) { "ADD" } else { "COPY" };
                let (cached, layer) = self.copy_step(what, a, line, &vars, stage, stages)?;
                stage.state.add_history(&ins.text, false);
                return Ok((cached, Some(layer)));
            }
            Inst::From { .. } => unreachable!("handled by run_all"),
        }
        Ok((false, None))
    }

    fn argv(&self, c: &CmdForm, shell: &[String]) -> Vec<String> {
        match c {
            CmdForm::Exec(v) => v.clone(),
            CmdForm::Shell(s) => shell.iter().cloned().chain(std::iter::once(s.clone())).collect(),
        }
    }

    fn layer_dirs(&self, st: &State) -> Vec<PathBuf> {
        st.layers.iter().rev().map(|l| self.store.layer_dir(&l.diff_id, &self.owners)).collect()
    }

    fn run_step(
        &mut self,
        argv: Vec<String>,
        text: &str,
        line: usize,
        st: &mut State,
        args: &BTreeMap<String, String>,
    ) -> Result<(bool, Digest), BuildError> {
        // Build args reach the command as environment, under the image's
        // own ENV (which wins, as in Docker), and are not kept in the image.
        let mut env: Vec<(String, String)> = args
            .iter()
            .filter(|(k, _)| !st.env.iter().any(|(e, _)| e == *k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.extend(st.env.iter().cloned());
        let key = cache::run_key(&st.diff_ids(), &argv, &env, &st.user, &st.workdir, &self.owners);
        if !self.opts.no_cache
            && let Some(hit) = self.cache.get(&key)
            && self.store.has_layer(&hit.diff_id, &self.owners)
        {
            st.layers.push(hit.layer_ref());
            return Ok((true, hit.diff_id));
        }
        let upper = self.work.join(format!("run-{}", self.step));
        let dirs = self.layer_dirs(st);
        let outcome = run::run(run::RunJob {
            host: &self.host,
            layers: &dirs,
            label: &format!("build step {}", self.step),
            argv,
            env,
            workdir: (!st.workdir.is_empty()).then(|| st.workdir.clone()),
            user: (!st.user.is_empty()).then(|| st.user.clone()),
            owners: self.owners,
            upper: &upper,
            egress: self.opts.egress.clone(),
            output: self.opts.step_output,
        })
        .map_err(|e| at(&self.file, line)(e.to_string()))?;
        if outcome.termination != Termination::Exited || outcome.status != Some(0) {
            let code = outcome.exit_code();
            let mut tail = String::new();
            // stdout's tail, then stderr's: the error usually comes last.
            for s in [&outcome.stdout, &outcome.stderr].into_iter().flatten() {
                let t = s.text.trim_end();
                if !t.is_empty() {
                    let lines: Vec<&str> = t.lines().collect();
                    let from = lines.len().saturating_sub(20);
                    tail.push_str(&format!("\n  | {}", lines[from..].join("\n  | ")));
                }
            }
            if let Some(e) = &outcome.error {
                tail.push_str(&format!("\n  husk: {}", e.message));
            }
            return Err(BuildError::RunFailed { file: self.file.clone(), line, code, text: text.to_string(), tail });
        }
        let tar_path = self.work.join(format!("layer-{}.tar", self.step));
        let mut tar =
            layer::create(&tar_path).map_err(|e| at(&self.file, line)(format!("{}: {e}", tar_path.display())))?;
        diff::write_upper(&upper.join("u"), diff::Unshift::new(self.owners), &mut tar)
            .map_err(|e| at(&self.file, line)(format!("reading the step's changes: {e}")))?;
        let lt =
            layer::finish(tar, &tar_path).map_err(|e| at(&self.file, line)(format!("{}: {e}", tar_path.display())))?;
        let _ = remove_work(&upper);
        layer::publish(self.store, &lt, &self.owners, &self.opts.tag)?;
        let _ = std::fs::remove_file(&tar_path);
        let entry = cache::Entry { diff_id: lt.diff_id.clone(), size: lt.size };
        let _ = self.cache.put(&key, &entry);
        st.layers.push(entry.layer_ref());
        Ok((false, lt.diff_id))
    }

    fn copy_step(
        &mut self,
        what: &'static str,
        a: &CopyArgs,
        line: usize,
        vars: &BTreeMap<String, String>,
        stage: &mut Stage,
        stages: &[Stage],
    ) -> Result<(bool, Digest), BuildError> {
        let err = at(&self.file, line);
        let x = |w: &str| words::expand(w, vars, self.escape).map_err(word_at(&self.file, line));
        let srcs: Vec<String> = a.srcs.iter().map(|s| x(s)).collect::<Result<_, _>>()?;
        let dest_raw = x(&a.dest)?;
        let st = &stage.state;
        let dest_abs = if dest_raw.starts_with('/') {
            dest_raw.clone()
        } else {
            format!("{}/{dest_raw}", st.workdir.trim_end_matches('/'))
        };
        let norm = crate::rootfs::resolve::normalize_target(&dest_abs)
            .map_err(|e| err(format!("{what} destination {dest_raw}: {e}")))?;
        let dest = if dest_raw.ends_with('/') || dest_raw == "." { format!("/{norm}/") } else { format!("/{norm}") };
        let chmod = match &a.chmod {
            Some(m) => Some(
                u32::from_str_radix(&x(m)?, 8)
                    .ok()
                    .filter(|m| *m <= 0o7777)
                    .ok_or_else(|| err(format!("{what} --chmod={m}: expected an octal mode like 0644")))?,
            ),
            None => None,
        };
        let view =
            LayeredView::open(&self.layer_dirs(st)).map_err(|e| err(format!("opening the image's layers: {e}")))?;
        let owner = match &a.chown {
            Some(c) => chown(&x(c)?, &view).map_err(|why| err(format!("{what} --chown={c}: {why}")))?,
            None => (0, 0),
        };
        let unshift = diff::Unshift::new(self.owners);
        let parent_meta = |p: &str| -> Option<(u32, u32, u32)> {
            if st.layers.is_empty() {
                return None;
            }
            let s = view.lstat(&format!("/{p}"))?;
            if nix::sys::stat::SFlag::from_bits_truncate(s.st_mode) & nix::sys::stat::SFlag::S_IFMT
                != nix::sys::stat::SFlag::S_IFDIR
            {
                return None;
            }
            let (uid, gid) = unshift.map(s.st_uid, s.st_gid);
            Some((s.st_mode & 0o7777, uid, gid))
        };
        let job = CopyJob { what, srcs: &srcs, dest: &dest, owner, chmod, parent_meta: &parent_meta };
        let tar_path = self.work.join(format!("layer-{}.tar", self.step));
        let mut tar = layer::create(&tar_path).map_err(|e| err(format!("{}: {e}", tar_path.display())))?;
        let stage_tree;
        let tree: &dyn Tree = match &a.from {
            None => &self.context,
            Some(f) => {
                let f = x(f)?.to_ascii_lowercase();
                let found = stages
                    .iter()
                    .enumerate()
                    .rev()
                    .find(|(i, s)| s.alias.as_deref() == Some(f.as_str()) || i.to_string() == f);
                let Some((_, s)) = found else {
                    return Err(err(format!(
                        "{what} --from={f}: no earlier stage of that name (images as --from are not supported yet)"
                    )));
                };
                let dirs = self.layer_dirs(&s.state);
                stage_tree =
                    StageTree { name: f.clone(), view: LayeredView::open(&dirs).map_err(|e| err(e.to_string()))? };
                &stage_tree
            }
        };
        if what == "ADD" {
            super::add::add(tree, &job, &mut tar).map_err(|e| err(e.to_string()))?;
        } else {
            super::copy::copy(tree, &job, &mut tar).map_err(|e| err(e.to_string()))?;
        }
        let lt = layer::finish(tar, &tar_path).map_err(|e| err(format!("{}: {e}", tar_path.display())))?;
        let present = self.store.has_layer(&lt.diff_id, &self.owners);
        layer::publish(self.store, &lt, &self.owners, &self.opts.tag)?;
        let _ = std::fs::remove_file(&tar_path);
        stage.state.layers.push(cache::Entry { diff_id: lt.diff_id.clone(), size: lt.size }.layer_ref());
        Ok((present && !self.opts.no_cache, lt.diff_id))
    }
}

/// A `--chown` name the image does not know.
#[derive(Debug, thiserror::Error)]
enum NoSuchOwner {
    #[error("no user {0:?} in the image's /etc/passwd")]
    User(String),
    #[error("no group {0:?} in the image's /etc/group")]
    Group(String),
}

/// `--chown=USER[:GROUP]`: numbers, or names from the image's passwd/group.
fn chown(spec: &str, view: &LayeredView) -> Result<(u32, u32), NoSuchOwner> {
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let lookup = |file: &str, name: &str| -> Option<(u32, u32)> {
        let text = view.read_file(file)?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name) && f.len() >= 4).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
    };
    let (uid, primary) = match u.parse::<u32>() {
        Ok(n) => (n, n),
        Err(_) => lookup("/etc/passwd", u).ok_or_else(|| NoSuchOwner::User(u.to_string()))?,
    };
    let gid = match g {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => lookup("/etc/group", g).map(|(gid, _)| gid).ok_or_else(|| NoSuchOwner::Group(g.to_string()))?,
        },
    };
    Ok((uid, gid))
}

impl cache::Entry {
    pub fn layer_ref(&self) -> LayerRef {
        LayerRef {
            diff_id: self.diff_id.clone(),
            blob: Some(self.diff_id.clone()),
            size: self.size,
            media_type: layer::MEDIA_TAR.into(),
        }
    }
}
