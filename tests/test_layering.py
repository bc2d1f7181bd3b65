"""The floors of the reference interpreter (docs/ARCHITECTURE.md, "Layers only import
downwards"), checked on the import graph read from the sources: every import of an ``interp``
module, at module level or inside a function (a lazy import hides a dependency, it does not
remove it), goes to its own floor or a lower one; floors side by side do not import each other;
neither modules nor packages import each other in a loop."""
from __future__ import annotations

import ast
import pathlib
import re

import interp

# (floor, level, the modules on it: a name ending in ".*" is a package and everything in it).
# A module imports modules of its own floor or of a lower level; floors of one level (the
# interpreted devices and the Pallas core; the Pallas dialects) are side by side.
FLOORS = (
    ("values", 0, ("interp.errors", "interp.dtypes", "interp.options", "interp.extended",
                   "interp.keys", "interp.prng", "interp.refs", "interp.emulated_device",
                   "interp.numerics")),
    ("evaluator", 1, ("interp.registry", "interp.evaluator", "interp.ref_indexing",
                      "interp.uninitialized")),
    ("schedule", 2, ("interp.schedule",)),
    ("devices", 3, ("interp.spmd", "interp.spmd_lockstep")),
    ("pallas core", 3, ("interp.pallas", "interp.pallas.grid", "interp.pallas.memory",
                        "interp.pallas.mesh", "interp.pallas.dma", "interp.pallas.devices",
                        "interp.pallas.indexing", "interp.pallas.specialize",
                        "interp.pallas.debug_checks")),
    ("pallas tpu", 4, ("interp.pallas.tpu.*",)),
    ("pallas mosaic gpu", 4, ("interp.pallas.mosaic_gpu.*",)),
    ("rules", 5, ("interp.rules.*",)),
    ("api", 6, ("interp", "interp.api", "interp.coverage", "interp.coverage_table", "interp.pallas_mode")),
)


def _files() -> dict:
    root = pathlib.Path(interp.__file__).parent
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def import_graph() -> dict:
    """{module: {interp module it imports, anywhere in its body (function-local included)}}."""
    files = _files()
    graph = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        graph[mod] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                    if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{name}.{a.name}" if f"{name}.{a.name}" in files else name
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[mod] |= {t for t in targets if t in files and t != mod}
    return graph


def floor_of(module: str):
    """(floor, level) of a module; None when no floor claims it."""
    found = [(name, level) for name, level, members in FLOORS
             if module in members or any(m.endswith(".*") and (module == m[:-2] or
                                                                module.startswith(m[:-1]))
                                         for m in members)]
    assert len(found) <= 1, (module, found)
    return found[0] if found else None


def _cycles(graph) -> list:
    def reaches(start, goal, seen):
        for d in graph[start]:
            if d == goal or (d not in seen and not seen.add(d) and reaches(d, goal, seen)):
                return True
        return False
    return [m for m in graph if reaches(m, m, set())]


def test_every_interp_module_has_a_floor():
    assert [m for m in import_graph() if floor_of(m) is None] == []


def test_imports_go_to_the_same_floor_or_below():
    """Function-local imports included: interp/pallas/devices.py once imported
    interp.spmd.current_device inside a function while interp/spmd.py imported the Pallas
    scheduler, a package cycle the module-level graph did not show."""
    bad = []
    for mod, deps in import_graph().items():
        name, level = floor_of(mod)
        for dep in deps:
            dep_name, dep_level = floor_of(dep)
            if dep_level > level or (dep_level == level and dep_name != name):
                bad.append(f"{mod} ({name}) imports {dep} ({dep_name})")
    assert bad == []


def test_no_module_or_package_imports_itself_in_a_loop():
    """Modules, and the packages under interp (each top-level module of interp counting as its
    own unit)."""
    graph = import_graph()
    assert _cycles(graph) == []
    files = _files()

    def unit(mod):
        if mod.count(".") >= 2 or (mod.count(".") == 1 and files[mod].name == "__init__.py"):
            return mod if files[mod].name == "__init__.py" else mod.rpartition(".")[0]
        return mod
    packages: dict = {}
    for mod, deps in graph.items():
        packages.setdefault(unit(mod), set()).update(unit(d) for d in deps if unit(d) != unit(mod))
    for deps in list(packages.values()):
        for d in deps:
            packages.setdefault(d, set())
    assert _cycles(packages) == []


def test_the_floors_catch_an_upward_import():
    """The check itself: an import from the Pallas core into a dialect, or from a dialect into
    the rules, or between the dialects, is refused."""
    def refused(mod, dep):
        (name, level), (dep_name, dep_level) = floor_of(mod), floor_of(dep)
        return dep_level > level or (dep_level == level and dep_name != name)
    assert refused("interp.pallas.grid", "interp.pallas.mosaic_gpu.launch")
    assert refused("interp.pallas.tpu.mesh", "interp.rules.pallas")
    assert refused("interp.pallas.tpu.mesh", "interp.pallas.mosaic_gpu.launch")
    assert refused("interp.pallas.devices", "interp.spmd")
    assert not refused("interp.rules.pallas", "interp.pallas.mosaic_gpu.launch")
    assert not refused("interp.pallas.mosaic_gpu.launch", "interp.pallas.devices")


def _picture_floors() -> list:
    """(level, floor, text) of each floor line of the picture of the house in docs/ARCHITECTURE.md."""
    doc = pathlib.Path(interp.__file__).parent.parent / "docs" / "ARCHITECTURE.md"
    picture = doc.read_text().split("## The house", 1)[1].split("```")[1]
    names = "|".join(re.escape(name) for name, _, _ in FLOORS)
    return [(int(m[1]), m[2], m[3]) for m in re.finditer(rf"^ +(\d) +({names})  +(.*)$", picture, re.M)]


def test_the_picture_names_every_floor():
    """The picture of the house shows FLOORS as they are: every floor once, on its level, with
    every module it holds (a package's path, interp/ left out)."""
    lines = _picture_floors()
    assert sorted((level, name) for level, name, _ in lines) == sorted((level, name) for name, level, _ in FLOORS)
    members = {name: mods for name, _, mods in FLOORS}
    missing = []
    for _, name, text in lines:
        for mod in members[name]:
            if mod.endswith(".*"):
                shown = "/".join(mod[:-2].split(".")[1:]) + "/" in text
            else:
                shown = re.search(rf"\b{mod.rpartition('.')[2]}\b", text) is not None
            if not shown:
                missing.append(f"{mod} ({name})")
    assert missing == []
