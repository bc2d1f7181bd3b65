"""Nightly history in SQLite: every run's outcomes, and what changed since the previous run."""
from __future__ import annotations

import json
import sqlite3
import time

from .schema import BAD

GOOD = ("pass", "pass-with-allowance")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, timestamp REAL,
                                 environment TEXT);
CREATE TABLE IF NOT EXISTS results (run INTEGER REFERENCES runs(id), case_id TEXT, runner TEXT,
                                    outcome TEXT, max_ulp REAL, allowance TEXT, known_divergence TEXT,
                                    PRIMARY KEY (run, case_id, runner));
"""


def record_run(db_path: str, results, run_id: str | None = None, timestamp: float | None = None) -> dict:
    """Store ``results`` (reports.merge.Results) as a new run and return the changes since the
    previous run: {"previous_run", "run", "new_failures", "fixed", "changed", "new_cases", "removed"}."""
    con = sqlite3.connect(db_path)
    try:
        con.executescript(_SCHEMA)
        prev = con.execute("SELECT id, run_id FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        env = results.environments[0]["environment"] if results.environments else {}
        cur = con.execute("INSERT INTO runs (run_id, timestamp, environment) VALUES (?, ?, ?)",
                          (run_id, timestamp or time.time(), json.dumps(env)))
        run = cur.lastrowid
        con.executemany(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(run, r["case"], r["runner"], r["outcome"], r.get("max_ulp"), r.get("allowance"),
              (r.get("known_divergence") or {}).get("id")) for r in results.records])
        con.commit()
        before = {}
        if prev is not None:
            before = {(c, rn): (o, u, a) for c, rn, o, u, a in con.execute(
                "SELECT case_id, runner, outcome, max_ulp, allowance FROM results WHERE run = ?", (prev[0],))}
        return diff(before, {(r["case"], r["runner"]): (r["outcome"], r.get("max_ulp"), r.get("allowance"))
                             for r in results.records}, prev[1] if prev else None, prev is not None, run_id)
    finally:
        con.close()


def diff(before: dict, after: dict, previous_run, had_previous: bool, run_id) -> dict:
    out = {"previous_run": previous_run, "has_previous": had_previous, "run": run_id,
           "new_failures": [], "fixed": [], "changed": [], "new_cases": [], "removed": []}
    if not had_previous:
        return out
    for key, (o, u, a) in sorted(after.items()):
        item = {"case": key[0], "runner": key[1], "outcome": o, "max_ulp": u, "allowance": a}
        if key not in before:
            out["new_cases"].append(item)
            if o in BAD:
                out["new_failures"].append(dict(item, before=None))
            continue
        bo, bu, ba = before[key]
        item["before"] = bo
        if o in BAD and bo not in BAD:
            out["new_failures"].append(item)
        elif (bo in BAD or bo == "known-divergence") and o in GOOD:
            out["fixed"].append(item)
        elif o != bo or a != ba or (u != bu and not (u is None and bu is None)):
            out["changed"].append(dict(item, max_ulp_before=bu, allowance_before=ba))
    out["removed"] = [{"case": k[0], "runner": k[1], "outcome": v[0]} for k, v in sorted(before.items())
                      if k not in after]
    return out
