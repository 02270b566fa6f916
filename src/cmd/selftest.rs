//! `husk selftest`: arguments -> selftest::Options -> the report, printed as
//! a table (line by line, as probes finish) or one JSON document.

use crate::cli::{RuntimeArg, SelftestArgs};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::selftest::{self, Options, report, runner};
use std::path::PathBuf;

pub fn selftest(args: SelftestArgs, store_root: Option<PathBuf>) -> i32 {
    if args.list {
        for l in report::list() {
            crate::outln!("{l}");
        }
        return 0;
    }
    let husk = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(&format!("cannot find the husk binary itself (/proc/self/exe): {e}")),
    };
    let probe = match runner::find_probe(args.probe.as_deref(), &husk) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let runtime = args.runtime.map(|r| match r {
        RuntimeArg::Native => "native".to_string(),
        RuntimeArg::Runsc => "runsc".to_string(),
        RuntimeArg::Auto => "auto".to_string(),
    });
    let opts = Options {
        run: runner::RunConfig { husk, runtime, image: args.image.clone(), weaken: args.weaken.clone(), store_root },
        probe,
        only: args.only.clone(),
        fixture_base: std::env::temp_dir(),
    };
    let count = match selftest::select(&opts.only) {
        Ok(s) => s.len(),
        Err(e) => return fail(&e.to_string()),
    };
    let json = args.json;
    if !json {
        crate::outln!(
            "husk selftest: {count} probes, runtime {}, root {}, probe {}",
            opts.run.runtime.as_deref().unwrap_or("default"),
            opts.run.image.as_deref().unwrap_or("host"),
            opts.probe.display()
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
        Err(e) => {
            if json {
                let v = serde_json::json!({"selftest_version": selftest::SELFTEST_VERSION, "error": e.to_string(),
                                           "exit_code": EXIT_HUSK_FAILED});
                crate::outln!("{v}");
            }
            return fail(&e.to_string());
        }
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

fn fail(msg: &str) -> i32 {
    crate::errln!("husk selftest: {msg}");
    EXIT_HUSK_FAILED
}
