"""The layer rule of docs/ARCHITECTURE.md, executable: imports only go down, and nothing imports in a circle.

Every import counts, also those inside functions (lazy imports hide a circle at run time, not in the design)
and those under ``TYPE_CHECKING``. The floors are read from the ``layers`` block of docs/ARCHITECTURE.md, so
the page and the rule cannot drift apart. Three floors have rules of their own: the builder reaches neither the
clients nor what drives a running server (``generator.operate``), only ``generator.operate`` imports the clients,
and the repository imports nothing but the standard library and the project's dependency-free modules.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("generator", "clients", "loadtest", "deploy", "tools")
STAGES = "generator.builder.stages"


def floors() -> list[set[str]]:
    """Units per floor, top first, from the ```layers block of docs/ARCHITECTURE.md."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/ARCHITECTURE.md has no ```layers block"
    rows = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return [set(row.replace(",", " ").split()) for row in rows if row]


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n for n in names if n in known] or [node.module]
        else:
            continue
        yield from (n for n in names if n in known)


def unit_of(module: str, units: set[str]) -> str:
    """The longest unit that is ``module`` or contains it (stage packages count one by one)."""
    if module.startswith(STAGES + "."):
        return ".".join(module.split(".")[:4])
    best = max((u for u in units if module == u or module.startswith(u + ".")), key=len, default=None)
    assert best is not None, f"{module} belongs to no floor of docs/ARCHITECTURE.md"
    return best


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: set(imported(path, known)) - {module} for module, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def unit_edges() -> dict[str, set[str]]:
    units = set().union(*floors()) | {STAGES}
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph().items():
        source = unit_of(module, units)
        for target in targets:
            if (dest := unit_of(target, units)) != source:
                edges[source].add(dest)
    return edges


def floor_of(unit: str, table: list[set[str]]) -> int:
    key = STAGES if unit.startswith(STAGES + ".") else unit
    return next(i for i, row in enumerate(table) if key in row)


def test_no_module_imports_itself_in_a_circle() -> None:
    assert cycles(graph()) == []


def violations(edges: dict[str, set[str]], table: list[set[str]]) -> list[str]:
    """Imports that go up a floor, or sideways between two units of one floor (stage packages excepted)."""
    found = []
    for source, targets in edges.items():
        for target in targets:
            up, down = floor_of(source, table), floor_of(target, table)
            sideways = up == down and STAGES not in table[up]
            if down < up or sideways:
                found.append(f"{source} -> {target}")
    return sorted(found)


def test_imports_only_go_down_the_floors() -> None:
    assert violations(unit_edges(), floors()) == [], "see docs/ARCHITECTURE.md, 'Layers'"


def test_the_rule_catches_upward_and_sideways_imports() -> None:
    table = [{"generator.cli"}, {STAGES}, {"clients", "generator.server"}]
    edges = {"generator.server": {"generator.cli", "clients"}, f"{STAGES}.gate": {f"{STAGES}.config", "clients"}}
    assert violations(edges, table) == ["generator.server -> clients", "generator.server -> generator.cli"]


def test_builder_stages_never_import_each_other_in_a_circle() -> None:
    stages = {u: {t for t in ts if t.startswith(STAGES + ".")} for u, ts in unit_edges().items()
              if u.startswith(STAGES + ".")}
    assert cycles(stages) == []


def test_clients_need_only_the_dependency_free_contract() -> None:
    contract = "generator.serving.contract"
    needed = {t for m, ts in graph().items() if m.split(".")[0] == "clients" for t in ts
              if t.split(".")[0] == "generator"}
    assert needed == {contract}
    assert graph()[contract] == set(), "the contract module imports nothing of the project"


def test_lazy_and_type_checking_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a.b import C\n"
                      "def f():\n    import a.d\n")
    known = {"a.b": source, "a.d": source}
    assert sorted(imported(source, known)) == ["a.b", "a.d"]


# --- the floors of issue 24: builder, operate, repository --------------------------------------------------------

BUILDER, OPERATE, REPOSITORY = "generator.builder", "generator.operate", "generator.repository"
# What the repository may import of the project: modules that themselves import nothing of it.
DEPENDENCY_FREE = ("generator", "generator.errors", "generator.serving.contract")


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def reachable(edges: Mapping[str, Iterable[str]], package: str) -> set[str]:
    """Every module the modules of ``package`` import, directly or through others."""
    seen: set[str] = set()
    todo = [m for m in edges if within(m, package)]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += edges.get(module, ())
    return seen


def builder_violations(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Modules of the clients or of generator.operate that the builder reaches."""
    return sorted(m for m in reachable(edges, BUILDER) if within(m, "clients") or within(m, OPERATE))


def clients_importers(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Modules of ``generator`` outside generator.operate that import the clients themselves."""
    return sorted(f"{m} -> {t}" for m, targets in edges.items() for t in targets
                  if within(m, "generator") and not within(m, OPERATE) and within(t, "clients"))


def imports_of(path: Path, known: Mapping[str, Path]) -> Iterator[str]:
    """Every module ``path`` imports, the project's and everyone else's (relative imports as written)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module == "__future__":
                continue
            yield from (f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)


def repository_violations(sources: Mapping[str, Path]) -> list[str]:
    """Imports of the repository's modules beyond the standard library, itself and the dependency-free modules."""
    found, known = [], modules()
    for module, path in sources.items():
        for name in imports_of(path, known):
            allowed = (name.split(".")[0] in sys.stdlib_module_names or within(name, REPOSITORY)
                       or name in DEPENDENCY_FREE)
            if not allowed:
                found.append(f"{module} -> {name}")
    return sorted(set(found))


def test_the_builder_reaches_neither_the_clients_nor_operate() -> None:
    assert any(within(m, BUILDER) for m in graph())
    assert builder_violations(graph()) == [], "the builder builds; talking to a server is generator.operate's"


def test_only_operate_imports_the_clients() -> None:
    assert clients_importers(graph()) == []


def test_the_repository_needs_only_the_standard_library_and_the_contract() -> None:
    sources = {m: p for m, p in modules().items() if within(m, REPOSITORY)}
    assert sources, f"no {REPOSITORY} package"
    assert repository_violations(sources) == [], "python -S -m generator check must run with no third-party package"
    for module in DEPENDENCY_FREE:
        assert graph()[module] == set(), f"{module} imports nothing of the project"


def test_the_floor_rules_catch_what_they_forbid(tmp_path: Path) -> None:
    edges = {f"{BUILDER}.pipeline": {f"{BUILDER}.stages.gate"}, f"{BUILDER}.stages.gate": {"generator.evaluation"},
             "generator.evaluation": {f"{OPERATE}.admin"}, f"{OPERATE}.admin": {"clients"},
             "generator.cli.check": {"clients"}}
    assert builder_violations(edges) == ["clients", f"{OPERATE}.admin"]  # reached through another package too
    assert clients_importers(edges) == ["generator.cli.check -> clients"]
    source = tmp_path / "check.py"
    source.write_text("from __future__ import annotations\nimport json\nfrom generator.errors import GeneratorError\n"
                      "def f():\n    import numpy\n    from generator.builder.spec import options\n")
    assert repository_violations({f"{REPOSITORY}.check": source}) == [
        f"{REPOSITORY}.check -> generator.builder.spec.options", f"{REPOSITORY}.check -> numpy"]


# --- issue 33: command-line modules are not libraries ------------------------------------------------------------

# Each command-line unit and the one module that may import it: its package's ``__main__``. What another package
# needs of a command line lives in a library module (generator/subcommands.py, generator/operate/rollout/
# arguments.py, generator/server/gpu_steps.py, clients/endpoint.py).
COMMAND_LINES = {"generator.cli": "generator.__main__", "loadtest.cli": "loadtest.__main__",
                 "loadtest.commands": "loadtest.__main__", "clients.stream.cli": "clients.stream.__main__",
                 "clients.detect": "clients.detect", "deploy.cli": "deploy.__main__"}


def command_line_importers(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of a command-line module by anything but its ``__main__`` or its own command-line unit."""
    found = []
    for source, targets in edges.items():
        for target in targets:
            unit = next((u for u in COMMAND_LINES if within(target, u)), None)
            if unit is not None and source != COMMAND_LINES[unit] and not within(source, unit):
                found.append(f"{source} -> {target}")
    return sorted(found)


def test_command_line_modules_are_imported_only_by_their_main() -> None:
    assert command_line_importers(graph()) == [], "move what other modules need into a library module"


def test_every_command_line_unit_exists() -> None:
    known = modules()
    assert all(unit in known for unit in COMMAND_LINES), sorted(set(COMMAND_LINES) - set(known))
    assert all(main in known for main in COMMAND_LINES.values())


def test_the_command_line_rule_catches_what_it_forbids() -> None:
    edges = {"loadtest.cli": {"generator.cli.registry"}, "deploy.entrypoints.rollout_job": {"generator.cli.rollout"},
             "generator.cli.rollback": {"generator.cli.rollout"}, "generator.__main__": {"generator.cli"}}
    assert command_line_importers(edges) == ["deploy.entrypoints.rollout_job -> generator.cli.rollout",
                                             "loadtest.cli -> generator.cli.registry"]


# --- deploy/ in layers: what renders, what runs in the images, what drives a local stack --------------------------

# Each part of deploy/ and the parts it may import. The base (settings, the generator flags the files carry,
# sizing, schemas, policy rules) is read by all; the renderer and what runs inside the images never know each other,
# nor what drives a stack; only the command line (python -m deploy) sees everything.
DEPLOY_BASE = ("deploy.errors", "deploy.settings", "deploy.commands", "deploy.sizing", "deploy.validate",
               "deploy.composefile", "deploy.policy", "deploy.screening",
               "deploy.proxy_admission", "deploy.jetson")
DEPLOY_PARTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(DEPLOY_BASE, DEPLOY_BASE),
    "deploy.render": (*DEPLOY_BASE, "deploy.render"),
    "deploy.checks": (*DEPLOY_BASE, "deploy.render"),
    "deploy.entrypoints": (*DEPLOY_BASE, "deploy.entrypoints"),
    "deploy.local": (*DEPLOY_BASE, "deploy.render", "deploy.local"),
    "deploy.cli": ("deploy",), "deploy.__main__": ("deploy.cli",),
}


def deploy_part(module: str) -> str:
    found = [part for part in DEPLOY_PARTS if within(module, part)]
    assert found, f"{module} belongs to no part of DEPLOY_PARTS"
    return max(found, key=len)


def deploy_violations(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports inside deploy/ that a part may not make (the package's own __init__ imports nothing)."""
    found = []
    for source, targets in edges.items():
        if not within(source, "deploy") or source == "deploy":
            continue
        allowed = DEPLOY_PARTS[deploy_part(source)]
        found += [f"{source} -> {t}" for t in targets
                  if within(t, "deploy") and not any(within(t, unit) for unit in allowed)]
    return sorted(found)


def test_nothing_in_deploy_imports_back_up() -> None:
    assert deploy_violations(graph()) == [], "see DEPLOY_PARTS and deploy/README.md"
    assert graph()["deploy"] == set()


def test_the_deploy_rule_catches_what_it_forbids() -> None:
    edges = {"deploy.render.files": {"deploy.local.docker_versions", "deploy.settings"},
             "deploy.entrypoints.serve_models": {"deploy.render.files"}, "deploy.local.site": {"deploy.render.files"},
             "deploy.settings": {"deploy.checks"}, "deploy.cli": {"deploy.local.stack"}}
    assert deploy_violations(edges) == ["deploy.entrypoints.serve_models -> deploy.render.files",
                                        "deploy.render.files -> deploy.local.docker_versions",
                                        "deploy.settings -> deploy.checks"]
