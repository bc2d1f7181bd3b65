"""A campaign's directory, written as things happen (a killed campaign loses nothing it finished):

    campaign.json          the campaign's parameters and environment (what --resume reads)
    programs.jsonl         one line per program: index, family, per-runner outcome, bucket, seconds
    findings.jsonl         one line per finding occurrence (program, runner, bucket, first divergent eqn)
    findings/<bucket>/     per bucket: finding.json, program.json + inputs.npz + reproducer.py as found,
                           and reduced.json + reduced_inputs.npz + reproducer_reduced.py once shrunk
    results/fuzz.jsonl     one results-schema record per bucket (reports/ renders it)
    summary.md             the campaign's summary; report/ the HTML dashboard of the findings
"""
from __future__ import annotations

import json
import os
import re
import time

from . import arrays, ir
from .reproducer import script
from .shrink import TestCase
from .suite import JsonlWriter, dumps
from .work import unpack


def slug(bucket: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", bucket)[:150]


class Store:
    def __init__(self, out: str):
        self.out = out
        os.makedirs(os.path.join(out, "findings"), exist_ok=True)
        self.programs = JsonlWriter(os.path.join(out, "programs.jsonl"))
        self.findings = JsonlWriter(os.path.join(out, "findings.jsonl"))

    def close(self) -> None:
        self.programs.close()
        self.findings.close()

    # -- campaign.json -------------------------------------------------------------------------
    def write_campaign(self, info: dict) -> None:
        path = os.path.join(self.out, "campaign.json")
        with open(path + ".tmp", "w") as f:
            f.write(dumps(info, indent=1))
        os.replace(path + ".tmp", path)

    @staticmethod
    def read_campaign(out: str) -> dict:
        with open(os.path.join(out, "campaign.json")) as f:
            return json.load(f)

    @staticmethod
    def read_lines(path: str):
        if not os.path.exists(path):
            return
        with open(path) as f:
            for line in f:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue   # a line cut by a kill

    # -- findings --------------------------------------------------------------------------------
    def bucket_dir(self, bucket: str) -> str:
        d = os.path.join(self.out, "findings", slug(bucket))
        os.makedirs(d, exist_ok=True)
        return d

    def save_finding(self, bucket: str, result: dict, rec: dict) -> str:
        """The first occurrence of a bucket: the program as found and its reproducer."""
        d = self.bucket_dir(bucket)
        tc = TestCase(ir.loads(result["program"]), unpack(result["inputs"]))
        with open(os.path.join(d, "program.json"), "w") as f:
            f.write(ir.dumps(tc.program))
        arrays.save(os.path.join(d, "inputs.npz"), tc.inputs)
        outs = rec.get("outputs") or {}
        if outs.get("reference") is not None:
            with open(os.path.join(d, "reproducer.py"), "w") as f:
                f.write(script(tc, rec, unpack(outs["reference"]), unpack(outs["backend"])))
        self.update_finding(bucket, {"bucket": bucket, "first_seen": time.time(), "unit": result["unit"],
                                     "record": {k: v for k, v in rec.items() if k != "outputs"},
                                     "original": {"ops": tc.program.n_ops,
                                                  "elements": sum(int(x.size) for x in tc.inputs)}})
        return d

    def save_reduced(self, bucket: str, result: dict) -> None:
        d = self.bucket_dir(bucket)
        tc = TestCase(ir.loads(result["program"]), unpack(result["inputs"]))
        with open(os.path.join(d, "reduced.json"), "w") as f:
            f.write(ir.dumps(tc.program))
        arrays.save(os.path.join(d, "reduced_inputs.npz"), tc.inputs)
        rec = dict(result["record"])
        if result.get("passes"):
            rec["responsible_passes"] = result["passes"].get("responsible")
        with open(os.path.join(d, "reproducer_reduced.py"), "w") as f:
            f.write(script(tc, rec, unpack(result["outputs"]["reference"]), unpack(result["outputs"]["backend"])))
        self.update_finding(bucket, {"reduced": {"ops": result["after"]["ops"], "elements": result["after"]["elements"],
                                                 "eqns": _eqn_count(tc), "seconds": result["shrink_s"],
                                                 "tries": result["tries"]},
                                     "passes": result.get("passes"), "reduced_record": rec})

    def update_finding(self, bucket: str, fields: dict) -> None:
        path = os.path.join(self.bucket_dir(bucket), "finding.json")
        doc = {}
        if os.path.exists(path):
            with open(path) as f:
                doc = json.load(f)
        doc.update(fields)
        with open(path + ".tmp", "w") as f:
            f.write(dumps(doc, indent=1))
        os.replace(path + ".tmp", path)

    def read_findings(self) -> dict:
        out = {}
        root = os.path.join(self.out, "findings")
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            path = os.path.join(root, name, "finding.json")
            if os.path.exists(path):
                with open(path) as f:
                    doc = json.load(f)
                out[doc["bucket"]] = dict(doc, dir=os.path.join(root, name))
        return out


def _eqn_count(tc: TestCase) -> int | None:
    """Equations of the program's jaxpr (what a reader of the reproducer sees)."""
    try:
        import jax

        from .evaluate import case_for
        case = case_for(tc.program, "count")
        with case.context():
            return len(jax.make_jaxpr(case.fn)(*tc.inputs).jaxpr.eqns)
    except Exception:  # noqa: BLE001  (a count only)
        return None
