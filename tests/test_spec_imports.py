"""spec/ is data the suite reads: it imports nothing from the suite (conformance/, its runners,
its reports), at module level or inside a function body (docs/ARCHITECTURE.md, "spec/")."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUITE = ("conformance", "hardware_runners", "reports")


def _imports(path: pathlib.Path) -> set[str]:
    """Every module a file imports, anywhere in its body (lazy imports included); relative imports
    resolved against the spec package."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add("spec" if node.level else (node.module or ""))
    return out


def test_spec_imports_nothing_from_the_suite():
    found = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m.split(".")[0] in SUITE)
             for p in sorted((ROOT / "spec").rglob("*.py"))}
    assert {p: mods for p, mods in found.items() if mods} == {}


def test_the_scan_sees_lazy_imports(tmp_path):
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    from conformance.checks import ulp_distance\n    import reports.schema\n")
    assert {"conformance.checks", "reports.schema"} <= _imports(lazy)
