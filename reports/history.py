"""Nightly history in SQLite: every run's outcomes per column, the trend of each column's counts
and what changed since the previous run.

A run is one report: its records keyed by (case, column, base seed), where a column is a runner on
one machine (reports/merge.py). Recording a run id that is already stored replaces that run (a
report re-made from the same results does not count twice).
"""
from __future__ import annotations

import json
import sqlite3
import time

from .schema import BAD, GOOD, KNOWN_DIVERGENCE, SERIES, Record

VERSION = 2     # PRAGMA user_version; 0: the first layout (a `results` table keyed by runner)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, timestamp REAL,
                                 environment TEXT);
CREATE TABLE IF NOT EXISTS outcomes (run INTEGER REFERENCES runs(id), case_id TEXT, column_id TEXT, runner TEXT,
                                     base_seed INTEGER NOT NULL DEFAULT 0, outcome TEXT, max_ulp REAL,
                                     allowance TEXT, known_divergence TEXT,
                                     PRIMARY KEY (run, case_id, column_id, base_seed));
"""


def _open(db_path: str) -> sqlite3.Connection:
    con = sqlite3.connect(db_path)
    con.executescript(_SCHEMA)
    if con.execute("PRAGMA user_version").fetchone()[0] < VERSION:
        # The first layout kept one row per (run, case, runner): its runs become columns named by
        # the runner alone (the trend keeps them; the next run's cases show as new in its columns).
        if con.execute("SELECT name FROM sqlite_master WHERE name = 'results'").fetchone():
            con.execute("INSERT OR IGNORE INTO outcomes SELECT run, case_id, runner, runner, 0, outcome, max_ulp, "
                        "allowance, known_divergence FROM results")
            con.execute("DROP TABLE results")
        con.execute(f"PRAGMA user_version = {VERSION}")
        con.commit()
    return con


def _key(r: Record) -> tuple:
    seed = r.base_seed if r.base_seed is not None else r.seed
    return r.case, r.column, int(seed or 0)


def run_label(results) -> str:
    """The run id of a merged result set: its records' run ids joined (one per machine or shard)."""
    ids = sorted({r.run_id for r in results.records if r.run_id})
    return "+".join(ids) if ids else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def record_run(db_path: str, results, run_id: str | None = None, timestamp: float | None = None) -> dict:
    """Store ``results`` (reports.merge.Results) as a run and return the changes since the previous
    run: {"previous_run", "has_previous", "run", "new_failures", "fixed", "changed", "new_cases",
    "removed", "trend"}. ``timestamp`` defaults to the time of the run's last record."""
    run_id = run_id or run_label(results)
    if timestamp is None:
        stamps = [r.timestamp for r in results.records if r.timestamp]
        timestamp = max(stamps) if stamps else time.time()
    con = _open(db_path)
    try:
        for (old,) in con.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,)).fetchall():
            con.execute("DELETE FROM outcomes WHERE run = ?", (old,))
            con.execute("DELETE FROM runs WHERE id = ?", (old,))
        prev = con.execute("SELECT id, run_id FROM runs ORDER BY timestamp DESC, id DESC LIMIT 1").fetchone()
        envs = {mid: m.environment for mid, m in results.machines.items()}
        run = con.execute("INSERT INTO runs (run_id, timestamp, environment) VALUES (?, ?, ?)",
                          (run_id, timestamp, json.dumps(envs, default=str))).lastrowid
        after = {_key(r): r for r in results.records}
        con.executemany(
            "INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(run, case, col, r.runner, seed, r.outcome, _finite(r.max_ulp), r.allowance,
              (r.known_divergence or {}).get("id")) for (case, col, seed), r in after.items()])
        con.commit()
        before = {}
        if prev is not None:
            before = {(c, col, s): (o, u, a) for c, col, s, o, u, a in con.execute(
                "SELECT case_id, column_id, base_seed, outcome, max_ulp, allowance FROM outcomes WHERE run = ?",
                (prev[0],))}
        changes = diff(before, {k: (r.outcome, _finite(r.max_ulp), r.allowance)
                                for k, r in after.items()}, prev[1] if prev else None, prev is not None, run_id)
        changes["trend"] = trend(con)
        return changes
    finally:
        con.close()


def _finite(x):
    """max_ulp as stored: SQLite REAL holds inf, but JSON readers of the history do not; NaN -> None."""
    return None if isinstance(x, float) and x != x else x


def trend(con: sqlite3.Connection) -> dict:
    """{column: [{"run_id", "timestamp", "counts": {"pass", "allowance", "known", "fail"}}]}, oldest
    run first; a column absent from a run has no point there."""
    out: dict = {}
    rows = con.execute("SELECT runs.id, runs.run_id, runs.timestamp, column_id, outcome, COUNT(*) FROM outcomes "
                       "JOIN runs ON runs.id = outcomes.run GROUP BY runs.id, column_id, outcome "
                       "ORDER BY runs.timestamp, runs.id")
    points: dict = {}
    for rid, run_id, ts, col, outcome, n in rows:
        p = points.setdefault((col, rid), {"run_id": run_id, "timestamp": ts,
                                           "counts": dict.fromkeys(SERIES.values(), 0)})
        if outcome in SERIES:
            p["counts"][SERIES[outcome]] += n
    for (col, _), p in points.items():
        out.setdefault(col, []).append(p)
    return out


def diff(before: dict, after: dict, previous_run, had_previous: bool, run_id) -> dict:
    """Changes between two runs' {(case, column, base seed): (outcome, max ulp, allowance)}."""
    out = {"previous_run": previous_run, "has_previous": had_previous, "run": run_id,
           "new_failures": [], "fixed": [], "changed": [], "new_cases": [], "removed": []}
    if not had_previous:
        return out
    for key, (o, u, a) in sorted(after.items()):
        item = {"case": key[0], "column": key[1], "seed": key[2], "outcome": o, "max_ulp": u, "allowance": a}
        if key not in before:
            out["new_cases"].append(dict(item, before=None))
            if o in BAD:
                out["new_failures"].append(dict(item, before=None))
            continue
        bo, bu, ba = before[key]
        item["before"] = bo
        if o in BAD and bo not in BAD:
            out["new_failures"].append(item)
        elif (bo in BAD or bo == KNOWN_DIVERGENCE) and o in GOOD:
            out["fixed"].append(item)
        elif o != bo or a != ba or (u != bu and not (u is None and bu is None)):
            out["changed"].append(dict(item, max_ulp_before=bu, allowance_before=ba))
    out["removed"] = [{"case": k[0], "column": k[1], "seed": k[2], "before": v[0], "outcome": None}
                      for k, v in sorted(before.items()) if k not in after]
    return out
