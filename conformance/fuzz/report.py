"""A campaign's summary: ``summary.md`` (counts per runner, one line per bucket with its reduced
size, XLA pass and reproducer), and the findings as results-schema records in ``results/`` that the
suite's reports render (``report/index.html``: reports/render.py)."""
from __future__ import annotations

import os

from .store import Store
from .suite import JsonlWriter, environment_line, results_record


def _bucket_rows(store: Store, summary: dict) -> list[dict]:
    findings = store.read_findings()
    rows = []
    for bucket, b in sorted(summary["buckets"].items(), key=lambda kv: (-kv[1]["occurrences"], kv[0])):
        doc = findings.get(bucket, {})
        rec = doc.get("reduced_record") or doc.get("record") or {}
        where = rec.get("first_divergent_eqn") or {}
        reduced = doc.get("reduced") or {}
        d = doc.get("dir") or ""
        repro = os.path.join(d, "reproducer_reduced.py" if reduced else "reproducer.py")
        rows.append({"bucket": bucket, "runner": b.get("runner"), "occurrences": b["occurrences"],
                     "first": (doc.get("unit") or {}).get("index"), "original": doc.get("original") or {},
                     "reduced": reduced, "passes": (doc.get("passes") or {}).get("responsible"),
                     "eqn": where.get("eqn") or where.get("note"), "detail": rec.get("detail"),
                     "reproducer": os.path.relpath(repro, store.out) if os.path.exists(repro) else None,
                     "record": rec, "shrink_failed": doc.get("shrink_failed")})
    return rows


def write_summary(store: Store, summary: dict, info: dict) -> dict:
    rows = _bucket_rows(store, summary)
    md = os.path.join(store.out, "summary.md")
    env = info.get("environment", {})
    lines = [f"# Fuzz campaign {summary['campaign_id']} ({summary['status']})", "",
             f"Runners {', '.join(info['runners'])}; families {', '.join(info['families'])}; seed {info['seed']}; "
             f"JAX {env.get('jax')} on {env.get('host')}; generator version {env.get('generator_version')}.", "",
             f"{summary['programs']} programs in {summary['seconds']:.0f} s "
             f"({summary['programs_per_s'] or 0:.2f} programs/s, {info.get('workers')} worker(s)); "
             f"{len(rows)} buckets.", "",
             "| runner | programs | explained | findings | buckets |", "|---|---|---|---|---|"]
    for runner, c in summary["counts"].items():
        lines.append(f"| {runner} | {c['programs']} | {c['passes']} | {c['findings']} | {c.get('buckets', 0)} |")
    new = set((summary.get("history") or {}).get("new_buckets") or [])
    if summary.get("history") is not None:
        lines += ["", f"New buckets (no earlier campaign in the history had them): {len(new)}"]
    lines += ["", "## Buckets (primitive x dtype x runner x symptom)", "",
              "| bucket | hits | first program | found as | reduced to | XLA pass | first divergent equation | reproducer |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, red = r["original"], r["reduced"]
        found = f"{o.get('ops')} ops, {o.get('elements')} elements" if o else ""
        small = (f"{red.get('eqns')} eqns ({red.get('ops')} ops), {red.get('elements')} elements, {red.get('seconds')} s"
                 if red else (f"not shrunk: {r['shrink_failed'][:80]}" if r["shrink_failed"] else ""))
        eqn = (r["eqn"] or "").replace("|", "\\|")[:100]
        lines.append(f"| {'**new** ' if r['bucket'] in new else ''}`{r['bucket']}` | {r['occurrences']} | {r['first']} | "
                     f"{found} | {small} | {', '.join(r['passes'] or []) or ''} | `{eqn}` | "
                     f"{r['reproducer'] or ''} |")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    files = {"summary.md": md}
    files.update(_report(store, rows, info))
    return files


def _report(store: Store, rows: list[dict], info: dict) -> dict:
    """One results record per bucket, rendered by the suite's reports."""
    from reports.merge import merge
    from reports.render import write_report
    path = os.path.join(store.out, "results", "fuzz.jsonl")
    if os.path.exists(path):
        os.unlink(path)
    if not rows:
        return {}
    w = JsonlWriter(path)
    env = info.get("environment", {})
    w.write(environment_line(worker="fuzz", profile=None, run_id=info["campaign_id"],
                             environment={"jax": env.get("jax"), "host": env.get("host"), "jaxlib": env.get("jaxlib")}))
    for r in rows:
        rec = r["record"]
        fields = {k: rec.get(k) for k in ("max_ulp", "max_abs_err", "mismatches", "first_mismatch",
                                          "first_divergent_eqn", "detail", "modes", "allowance", "output")
                  if rec.get(k) is not None}
        w.write(results_record(case=f"fuzz/{r['bucket']}", family="fuzz", runner=r["runner"] or "?",
                               outcome=rec.get("outcome") or "fail", seed=r["first"], run_id=info["campaign_id"],
                               worker="fuzz", jax_version=env.get("jax"),
                               reproducer=f"python {os.path.join(store.out, r['reproducer'])}" if r["reproducer"] else None,
                               **fields))
    w.close()
    report_dir = os.path.join(store.out, "report")
    write_report(merge([path]), report_dir)
    return {"report": os.path.join(report_dir, "index.html")}
