//! `husk run --copy-in HOST:PATH / --copy-out PATH:HOST`: args -> one
//! `sandbox::copy::run_with_copies` call (create, copy in, exec, copy
//! out, destroy) -> the verdict printed. The sandbox is a live one for the
//! length of the run, so the copies are `husk cp`'s own and a copy-out
//! still sees the command's files after the command ended.

use crate::cli::RunArgs;
use crate::cli::report::{check_verdict_file, report, report_with};
use crate::cli::{CreateArgs, ProcessArgs};
use crate::outcome::{ErrorReport, Outcome};
use crate::paths::{Paths, PathsError};
use crate::sandbox::CreateOptions;
use crate::sandbox::copy::{HostCopy, RunWithCopies, run_with_copies};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The sandbox's lease between the steps of the run (each copy and the
/// exec renew it; it never runs out while the command runs). It only
/// matters if husk run is stopped without a chance to remove the sandbox
/// and its hang-up went unseen.
const RUN_LEASE: Duration = Duration::from_secs(60);

/// The label `husk ls` shows on such a sandbox while the run lasts.
const LABEL: (&str, &str) = ("husk.run", "copy");

pub fn run(args: RunArgs, paths: &Result<Paths, PathsError>, t_start: u64) -> i32 {
    let mut p = args.process.clone();
    if let Err(e) = check_verdict_file(&mut p) {
        return report(&Outcome::setup_failed(e.into()), "", "none", None, &p);
    }
    let create = match create_options(&args, &p) {
        Ok(o) => o,
        Err(e) => return report(&Outcome::setup_failed(e), "", "none", None, &p),
    };
    let tap = match crate::cli::report::stream_tap(&p) {
        Ok(t) => t,
        Err(e) => return report(&Outcome::setup_failed(e), "", "none", None, &p),
    };
    let req = RunWithCopies {
        create,
        copy_in: args.copy_in.iter().map(|c| HostCopy { host: c.host.clone(), path: c.path.clone() }).collect(),
        copy_out: args.copy_out.iter().map(|c| HostCopy { host: c.host.clone(), path: c.path.clone() }).collect(),
        exec: crate::spec::ExecSpec {
            argv: args.command.clone(),
            env: Vec::new(),
            user: p.user.clone(),
            workdir: None,
            timeout: p.timeout,
            kill_grace: p.kill_grace,
            capture: (p.json || p.json_stream).then_some(p.output_limit),
            tty: p.tty,
        },
        t_start,
        tap: tap.as_ref(),
    };
    let ran = run_with_copies(paths, req);
    crate::cli::report::stream_done(tap);
    let Some(rec) = &ran.sandbox else {
        return report(&ran.outcome, "", "none", None, &p);
    };
    let mut extra = BTreeMap::new();
    extra.insert("copies", json!(ran.copies));
    report_with(&ran.outcome, &rec.id, &rec.backend, Some(&rec.isolation), &p, &extra)
}

/// The run's sandbox: its own flags as create takes them (env, user and
/// secrets; the command's timeout and output bounds belong to the exec).
fn create_options(args: &RunArgs, p: &ProcessArgs) -> Result<CreateOptions, ErrorReport> {
    let create = CreateArgs {
        sandbox: args.sandbox.clone(),
        env: p.env.clone(),
        env_file: p.env_file.clone(),
        user: p.user.clone(),
        ttl: RUN_LEASE,
        max_lifetime: None,
        name: None,
        label: Vec::new(),
        concurrent: false,
        warm: None,
        session: None,
        ready_cmd: None,
        secrets: p.secrets.clone(),
        ready_timeout: Duration::from_secs(60),
        json: false,
        pool: None,
        server: None,
        pool_fallback: false,
        from_snapshot: None,
    };
    let mut opts = crate::cli::spec::create_options(&create).map_err(ErrorReport::from)?;
    opts.labels.insert(LABEL.0.into(), LABEL.1.into());
    Ok(opts)
}

/// Which of `husk run`'s paths: with copies the run is a live sandbox's.
pub fn wants_copies(args: &RunArgs) -> bool {
    !args.copy_in.is_empty() || !args.copy_out.is_empty()
}
