"""Shared by the benchmark scripts' embedded Python (bench-api.sh,
bench-warm.sh): the summary of timed samples and its printed table, so
every report counts medians and p90s the same way.

    sys.path.insert(0, SCRIPTS_DIR); from benchstat import summarize, table
"""
import json
import statistics


def summarize(raw, out, **extra):
    """Median, p90 and count per non-empty list of milliseconds in `raw`,
    plus the load average and `extra`; written with `raw` to `out` (JSON).
    """
    summary = {
        k: {"median": statistics.median(v), "p90": sorted(v)[int(0.9 * (len(v) - 1))], "n": len(v)}
        for k, v in raw.items()
        if isinstance(v, list) and v
    }
    summary.update(extra)
    with open("/proc/loadavg") as f:
        summary["load"] = f.read().split()[:3]
    with open(out, "w") as f:
        json.dump({"raw": raw, "summary": summary}, f, indent=1)
    return summary


def table(title, summary, labels, width, digits=3, ratios=(), ratio_digits=2):
    """Prints `title` with the load, one line per labelled key present, then
    median ratios `a / b` for the pairs in `ratios` that were both measured.
    """
    print(f"{title}, load {' '.join(summary['load'])}):")
    for k, name in labels.items():
        if k in summary:
            s = summary[k]
            print(f"  {name:{width}s} median {s['median']:8.{digits}f} ms  p90 {s['p90']:8.{digits}f} ms  (n={s['n']})")
    for a, b in ratios:
        if a in summary and b in summary:
            print(f"  {a} / {b}: {summary[a]['median'] / summary[b]['median']:.{ratio_digits}f}x")
