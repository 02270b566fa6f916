//! `husk gc`: removes what runs that died before their own cleanup left
//! behind. One small function per resource kind, each returning its part
//! of the report.

use crate::backend::runsc::gc::RunscGcReport;
use crate::cli::GcArgs;
use serde::Serialize;
use std::path::Path;

#[derive(Serialize, Debug, Default)]
pub struct Report {
    pub runsc: RunscGcReport,
}

/// Leftovers of runsc runs: sandboxes still alive, runsc's container
/// state, husk's run directories.
pub fn gc_runsc(state_dir: Option<&Path>) -> RunscGcReport {
    match crate::backend::runsc::config::state_dir(state_dir) {
        Ok(state) => crate::backend::runsc::gc::gc_runsc(&state),
        Err(e) => RunscGcReport { errors: vec![e], ..Default::default() },
    }
}

pub fn gc(args: GcArgs, state_dir: Option<&Path>) -> i32 {
    let report = Report { runsc: gc_runsc(state_dir) };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let r = &report.runsc;
        for id in &r.removed {
            println!("removed runsc container {id}");
        }
        for pid in &r.killed {
            println!("killed runsc sandbox pid {pid}");
        }
        for id in &r.running {
            println!("kept runsc run {id}: its husk is still running");
        }
        for e in &r.errors {
            eprintln!("husk: gc: {e}");
        }
        println!("runsc: {} removed, {} still running", r.removed.len(), r.running.len());
    }
    if report.runsc.errors.is_empty() { 0 } else { 1 }
}
