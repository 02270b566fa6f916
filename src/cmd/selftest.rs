//! `husk selftest`: arguments -> selftest::Options -> the report, printed as
//! a table (line by line, as probes finish) or one JSON document.

use crate::cli::{RuntimeArg, SelftestArgs};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::selftest::{self, Options, report, runner};
use crate::step::Phase;
use std::path::PathBuf;

fn stored_image(
    reference: &str,
    policy: crate::spec::PullPolicy,
    remote: &crate::spec::RegistrySpec,
    root: Option<&std::path::Path>,
) -> Result<String, crate::image::ImageError> {
    let paths = crate::paths::Paths::from_cli(root, None)?;
    let store = crate::image::Store::open(&paths.root)?;
    // The id range the probes' runs will use (they inherit HUSK_ID_RANGE).
    let range = match std::env::var("HUSK_ID_RANGE") {
        Ok(v) => Some(
            crate::userns::parse_range(&v)
                .map_err(|e| crate::image::ImageError::Source(format!("HUSK_ID_RANGE: {e}")))?,
        ),
        Err(_) => None,
    };
    let owners = crate::image::root::owners_for(&crate::host::HostFacts::probe(), range);
    let progress = nix::unistd::isatty(std::io::stderr()).unwrap_or(false);
    crate::image::root::stored_name(&store, reference, policy, remote, owners, progress)
}

pub fn selftest(args: SelftestArgs, store_root: Option<PathBuf>) -> i32 {
    let json = args.json;
    let fail = |step: Phase, msg: &str| fail(step, msg, json);
    if args.list {
        for l in report::list() {
            crate::outln!("{l}");
        }
        return 0;
    }
    let husk = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(Phase::Selftest, &format!("cannot find the husk binary itself (/proc/self/exe): {e}")),
    };
    let probe = match runner::find_probe(args.probe.as_deref()) {
        Ok(p) => p,
        Err(e) => return fail(Phase::Selftest, &e.to_string()),
    };
    let runtime = args.runtime.map(|r| match r {
        RuntimeArg::Native => "native".to_string(),
        RuntimeArg::Runsc => "runsc".to_string(),
        RuntimeArg::Auto => "auto".to_string(),
    });
    let remote = crate::spec::RegistrySpec {
        platform: args.platform.clone(),
        insecure: args.registry.insecure_registry.clone(),
        ca_files: args.registry.registry_ca.clone(),
        mirrors: args.registry.registry_mirror.clone(),
    };
    // The image is resolved (imported or pulled per --pull) once, here:
    // every probe's run then finds it stored.
    let image = match &args.image {
        Some(r) => match stored_image(r, args.pull.into(), &remote, store_root.as_deref()) {
            Ok(name) => Some(name),
            Err(e) => return fail(Phase::Root, &format!("--image {r}: {e}")),
        },
        None => None,
    };
    let opts = Options {
        run: runner::RunConfig { husk, runtime, image, weaken: args.weaken.clone(), store_root },
        probe,
        only: args.only.clone(),
        fixture_base: std::env::temp_dir(),
    };
    let count = match selftest::select(&opts.only) {
        Ok(s) => s.len(),
        Err(e) => return fail(Phase::Arguments, &e.to_string()),
    };
    if !json {
        crate::outln!(
            "husk selftest: {count} probes, runtime {}, root {}, probe {}",
            opts.run.runtime.as_deref().unwrap_or("default"),
            opts.run.image.as_deref().unwrap_or("host"),
            opts.probe
        );
        if !opts.run.weaken.is_empty() {
            crate::outln!("WEAKENED RUN (test only): every sandbox gets {}", opts.run.weaken.join(" "));
        }
    }
    let mut header_done = false;
    let result = selftest::run(&opts, |r| {
        if json {
            return;
        }
        if !header_done {
            crate::outln!("{}", report::COLUMNS);
            header_done = true;
        }
        crate::outln!("{}", report::line(r));
    });
    let rep = match result {
        Ok(r) => r,
        Err(e) => return fail(Phase::Selftest, &e.to_string()),
    };
    if json {
        crate::print::json_line(&rep);
    } else {
        crate::outln!("sandbox defaults seen: {}", report::sandbox_line(&rep.isolation, &rep.limits));
        for l in report::footer(&rep) {
            crate::outln!("{l}");
        }
    }
    rep.exit_code
}

/// A selftest that could not run; with --json, the one failure shape of
/// every command (verdict-shaped, `selftest_version` added).
fn fail(step: Phase, msg: &str, json: bool) -> i32 {
    if json {
        let extra = [("selftest_version", serde_json::json!(selftest::SELFTEST_VERSION))].into_iter().collect();
        crate::cli::report::json_failure(crate::outcome::ErrorReport::new(step, msg), extra, false);
    }
    crate::errln!("husk selftest: {msg}");
    EXIT_HUSK_FAILED
}
