"""Report files from merged results: index.html (self-contained), junit.xml, summary.md, results.json.

The page is a scoreboard: a column per runner and machine (``xla:cuda@H100 jax0.11.2``) with its
environment one click away, a family x column matrix, a primitive x column view, the known
divergences and allowances used, error histograms and, with a history database, the trend per
column and what changed since the previous run.
"""
from __future__ import annotations

import collections
import hashlib
import html
import math
import os
import re
import time
import xml.etree.ElementTree as ET

from .merge import Results, family
from .schema import BAD, OUTCOMES, SCHEMA_VERSION, Record, dumps

COLORS = {"pass": "#2e7d32", "pass-with-allowance": "#7cb342", "fail": "#c62828", "crash": "#6a1b9a",
          "timeout": "#ad1457", "backend-unsupported": "#9e9e9e", "reference-unsupported": "#bdbdbd",
          "known-divergence": "#ef6c00"}
SERIES_COLORS = {"pass": COLORS["pass"], "allowance": COLORS["pass-with-allowance"],
                 "known": COLORS["known-divergence"], "fail": COLORS["fail"]}
# Which outcome a primitive x column cell shows when its cases differ: the most severe.
SEVERITY = ("fail", "crash", "timeout", "known-divergence", "pass-with-allowance", "pass",
            "backend-unsupported", "reference-unsupported")
HISTORY_KEYS = ("new_failures", "fixed", "changed", "new_cases", "removed")
_DTYPE = re.compile(r"^(bool|u?int\d+|float\d+(_\w+)?|bfloat16|complex\d+|[fiuc]\d+|bf16)$")


def write_report(results: Results, out_dir: str, history: dict | None = None) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    return {
        "results.json": write_json(results, os.path.join(out_dir, "results.json"), history),
        "junit.xml": write_junit(results, os.path.join(out_dir, "junit.xml")),
        "summary.md": write_markdown(results, os.path.join(out_dir, "summary.md"), history),
        "index.html": write_html(results, os.path.join(out_dir, "index.html"), history),
    }


# ------------------------------------------------------------------------------ shared words
def fmt_number(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return ("inf" if x > 0 else "-inf") if math.isinf(x) else f"{x:.4g}"
    return str(x)


def fmt_time(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "?"


def fmt_duration(s) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    return f"{s // 3600} h {s // 60 % 60:02d} min" if s >= 3600 else (f"{s // 60} min {s % 60:02d} s" if s >= 60
                                                                       else f"{s} s")


def error_measure(r: Record) -> str:
    """"N elements differ (max 12 ulp, max abs err 3e-07)"; ulp only where the outputs are floats."""
    parts = []
    ulp = r.max_ulp
    if ulp is not None:
        parts.append(f"max {fmt_number(ulp)} ulp" if math.isfinite(ulp) else "NaN against a number")
    if r.max_abs_err is not None:
        parts.append(f"max abs err {fmt_number(r.max_abs_err)}")
    n = r.mismatches or 0
    head = f"{n} element{'s differ' if n != 1 else ' differs'}" if n else "no element differs"
    return head + (f" ({', '.join(parts)})" if parts else "")


def mode_of(r: Record) -> str:
    modes = r.modes or []
    return ", ".join(dict.fromkeys(str(m) for m in modes)) if modes else ""


def describe(r: Record) -> str:
    """What happened, in one sentence, from the record's fields (its ``detail`` alone is often the
    compliance mode, e.g. "ULP(8)", for allowance and divergence records)."""
    o, detail, mode = r.outcome, (r.detail or "").strip(), mode_of(r)
    kd = r.known_divergence or {}
    raw = r.raw_outcome
    extra = f"; {detail}" if detail and detail not in (mode, *(r.modes or [])) else ""
    if o == "pass-with-allowance":
        return (f"{mode or 'the compliance mode'} not met as computed: {error_measure(r)}; every such element "
                f"agrees with the reference recomputed under allowance {r.allowance}{extra}")
    if o == "known-divergence" and raw in ("timeout", "crash"):
        return f"the backend's {raw} is explained by known divergence {kd.get('id')}{extra}"
    if o == "known-divergence":
        also = (f"; allowance {r.allowance} explains the elements it can" if r.allowance else "")
        return f"{mode or 'the compliance mode'} not met: {error_measure(r)}; matches known divergence " \
               f"{kd.get('id')}{also}{extra}"
    if o == "fail" and (r.mismatches or r.max_ulp is not None):
        return f"{mode or 'the compliance mode'} not met: {error_measure(r)}{extra}"
    return detail or o


def first_mismatch_text(fm) -> str:
    if not fm:
        return ""
    out = f"output {fm.get('output', 0)} at index {fm.get('index')}" if fm.get("index") is not None else ""
    return f"{out}: reference {fm.get('reference')}, backend {fm.get('backend')}".lstrip(": ")


def divergent_eqn_text(d) -> str:
    if not d:
        return ""
    if d.get("eqn"):
        s = f"equation {d.get('index')}: {d['eqn']}"
        if d.get("mode"):
            s += f" ({d['mode']} not met"
            s += f", max {fmt_number(d['max_ulp'])} ulp)" if d.get("max_ulp") is not None else ")"
        return s + (f"; first mismatch {first_mismatch_text(d['first_mismatch'])}" if d.get("first_mismatch") else "")
    return str(d.get("note") or d.get("error") or d)


def search_summary(r: Record) -> str:
    """How the record's seed was found when a hypothesis seed search ran (conformance/search.py),
    else ''."""
    if (r.examples or 1) <= 1:
        return ""
    how = f"hypothesis searched {r.examples} seeds from base seed {r.base_seed}"
    ffs = r.first_failing_seed
    if ffs is not None:
        how += f"; first failing seed {ffs}" + (f", shrunk to {r.seed}" if ffs != r.seed else "")
    return how


def failure_text(r: dict, output_chars: int = 2000) -> str:
    """What a failing record says: what happened, error measures, the tail of the backend's output,
    the seed search and the reproducer (JUnit reports and the pytest plugin's failure message)."""
    lines = [f"detail: {describe(r)}"]
    if r.first_mismatch:
        lines.append(f"first mismatch: {first_mismatch_text(r.first_mismatch)}")
    if r.first_divergent_eqn:
        lines.append(f"first divergent eqn: {divergent_eqn_text(r.first_divergent_eqn)}")
    if r.output:
        lines.append("output:\n" + str(r.output)[-output_chars:])
    search = search_summary(r)
    if search:
        lines.append(search)
    lines.append(f"reproduce: {r.reproducer}")
    return "\n".join(lines)


def primitive_row(r: Record) -> str:
    """The primitive view's row of a record: its case id without a trailing shape or input-set part
    (``lax_special/lgamma/float32/3x5`` -> ``lax_special/lgamma/float32``): one primitive, kernel or
    program at one dtype."""
    parts = r.case.split("/")
    if len(parts) >= 4 and not all(_DTYPE.match(p) for p in parts[-1].split("-")):
        parts = parts[:-1]
    return "/".join(parts)


def worst(outcomes) -> str:
    return min(outcomes, key=SEVERITY.index)


def anchor(prefix: str, *parts) -> str:
    """An HTML id: readable, unique (a hash of the parts), safe in a URL fragment."""
    text = "\x1f".join(str(p) for p in parts)
    slug = re.sub(r"[^A-Za-z0-9_]+", "-", "-".join(str(p) for p in parts)).strip("-")[:48]
    return f"{prefix}-{slug}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"


def record_anchor(r: Record) -> str:
    return anchor("r", r.column, r.case, r.seed)


def known_divergences(results: Results) -> dict:
    """{id: {"summary", "link", "columns": Counter}} of the known divergences the records name."""
    out: dict = {}
    for r in results.records:
        kd = r.known_divergence
        if r.outcome == "known-divergence" and kd:
            entry = out.setdefault(kd.get("id"), {"summary": kd.get("summary"), "link": kd.get("link"),
                                                  "columns": collections.Counter()})
            entry["columns"][r.column] += 1
    return dict(sorted(out.items(), key=lambda kv: str(kv[0])))


def allowances_used(results: Results) -> dict:
    """{allowance: Counter(column)} over pass-with-allowance records."""
    out: dict = collections.defaultdict(collections.Counter)
    for r in results.records:
        if r.outcome == "pass-with-allowance":
            out[r.allowance][r.column] += 1
    return dict(sorted(out.items(), key=lambda kv: str(kv[0])))


def primitive_view(results: Results) -> dict:
    """{row: {column: [records]}} (rows as primitive_row names them)."""
    view: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in results.records:
        view[primitive_row(r)][r.column].append(r)
    return dict(sorted(view.items()))


# ------------------------------------------------------------------------------------- JSON
def write_json(results: Results, path: str, history: dict | None = None) -> str:
    """Strict JSON (no Infinity/NaN: non-finite floats are the strings "inf", "-inf", "nan")."""
    doc = {"schema": SCHEMA_VERSION, "generated": time.time(), "sources": results.sources,
           "nonfinite_floats": "written as the strings 'inf', '-inf' and 'nan'",
           "machines": {mid: m.environment for mid, m in results.machines.items()},
           "columns": {cid: {"runner": c.runner, "device": c.device, "device_full": c.device_full, "jax": c.jax,
                             "machine": c.machine} for cid, c in results.columns.items()},
           "runs": results.runs(), "environments": results.environments,
           "summary": {col: dict(c) for col, c in results.counts().items()},
           "history": history, "results": results.records}
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(doc, indent=1))
    return path


# ------------------------------------------------------------------------------------ JUnit
def write_junit(results: Results, path: str) -> str:
    root = ET.Element("testsuites", name="jax-conformance")
    by_column = collections.defaultdict(list)
    for r in results.records:
        by_column[r.column].append(r)
    for col in results.column_ids:
        recs = by_column[col]
        c = collections.Counter(r.outcome for r in recs)
        suite = ET.SubElement(root, "testsuite", name=col, tests=str(len(recs)),
                              failures=str(c["fail"]), errors=str(c["crash"] + c["timeout"]),
                              skipped=str(c["backend-unsupported"] + c["reference-unsupported"] + c["known-divergence"]),
                              time=f"{sum((r.duration_s or 0) for r in recs):.3f}")
        for r in recs:
            tc = ET.SubElement(suite, "testcase", classname=f"{col}.{r.family}", name=r.case,
                               time=f"{(r.duration_s or 0):.4f}")
            o = r.outcome
            msg = f"{o}: {describe(r)}"[:500]
            if o == "fail":
                el = ET.SubElement(tc, "failure", message=msg, type=o)
                el.text = failure_text(r)
            elif o in ("crash", "timeout"):
                el = ET.SubElement(tc, "error", message=msg, type=o)
                el.text = failure_text(r)
            elif o in ("backend-unsupported", "reference-unsupported"):
                ET.SubElement(tc, "skipped", message=msg)
            elif o == "known-divergence":
                kd = r.known_divergence or {}
                ET.SubElement(tc, "skipped", message=f"known divergence {kd.get('id')}: {kd.get('link')}")
            elif o == "pass-with-allowance":
                props = ET.SubElement(tc, "properties")
                ET.SubElement(props, "property", name="allowance", value=str(r.allowance))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


# --------------------------------------------------------------------------------- Markdown
def _env_line(env: dict) -> str:
    return (f"JAX {env.get('jax')} / jaxlib {env.get('jaxlib')}, devices {env.get('devices')}, "
            f"host {env.get('host')}" + (f", driver {env['nvidia_driver']}" if env.get("nvidia_driver") else ""))


def history_lines(history: dict, limit: int = 30) -> list[str]:
    """The changes since the previous run as plain text lines (console and Markdown)."""
    if not history.get("has_previous"):
        return ["First run in this history database."]
    out = [f"Since the previous run ({history.get('previous_run')}): "
           + ", ".join(f"{k.replace('_', ' ')} {len(history.get(k) or [])}" for k in HISTORY_KEYS)]
    for key in HISTORY_KEYS:
        items = history.get(key) or []
        for it in items[:limit]:
            ulp = (f" (max ulp {fmt_number(it.get('max_ulp_before'))} -> {fmt_number(it.get('max_ulp'))})"
                   if key == "changed" and it.get("max_ulp_before") != it.get("max_ulp") else "")
            out.append(f"  {key.replace('_', ' ')}: {it['case']} on {it['column']}: "
                       f"{it.get('before') or '(none)'} -> {it.get('outcome') or '(removed)'}{ulp}")
        if len(items) > limit:
            out.append(f"  ... {len(items) - limit} more {key.replace('_', ' ')}")
    return out


def write_markdown(results: Results, path: str, history: dict | None = None) -> str:
    out = ["# jax-conformance summary", ""]
    for run in results.runs():
        env = results.machines[run["machine"]].environment
        out.append(f"- run {', '.join(run['run_ids']) or '?'} (machine {run['machine']}): {fmt_time(run['start'])}, "
                   f"{fmt_duration(run['duration_s'])}, {run['records']} records; {_env_line(env)}")
    if history:
        out += ["", "## Since the previous run", ""] + [f"- {line.strip()}" for line in history_lines(history)]
    cols = list(OUTCOMES)
    out += ["", "| column | total | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    counts = results.counts()
    for col in results.column_ids:
        c = counts[col]
        out.append(f"| {col} | {sum(c.values())} | " + " | ".join(str(c.get(o, 0)) for o in cols) + " |")
    out += ["", "## Family x column (pass / allowance / fail+crash+timeout / known / unsupported)", ""]
    columns = results.column_ids
    out += ["| family | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    m = results.matrix()
    for fam in results.families:
        cells = []
        for col in columns:
            c = m.get((fam, col))
            cells.append("" if not c else "{}/{}/{}/{}/{}".format(
                c["pass"], c["pass-with-allowance"], c["fail"] + c["crash"] + c["timeout"], c["known-divergence"],
                c["backend-unsupported"] + c["reference-unsupported"]))
        out.append(f"| {fam} | " + " | ".join(cells) + " |")
    allow = allowances_used(results)
    if allow:
        out += ["", "## Allowances used", "", "| allowance | column | cases |", "|---|---|---:|"]
        out += [f"| {a} | {col} | {n} |" for a, cs in allow.items() for col, n in sorted(cs.items())]
    known = known_divergences(results)
    if known:
        out += ["", "## Known divergences", ""]
        for kid, kd in known.items():
            where = ", ".join(f"{col} x{n}" for col, n in sorted(kd["columns"].items()))
            out.append(f"- **{kid}** ({where}): {kd['summary'] or ''} — {kd['link']}")
    big = results.largest_divergences()
    if big:
        out += ["", "## Largest divergences", "", "| case | column | outcome | max ulp | max abs err | first mismatch |",
                "|---|---|---|---:|---:|---|"]
        for r in big:
            out.append(f"| {r.case} | {r.column} | {r.outcome} | {fmt_number(r.max_ulp)} | "
                       f"{fmt_number(r.max_abs_err)} | {first_mismatch_text(r.first_mismatch)} |")
    bad = results.bad()
    if bad:
        out += ["", f"## Failures ({len(bad)})", ""]
        for r in bad[:200]:
            div = r.first_divergent_eqn or {}
            where = f"; first divergent eqn: `{div.get('eqn')}`" if div.get("eqn") else ""
            how = f" ({search_summary(r)})" if search_summary(r) else ""
            out.append(f"- **{r.outcome}** `{r.case}` on `{r.column}`: {describe(r)[:200]}"
                       f"{where}{how} — `{r.reproducer}`")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return path


# ------------------------------------------------------------------------------------- HTML
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#222}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}.bar{display:flex;height:14px;min-width:120px}
.bar span{display:block;height:14px}details{margin:2px 0}summary{cursor:pointer}
code,pre{font:12px ui-monospace,monospace;background:#f7f7f7}pre{padding:6px;white-space:pre-wrap;max-height:300px;overflow:auto}
.legend span{display:inline-block;padding:1px 6px;margin:2px;color:#fff;border-radius:3px}
th.col small{font-weight:normal;color:#555}
td.o{text-align:left;white-space:nowrap;font-size:12px}
td.o-pass{background:#e8f5e9}td.o-pass-with-allowance{background:#f1f8e9}td.o-known-divergence{background:#fff3e0}
td.o-fail,td.o-crash,td.o-timeout{background:#ffebee;font-weight:bold}
td.o-backend-unsupported,td.o-reference-unsupported{color:#777}
section{margin-top:18px}.changes li{margin:1px 0}svg text{font-family:system-ui,sans-serif}
"""


def _bar(c: collections.Counter) -> str:
    total = sum(c.values()) or 1
    spans = "".join(f'<span title="{o}: {c[o]}" style="width:{100 * c[o] / total:.1f}%;background:{COLORS[o]}"></span>'
                    for o in OUTCOMES if c.get(o))
    return f'<div class="bar">{spans}</div>'


def _histogram_svg(values: list[float], title: str) -> str:
    """Histogram of log2(1 + max ulp), counts on a log scale with a labelled y axis, as inline SVG."""
    bins = [0] * 26
    for v in values:
        b = 25 if v is None or math.isinf(v) or math.isnan(v) else min(24, int(math.log2(1 + v)))
        bins[b] += 1
    left, bw, base, height = 44, 14, 110, 90
    w, h = left + 26 * bw + 10, base + 34
    top = max(bins) or 1
    scale = math.log10(top) + 1 if top > 1 else 1     # decades from 1 to the tallest bin

    def y(n):
        return base - height * (math.log10(n) + (1 if top > 1 else 0)) / scale if n else base
    bars = []
    for i, n in enumerate(bins):
        label = "inf/nan" if i == 25 else f"[{2 ** i - 1}, {2 ** (i + 1) - 1})"
        bars.append(f'<rect x="{left + i * bw}" y="{y(n):.1f}" width="{bw - 2}" height="{base - y(n):.1f}" '
                    f'fill="#1565c0"><title>{label} ulp: {n} cases</title></rect>')
    yticks = []
    for k in range(int(math.log10(top)) + 1):
        n = 10 ** k
        yticks.append(f'<line x1="{left - 4}" y1="{y(n):.1f}" x2="{left}" y2="{y(n):.1f}" stroke="#888"/>'
                      f'<text x="{left - 6}" y="{y(n) + 3:.1f}" font-size="9" text-anchor="end">{n}</text>')
    xticks = "".join(f'<text x="{left + i * bw}" y="{base + 12}" font-size="9">{t}</text>'
                     for i, t in ((0, "0"), (4, "15"), (8, "255"), (16, "65k"), (25, "inf")))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="hist" width="{w}" height="{h}" role="img">'
            f'<title>{html.escape(title)}</title><text x="0" y="10" font-size="10">{html.escape(title)}</text>'
            f'<line x1="{left}" y1="{base}" x2="{w}" y2="{base}" stroke="#888"/>'
            f'<line x1="{left}" y1="{base - height}" x2="{left}" y2="{base}" stroke="#888"/>{"".join(yticks)}'
            f'<text x="8" y="{base - height / 2}" font-size="9" transform="rotate(-90 8 {base - height / 2})" '
            f'text-anchor="middle">cases (log)</text>{"".join(bars)}{xticks}'
            f'<text x="{left + 13 * bw}" y="{base + 26}" font-size="9" text-anchor="middle">max ulp per case '
            f'(log2 bins)</text></svg>')


def _trend_svg(points: list[dict], title: str) -> str:
    """Pass / allowance / known / fail counts of one column over the recorded runs, as inline SVG.
    ``points``: [{"run_id", "timestamp", "counts": {series: n}}] oldest first."""
    left, right, base, height = 44, 110, 120, 100
    n = len(points)
    w = max(left + max(1, n - 1) * 60 + right, 6 * len(title) + 10)
    top = max([max(p["counts"].values() or [0]) for p in points] + [1])
    step = 10 ** max(0, len(str(top)) - 1)
    top = -(-top // step) * step

    def x(i):
        return left + 10 + (i * 60 if n > 1 else 0)

    def y(v):
        return base - height * v / top
    parts = [f'<line x1="{left}" y1="{base}" x2="{w - right + 20}" y2="{base}" stroke="#888"/>',
             f'<line x1="{left}" y1="{base - height}" x2="{left}" y2="{base}" stroke="#888"/>']
    for k in range(5):
        v = top * k / 4
        parts.append(f'<text x="{left - 4}" y="{y(v) + 3:.1f}" font-size="9" text-anchor="end">{v:g}</text>'
                     f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right + 20}" y2="{y(v):.1f}" stroke="#eee"/>')
    for i, p in enumerate(points):
        when = time.strftime("%m-%d %H:%M", time.gmtime(p["timestamp"])) if p.get("timestamp") else ""
        parts.append(f'<text x="{x(i)}" y="{base + 11}" font-size="9" text-anchor="middle">#{i + 1}</text>'
                     f'<text x="{x(i)}" y="{base + 20}" font-size="8" text-anchor="middle">{when}</text>')
    for k, (series, color) in enumerate(SERIES_COLORS.items()):
        pts = [(x(i), y(p["counts"].get(series, 0)), p) for i, p in enumerate(points)]
        if n > 1:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                         f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b, _ in pts)}"/>')
        for a, b, p in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{color}"><title>{html.escape(series)} '
                         f'{p["counts"].get(series, 0)} in run {html.escape(str(p.get("run_id")))} '
                         f'({fmt_time(p.get("timestamp"))})</title></circle>')
        parts.append(f'<rect x="{w - right + 30}" y="{base - height + k * 14}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{w - right + 44}" y="{base - height + 9 + k * 14}" font-size="10">{series} '
                     f'{points[-1]["counts"].get(series, 0)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" width="{w}" height="{base + 24}" role="img">'
            f'<title>{html.escape(title)}</title><text x="0" y="10" font-size="10">{html.escape(title)}</text>'
            f'{"".join(parts)}</svg>')


def _link(target: str) -> str:
    """A divergence's link: an anchor when it is a URL, code otherwise (a file in this repository)."""
    e = html.escape
    if re.match(r"https?://", target or ""):
        return f'<a href="{e(target, quote=True)}">{e(target)}</a>'
    return f"<code>{e(str(target))}</code>"


def _record_html(r: Record) -> str:
    e = html.escape
    kd = r.known_divergence or {}
    rows = [("what happened", e(describe(r))), ("mode", e(mode_of(r))),
            ("allowance", f'<a href="#{anchor("al", r.allowance)}">{e(str(r.allowance))}</a>'
             if r.allowance else None),
            ("known divergence", f'<a href="#{anchor("kd", kd.get("id"))}">{e(str(kd.get("id")))}</a>'
             if kd else None),
            ("max ulp", e(fmt_number(r.max_ulp))), ("max abs err", e(fmt_number(r.max_abs_err))),
            ("mismatches", r.mismatches or None),
            ("first mismatch", e(first_mismatch_text(r.first_mismatch))),
            ("first divergent eqn", e(divergent_eqn_text(r.first_divergent_eqn))),
            ("backend outcome", e(r.raw_outcome or "")),
            ("seed", r.seed), ("base seed", r.base_seed), ("examples", r.examples),
            ("first failing seed", r.first_failing_seed), ("search", e(search_summary(r))),
            ("duration s", r.duration_s), ("run", e(str(r.run_id or ""))),
            ("reproducer", e(r.reproducer or ""))]
    body = "".join(f'<tr class="{k.replace(" ", "-")}"><th class="l">{k}</th><td class="l"><code>{v}</code></td></tr>'
                   for k, v in rows if v is not None and v != "")
    if r.output:
        body += f'<tr><th class="l">output</th><td class="l"><pre>{e(str(r.output)[-4000:])}</pre></td></tr>'
    return (f'<details class="rec" id="{record_anchor(r)}" data-outcome="{r.outcome}"><summary><b>'
            f'{e(r.outcome)}</b> <code>{e(r.case)}</code> on <code>{e(r.column)}</code></summary>'
            f"<table>{body}</table></details>")


def _column_header(results: Results, col: str) -> str:
    e = html.escape
    c = results.columns.get(col)
    if c is None:
        return f'<th class="col">{e(col)}</th>'
    return (f'<th class="col" title="{e(c.device_full)}"><a href="#{anchor("env", c.machine)}">{e(c.label)}</a>'
            f"<br><small>JAX {e(c.jax)}</small></th>")


def _primitive_cell(recs: list[Record]) -> str:
    e = html.escape
    if not recs:
        return "<td></td>"
    outcomes = collections.Counter(r.outcome for r in recs)
    w = worst(outcomes)
    first = next(r for r in sorted(recs, key=lambda r: r.case) if r.outcome == w)
    title = "; ".join(f"{o} {n}" for o, n in outcomes.items()) + " (" + ", ".join(sorted(r.case for r in recs))[:300] + ")"
    of = f" {outcomes[w]}/{len(recs)}" if len(recs) > 1 and outcomes[w] != len(recs) else ""
    if w == "pass-with-allowance":
        names = sorted({str(r.allowance) for r in recs if r.outcome == w})
        text = "allowance: " + ", ".join(f'<a href="#{anchor("al", a)}">{e(a)}</a>' for a in names)
    elif w == "known-divergence":
        ids = sorted({str((r.known_divergence or {}).get("id")) for r in recs if r.outcome == w})
        text = "known: " + ", ".join(f'<a href="#{anchor("kd", i)}">{e(i)}</a>' for i in ids)
    elif w in BAD:
        text = f'<a href="#{record_anchor(first)}">{e(w)}{of}</a>'
    elif w == "pass":
        text = f"pass{of}"
    else:
        text = f'<a href="#{record_anchor(first)}">unsupported</a>'
    return f'<td class="o o-{w}" title="{e(title)}">{text}</td>'


def _history_html(history: dict) -> str:
    """The counts of each kind of change first (each a link to its list), then the lists, collapsed
    except a short list of new failures."""
    e = html.escape
    if not history.get("has_previous"):
        return "<p>First run in this history database: the next run will list what changed.</p>"
    counts = " &middot; ".join(f'<a href="#hist-{key}">{key.replace("_", " ")} {len(history.get(key) or [])}</a>'
                               for key in HISTORY_KEYS)
    lists = []
    for key in HISTORY_KEYS:
        lst = history.get(key) or []
        lis = "".join(f"<li><code>{e(it['case'])}</code> on <code>{e(it['column'])}</code>: "
                      f"{e(str(it.get('before') or '(none)'))} &rarr; {e(str(it.get('outcome') or '(removed)'))}"
                      + (f" (max ulp {e(fmt_number(it.get('max_ulp_before')))} &rarr; {e(fmt_number(it.get('max_ulp')))})"
                         if key == "changed" and it.get("max_ulp_before") != it.get("max_ulp") else "")
                      + "</li>" for it in lst[:500])
        more = f"<li>... {len(lst) - 500} more in results.json</li>" if len(lst) > 500 else ""
        opened = " open" if key == "new_failures" and 0 < len(lst) <= 50 else ""
        lists.append(f'<details id="hist-{key}"{opened}><summary>{key.replace("_", " ")}: {len(lst)}</summary>'
                     f'<ul class="changes">{lis}{more}</ul></details>')
    return (f"<p>Run <code>{e(str(history.get('run')))}</code> against the previous run "
            f"<code>{e(str(history.get('previous_run')))}</code>: <b>{counts}</b></p>{''.join(lists)}")


def write_html(results: Results, path: str, history: dict | None = None) -> str:
    e = html.escape
    columns, fams, m = results.column_ids, results.families, results.matrix()
    counts = results.counts()
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>jax-conformance report</title>"
             f"<style>{_CSS}</style></head><body><h1>jax-conformance report</h1>"]
    # Runs: id, date, duration, per machine.
    parts.append(f'<section id="runs"><p>Generated {fmt_time(time.time())} from {len(results.sources)} result '
                 f'file(s), {len(results.records)} records.</p><table><tr><th class="l">run</th>'
                 '<th class="l">machine</th><th class="l">started</th><th>duration</th><th>records</th>'
                 '<th class="l">profile</th></tr>')
    for run in results.runs():
        env = results.machines[run["machine"]].environment
        parts.append(f'<tr><td class="l"><code>{e(", ".join(run["run_ids"]) or "?")}</code></td><td class="l">'
                     f'<a href="#{anchor("env", run["machine"])}">{e(run["machine"])}</a> '
                     f'({e(str(env.get("host")))}, JAX {e(str(env.get("jax")))})</td>'
                     f'<td class="l">{fmt_time(run["start"])}</td><td>{fmt_duration(run["duration_s"])}</td>'
                     f'<td>{run["records"]}</td><td class="l">{e(", ".join(run["profile"]))}</td></tr>')
    parts.append("</table></section>")
    parts.append('<p class="legend">' + "".join(f'<span style="background:{c}">{o}</span>' for o, c in COLORS.items())
                 + "</p>")
    # What changed, first.
    if history is not None:
        parts.append(f'<section id="changes"><h2>Since the previous run</h2>{_history_html(history)}</section>')
        if history.get("trend"):
            parts.append('<section id="trend"><h2>Trend per column</h2><p>Pass, allowance, known divergence and '
                         'fail (with crash and timeout) counts of each column in every recorded run (#1 the oldest; '
                         'a column missing from this run comes last).</p>')
            order = {c: i for i, c in enumerate(columns)}
            for col in sorted(history["trend"], key=lambda c: (order.get(c, len(order)), c)):
                parts.append(_trend_svg(history["trend"][col], col))
            parts.append("</section>")
    # Per-column totals.
    parts.append('<section id="columns"><h2>Columns (runner @ device, JAX version)</h2><table>'
                 '<tr><th class="l">column</th><th>total</th>' + "".join(f"<th>{o}</th>" for o in OUTCOMES) + "</tr>")
    for col in columns:
        c = counts[col]
        parts.append(f'<tr><td class="l"><a href="#{anchor("env", results.columns[col].machine)}">{e(col)}</a></td>'
                     f"<td>{sum(c.values())}</td>" + "".join(f"<td>{c.get(o, 0)}</td>" for o in OUTCOMES) + "</tr>")
    parts.append("</table></section>")
    # Family x column matrix: every cell links to its group in the details.
    parts.append('<section id="families"><h2>Family &times; column</h2><table id="matrix"><tr><th class="l">family</th>'
                 + "".join(_column_header(results, col) for col in columns) + "</tr>")
    for fam in fams:
        cells = []
        for col in columns:
            c = m.get((fam, col))
            if not c:
                cells.append("<td></td>")
                continue
            title = ", ".join(f"{o}: {c[o]}" for o in OUTCOMES if c.get(o))
            cells.append(f'<td class="cell" title="{e(title)}"><a href="#{anchor("d", fam, col)}">{_bar(c)}'
                         f'{c["pass"] + c["pass-with-allowance"]}/{sum(c.values())}</a></td>')
        parts.append(f'<tr><td class="l">{e(fam)}</td>{"".join(cells)}</tr>')
    parts.append("</table></section>")
    # Primitive x column.
    view = primitive_view(results)
    differing = {row: cols for row, cols in view.items()
                 if any(r.outcome not in ("pass", "backend-unsupported", "reference-unsupported")
                        for recs in cols.values() for r in recs)}
    parts.append('<section id="primitives"><h2>Primitive &times; column</h2><p>One row per primitive (or kernel, '
                 'program) and dtype, its cases of every shape together; a cell shows the most severe outcome '
                 f'of its cases. {len(differing)} of {len(view)} rows are not plain pass everywhere:</p>')

    def table(rows, table_id):
        out = [f'<table id="{table_id}"><tr><th class="l">case group</th>'
               + "".join(_column_header(results, col) for col in columns) + "</tr>"]
        for row in rows:
            out.append(f'<tr><td class="l"><code>{e(row)}</code></td>'
                       + "".join(_primitive_cell(view[row].get(col, [])) for col in columns) + "</tr>")
        return "".join(out) + "</table>"
    parts.append(table(list(differing), "primitive-view"))
    rest = [row for row in view if row not in differing]
    parts.append(f"<details><summary>{len(rest)} rows pass (or are unsupported) on every column</summary>"
                 f"{table(rest, 'primitive-view-pass')}</details></section>")
    # Known divergences and allowances: each summary once, each link as a link.
    known = known_divergences(results)
    parts.append('<section id="known"><h2>Known divergences</h2>')
    if known:
        parts.append('<table><tr><th class="l">id</th><th class="l">summary</th><th class="l">link</th>'
                     '<th class="l">records per column</th></tr>')
        for kid, kd in known.items():
            where = "<br>".join(f"{e(col)}: {n}" for col, n in sorted(kd["columns"].items()))
            parts.append(f'<tr id="{anchor("kd", kid)}"><td class="l"><code>{e(str(kid))}</code></td>'
                         f'<td class="l">{e(kd["summary"] or "")}</td><td class="l">{_link(kd["link"])}</td>'
                         f'<td class="l">{where}</td></tr>')
        parts.append("</table>")
    else:
        parts.append("<p>None matched.</p>")
    parts.append("</section>")
    allow = allowances_used(results)
    parts.append('<section id="allowances"><h2>Allowances used</h2>')
    if allow:
        parts.append('<table><tr><th class="l">allowance</th><th class="l">records per column</th></tr>')
        for name, cs in allow.items():
            parts.append(f'<tr id="{anchor("al", name)}"><td class="l"><code>{e(str(name))}</code></td><td class="l">'
                         + "<br>".join(f"{e(col)}: {n}" for col, n in sorted(cs.items())) + "</td></tr>")
        parts.append("</table><p>What each allowance permits, with its sources: <code>spec/allowances.py</code>.</p>")
    else:
        parts.append("<p>None used.</p>")
    parts.append("</section>")
    # Error distributions.
    parts.append('<section id="errors"><h2>Error distributions (max ULP per case, compared float outcomes)</h2>')
    for col in columns:
        vals = [r.max_ulp for r in results.records if r.column == col and r.outcome in
                ("pass", "pass-with-allowance", "fail", "known-divergence") and r.max_ulp is not None]
        if vals:
            parts.append(_histogram_svg(vals, f"{col}: {len(vals)} float cases"))
    parts.append("</section>")
    # Machines: each column's environment.
    parts.append('<section id="machines"><h2>Machines</h2>')
    for mid, mach in results.machines.items():
        cols = [c for c in columns if results.columns[c].machine == mid]
        rows = "".join(f'<tr><th class="l">{e(str(k))}</th><td class="l"><code>{e(str(v))}</code></td></tr>'
                       for k, v in mach.environment.items())
        env = mach.environment
        kinds = ", ".join(f"{n} x {k}" for k, n in (env.get("devices") or {}).items())
        parts.append(f'<div id="{anchor("env", mid)}"><h3>Machine {e(mid)}: host {e(str(env.get("host")))}, '
                     f'{e(kinds or "devices not recorded")}, JAX {e(str(env.get("jax")))}</h3><p>Columns: '
                     f'{e(", ".join(cols))}; runs {e(", ".join(mach.run_ids))}; workers {e(", ".join(mach.workers))}'
                     f"</p><table>{rows}</table></div>")
    parts.append("</section>")
    # Drill-down: one group per matrix cell, every record that is not a plain pass.
    parts.append('<section id="details"><h2>Details</h2>')
    groups = collections.defaultdict(list)
    for r in results.records:
        groups[(family(r), r.column)].append(r)
    for (fam, col), recs in sorted(groups.items()):
        shown = sorted((r for r in recs if r.outcome != "pass"),
                       key=lambda r: (SEVERITY.index(r.outcome), r.case))
        passed = len(recs) - len(shown)
        parts.append(f'<details id="{anchor("d", fam, col)}" class="group"><summary>{e(fam)} on {e(col)}: '
                     f"{passed} of {len(recs)} pass; {len(shown)} not plain pass</summary>"
                     + "".join(_record_html(r) for r in shown) + "</details>")
    parts.append("</section></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(parts))
    return path
