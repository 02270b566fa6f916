//! husk-bench-report: scripts/bench.sh's results -> docs/benchmarks.md, the
//! SVG chart, and the README's headline block.
//!
//!   husk-bench-report --results DIR --md docs/benchmarks.md --svg docs/benchmarks.svg [--readme README.md]
//!
//! DIR holds meta.json and the hyperfine --export-json files it names. The
//! README block sits between `<!-- bench:begin -->` and `<!-- bench:end -->`.

mod chart;
mod isolation;
mod markdown;
mod model;

use std::path::PathBuf;

struct Args {
    results: PathBuf,
    md: PathBuf,
    svg: PathBuf,
    readme: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut results, mut md, mut svg, mut readme) = (None, None, None, None);
    while let Some(a) = it.next() {
        let mut val = || it.next().map(PathBuf::from).ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--results" => results = Some(val()?),
            "--md" => md = Some(val()?),
            "--svg" => svg = Some(val()?),
            "--readme" => readme = Some(val()?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let need = |v: Option<PathBuf>, n: &str| v.ok_or(format!("{n} is required"));
    Ok(Args { results: need(results, "--results")?, md: need(md, "--md")?, svg: need(svg, "--svg")?, readme })
}

const USAGE: &str = "usage: husk-bench-report --results DIR --md FILE --svg FILE [--readme README.md]";

fn main() {
    if let Err(e) = run() {
        eprintln!("husk-bench-report: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args = parse_args().map_err(|e| format!("{e}\n{USAGE}"))?;
    let meta = model::load_meta(&args.results)?;
    let groups = model::load_groups(&args.results, &meta)?;
    let title = format!("husk vs peers: median, line = min..max ({}; {})", meta.date, short_cpu(&meta));
    chart::draw(&args.svg, &title, &groups)?;
    let svg_link = relative_link(&args.md, &args.svg);
    let md = markdown::page(&meta, &groups, &svg_link);
    std::fs::write(&args.md, md).map_err(|e| format!("{}: {e}", args.md.display()))?;
    if let Some(readme) = &args.readme {
        let text = std::fs::read_to_string(readme).map_err(|e| format!("{}: {e}", readme.display()))?;
        let block =
            markdown::readme_block(&meta, &groups, &relative_link(readme, &args.md), &relative_link(readme, &args.svg));
        let updated = markdown::replace_block(&text, &block).ok_or(format!(
            "{}: no `{}` ... `{}` block",
            readme.display(),
            markdown::BEGIN,
            markdown::END
        ))?;
        std::fs::write(readme, updated).map_err(|e| format!("{}: {e}", readme.display()))?;
    }
    eprintln!("wrote {} and {}", args.md.display(), args.svg.display());
    Ok(())
}

fn short_cpu(meta: &model::Meta) -> String {
    meta.host.iter().find(|(k, _)| k == "CPU").map(|(_, v)| v.clone()).unwrap_or_default()
}

/// `to` relative to the directory of `from` (both given relative to the
/// same directory, as the script does), for Markdown links.
fn relative_link(from: &std::path::Path, to: &std::path::Path) -> String {
    let from_dir = from.parent().map(|p| p.components().count()).unwrap_or(0);
    let common = from.parent().map(|p| to.starts_with(p)).unwrap_or(true);
    if common {
        let parent = from.parent().unwrap_or(std::path::Path::new(""));
        return to.strip_prefix(parent).unwrap_or(to).display().to_string();
    }
    format!("{}{}", "../".repeat(from_dir), to.display())
}

#[cfg(test)]
mod tests {
    use super::relative_link;
    use std::path::Path;

    #[test]
    fn links_are_relative_to_the_linking_file() {
        assert_eq!(relative_link(Path::new("docs/benchmarks.md"), Path::new("docs/benchmarks.svg")), "benchmarks.svg");
        assert_eq!(relative_link(Path::new("README.md"), Path::new("docs/benchmarks.md")), "docs/benchmarks.md");
    }
}
