//! `ps [--format table|json] ID [PS_ARGS...]`: the container's processes
//! (every pid of its cgroup). `json` prints the pids as a JSON array, what
//! containerd's shim reads for `ctr task ps` / the CRI's ListPids; `table`
//! runs the host's `ps` (PS_ARGS, default `-ef`) and keeps its header and
//! the lines whose PID column is one of them, as runc does.

use super::OciError;
use super::state::Store;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct PsArgs {
    #[arg(long, short = 'f', default_value = "table")]
    pub format: String,
    pub id: String,
    /// Options for ps(1) (table format; default -ef).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub ps_args: Vec<String>,
}

pub fn ps(store: &Store, a: &PsArgs) -> Result<(), OciError> {
    let record = store.load(&a.id)?;
    let pids = super::cgroups::pids(&record.cgroups);
    match a.format.as_str() {
        "json" => {
            crate::outln!("{}", serde_json::json!(pids));
            Ok(())
        }
        "table" => table(&pids, &a.ps_args),
        other => Err(OciError::Refused(format!("--format {other:?}: use table or json"))),
    }
}

fn table(pids: &[i32], ps_args: &[String]) -> Result<(), OciError> {
    let args: Vec<String> = if ps_args.is_empty() { vec!["-ef".into()] } else { ps_args.to_vec() };
    let out = std::process::Command::new("ps")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| OciError::io("running ps(1) (install procps)", e))?;
    if !out.status.success() {
        return Err(OciError::Refused(format!(
            "ps {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = filter_table(&text, pids)
        .ok_or_else(|| OciError::Refused(format!("ps {}: its output has no PID column", args.join(" "))))?;
    for line in lines {
        crate::outln!("{line}");
    }
    Ok(())
}

/// ps(1)'s header and the lines whose PID column is one of `pids`; None
/// when the header names no PID column.
fn filter_table<'a>(text: &'a str, pids: &[i32]) -> Option<Vec<&'a str>> {
    let mut lines = text.lines();
    let header = lines.next()?;
    let col = header.split_whitespace().position(|h| h == "PID")?;
    let mut out = vec![header];
    out.extend(lines.filter(|l| {
        l.split_whitespace().nth(col).and_then(|p| p.parse::<i32>().ok()).is_some_and(|p| pids.contains(&p))
    }));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PID column is found by its header (ps -ef puts UID first), so a
    /// PPID or a number in the command is never taken for it.
    #[test]
    fn table_keeps_the_header_and_the_containers_pids_only() {
        let text = "UID          PID    PPID  C STIME TTY          TIME CMD\n\
                    root           1       0  0 10:00 ?        00:00:01 /sbin/init\n\
                    root         412       1  0 10:00 ?        00:00:00 sleep 1000\n\
                    root         413     412  0 10:00 ?        00:00:00 sh -c echo 412\n";
        let got = filter_table(text, &[412]).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[1].contains("sleep 1000"));
        assert!(filter_table("USER COMMAND\nroot x\n", &[1]).is_none());
    }
}
