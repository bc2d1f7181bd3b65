"""The suite's packages stand in floors (docs/ARCHITECTURE.md, "The suite's floors"): each imports
only the packages below it, function-local (lazy) imports included, and no modules of the suite
import each other in a loop. Read from the sources (every import statement at any depth of a
module's body), so an import hidden inside a function counts as much as one at the top."""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = ("interp", "spec", "reports", "hardware_runners", "conformance")
SUITE = ("reports", "hardware_runners", "conformance")

# What each package of the suite may import of the project, besides itself. The data flows one way,
# case -> runner -> compliance -> record -> report, and the imports follow the types it carries:
# - reports: the record type and everything made of records (merge, history, the report files);
#   it knows nothing of how a record came to be.
# - hardware_runners: runs a program (hardware_runners/program.py) on one backend and returns its
#   outputs; the reference is one backend (interp). It knows neither cases nor records.
# - conformance: the suite on top: cases, compliance checks, the judgement, isolation, the plugin
#   and the CLI; it builds records from what the runners return.
MAY_IMPORT = {
    "reports": set(),
    "hardware_runners": {"interp"},
    "conformance": {"hardware_runners", "reports", "spec", "interp"},
}
# Below the suite: the reference and its semantics import nothing of it (spec/ is data; the
# divergence matchers and models that measure with the suite's checker are the suite's:
# conformance/divergence_models.py).
BELOW_SUITE = ("interp", "spec")


def _modules() -> dict:
    """{module name: path} of every module of the project's packages."""
    out = {}
    for package in PROJECT:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: pathlib.Path, modules: dict) -> set:
    """The project modules ``module`` imports, anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            # `from pkg import sub` imports the module pkg.sub; `from mod import name` imports mod
            targets = [f"{name}.{a.name}" if f"{name}.{a.name}" in modules else name for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:          # `import jax.numpy`-style dotted names of a package
                t = t.rpartition(".")[0]
            if t and t != module:
                found.add(t)
    return found


def _graph() -> dict:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _package(module: str) -> str:
    return module.split(".", 1)[0]


def test_suite_packages_import_only_the_floors_below():
    graph = _graph()
    wrong = sorted(f"{m} imports {d}" for m, deps in graph.items() if _package(m) in SUITE for d in deps
                   if _package(d) != _package(m) and _package(d) not in MAY_IMPORT[_package(m)])
    assert wrong == []


def test_the_reference_and_its_semantics_import_nothing_of_the_suite():
    graph = _graph()
    wrong = sorted(f"{m} imports {d}" for m, deps in graph.items() if _package(m) in BELOW_SUITE for d in deps
                   if _package(d) in SUITE)
    assert wrong == []


def test_no_modules_of_the_suite_import_each_other():
    """No loop among the suite's modules, long or short: a module that needs something of one that
    needs it back is a module split in the wrong place."""
    graph = {m: {d for d in deps if _package(d) in SUITE} for m, deps in _graph().items() if _package(m) in SUITE}

    def reaches(start, goal, seen):
        for d in graph.get(start, ()):
            if d == goal or (d not in seen and not seen.add(d) and reaches(d, goal, seen)):
                return True
        return False
    assert [m for m in graph if reaches(m, m, set())] == []


def test_the_import_scan_sees_lazy_and_relative_imports():
    """The scan itself: an import inside a function, a relative one and `from package import module`."""
    graph = _graph()
    assert "hardware_runners.base" in graph["conformance.execute"]           # at the top
    assert "conformance.cases" in graph["conformance.isolation"]             # inside a function
    assert "conformance.checks" in graph["conformance.judge"]                # `from . import checks`
    # --cluster: the executors hand work to conformance/cluster.py, which knows nothing of the
    # fuzzer (its tasks run the suite's own isolation); imported only inside functions
    assert "conformance.cluster" in graph["conformance.fuzz.executor"]
    assert not any(d.startswith("conformance.fuzz") for d in graph["conformance.cluster"])


def test_the_picture_shows_what_each_package_may_import():
    """docs/ARCHITECTURE.md's picture of the house: the flow, and per package of the suite the
    packages it may import, as MAY_IMPORT says."""
    picture = (ROOT / "docs" / "ARCHITECTURE.md").read_text().split("## The house", 1)[1].split("```")[1]
    assert "case -> runner -> compliance -> record -> report" in picture
    shown = {m[1]: set(m[2].split()) - {"(nothing)"}
             for m in re.finditer(r"^ +(\w+)/ +-> (.*?)(?:  |$)", picture, re.M)}
    assert shown == MAY_IMPORT
