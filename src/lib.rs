//! husk: disposable Linux sandboxes for one command.
//!
//! The library holds everything testable; `main.rs` only parses, dispatches
//! and exits. A run flows: `cli` -> `spec::Spec` -> `host::HostFacts` ->
//! `plan::Plan::build` -> `backend::select` -> spawn + supervise ->
//! `outcome::Outcome` -> verdict.
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod backend;
pub mod build;
pub mod capability;
pub mod capture;
pub mod cgroup;
pub mod cli;
pub mod cmd;
pub mod copy;
pub mod files;
pub mod host;
pub mod idrange;
pub mod ids;
pub mod image;
pub mod isolation;
pub mod kernel;
pub mod mcp;
pub mod net;
pub mod oci;
pub mod outcome;
pub mod paths;
pub mod plan;
pub mod print;
pub mod procref;
pub mod redact;
pub mod request;
pub mod rootfs;
pub mod sandbox;
pub mod seccomp;
pub mod selftest;
pub mod serve;
pub mod spawn;
pub mod spec;
pub mod step;
pub mod stream;
pub mod supervise;
pub mod sync;
#[allow(unsafe_code)]
pub mod sys;
pub mod tty;
pub mod units;
pub mod userfile;
pub mod userns;
pub mod users;
pub mod warm;
