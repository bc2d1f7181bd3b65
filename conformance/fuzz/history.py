"""Fuzz campaigns over time (SQLite; the same file as the nightly history may hold them: the tables
are the fuzzer's own): per campaign and runner the counts, and every bucket with the campaign that
first and last saw it, so that a campaign can say which of its buckets are new."""
from __future__ import annotations

import json
import sqlite3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fuzz_campaigns (id INTEGER PRIMARY KEY AUTOINCREMENT, campaign_id TEXT UNIQUE,
    timestamp REAL, seed INTEGER, families TEXT, jax_version TEXT, environment TEXT);
CREATE TABLE IF NOT EXISTS fuzz_counts (campaign INTEGER REFERENCES fuzz_campaigns(id), runner TEXT,
    programs INTEGER, passes INTEGER, findings INTEGER, buckets INTEGER, seconds REAL,
    PRIMARY KEY (campaign, runner));
CREATE TABLE IF NOT EXISTS fuzz_buckets (bucket TEXT PRIMARY KEY, runner TEXT, first_campaign INTEGER,
    last_campaign INTEGER, occurrences INTEGER);
"""


def record_campaign(db: str, campaign_id: str, info: dict, counts: dict, buckets: dict) -> dict:
    """Store a campaign (``counts``: runner -> {programs, passes, findings, buckets, seconds};
    ``buckets``: bucket -> {runner, occurrences}); return {"new_buckets": [...], "trend": {...}}.
    Recording a campaign id again replaces it."""
    con = sqlite3.connect(db)
    try:
        con.executescript(_SCHEMA)
        old = con.execute("SELECT id FROM fuzz_campaigns WHERE campaign_id = ?", (campaign_id,)).fetchone()
        if old:
            con.execute("DELETE FROM fuzz_counts WHERE campaign = ?", (old[0],))
            con.execute("DELETE FROM fuzz_campaigns WHERE id = ?", (old[0],))
        cid = con.execute("INSERT INTO fuzz_campaigns (campaign_id, timestamp, seed, families, jax_version, environment) "
                          "VALUES (?, ?, ?, ?, ?, ?)",
                          (campaign_id, info.get("started"), info.get("seed"), ",".join(info.get("families", ())),
                           info.get("jax_version"), json.dumps(info.get("environment", {}), default=str))).lastrowid
        for runner, c in counts.items():
            con.execute("INSERT INTO fuzz_counts VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (cid, runner, c.get("programs", 0), c.get("passes", 0), c.get("findings", 0),
                         c.get("buckets", 0), c.get("seconds", 0.0)))
        new = []
        for bucket, b in sorted(buckets.items()):
            row = con.execute("SELECT first_campaign, occurrences FROM fuzz_buckets WHERE bucket = ?", (bucket,)).fetchone()
            if row is None or row[0] == (old[0] if old else None):
                new.append(bucket)
                con.execute("INSERT OR REPLACE INTO fuzz_buckets VALUES (?, ?, ?, ?, ?)",
                            (bucket, b.get("runner"), cid, cid, b.get("occurrences", 1)))
            else:
                con.execute("UPDATE fuzz_buckets SET last_campaign = ?, occurrences = occurrences + ? WHERE bucket = ?",
                            (cid, b.get("occurrences", 1), bucket))
        con.commit()
        trend: dict = {}
        for cid_, camp, ts, runner, programs, findings, nb in con.execute(
                "SELECT c.id, c.campaign_id, c.timestamp, f.runner, f.programs, f.findings, f.buckets "
                "FROM fuzz_counts f JOIN fuzz_campaigns c ON c.id = f.campaign ORDER BY c.timestamp, c.id"):
            trend.setdefault(runner, []).append({"campaign": camp, "timestamp": ts, "programs": programs,
                                                 "findings": findings, "buckets": nb})
        return {"new_buckets": new, "trend": trend}
    finally:
        con.close()
