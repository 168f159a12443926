"""The house's shape, checked over the import graph of ``dspy_for/`` (read with ``ast``, nothing imported): no import
circle — imports inside functions and under ``TYPE_CHECKING`` included —, no arrow up a floor (see ``FLOORS``), no
file over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dspy_for"
MAX_LINES = 400

#: floors from the ground up: a module may import only modules on its own floor or below (longest prefix wins)
FLOORS: dict[str, int] = {
    "dspy_for.errors": 0,
    "dspy_for.secrets": 0,
    "dspy_for._offline": 0,
    "dspy_for.jsonwalk": 0,
    "dspy_for.compat": 0,
    "dspy_for.stats": 1,
    "dspy_for.datasets": 1,
    "dspy_for.lm": 1,
    "dspy_for.metrics": 1,
    "dspy_for.testing": 2,
    "dspy_for.judges": 2,
    "dspy_for.modules": 2,
    "dspy_for.optimizers": 2,
    "dspy_for.experiments.methods": 3,
    "dspy_for.experiments.spec": 4,
    "dspy_for.experiments.core": 5,
    "dspy_for.experiments.tracking": 6,
    "dspy_for.experiments.reports": 6,
    "dspy_for.experiments.tracked_run": 7,  # one run from its spec to its outcome: every command drives it
    "dspy_for.experiments.sequential": 8,
    "dspy_for.experiments.comparison": 8,
    "dspy_for.experiments.sweeps": 8,
    "dspy_for.experiments.results": 8,
    "dspy_for.experiments.export": 9,  # a comparison's stored results to a file
    "dspy_for.experiments.advisor": 9,
    "dspy_for.experiments": 10,  # the package's face: re-exports only
    "dspy_for.render": 11,
    "dspy_for.cli_common": 11,
    "dspy_for.cli_models": 11,
    "dspy_for.cli_export": 11,
    "dspy_for.cli": 12,
    "dspy_for": 13,  # the package's face
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _floor(module: str) -> int:
    best = max((k for k in FLOORS if module == k or module.startswith(k + ".")), key=len, default=None)
    assert best is not None, f"{module} has no floor in FLOORS: add it"
    return FLOORS[best]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, type_checking: bool = True) -> set[str]:
    """The dspy_for modules ``module`` imports (at module level or inside functions; under TYPE_CHECKING too, unless
    ``type_checking`` is False)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: _imports(m) for m in MODULES}


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            connect(v)
    return out


def test_the_graph_is_read():
    assert "dspy_for.experiments.core.run" in GRAPH["dspy_for.experiments.comparison"] or any(
        m.startswith("dspy_for.experiments.core") for m in GRAPH["dspy_for.experiments.comparison"]
    )
    assert "dspy_for.lm" in GRAPH["dspy_for.experiments.core.prepare"]


def test_no_import_circle():
    assert _circles() == []


def test_no_arrow_runs_up_a_floor():
    up = sorted(
        f"{m} (floor {_floor(m)}) -> {d} (floor {_floor(d)})"
        for m, deps in GRAPH.items()
        for d in deps
        if _floor(d) > _floor(m)
    )
    assert up == []


def test_modules_and_optimizers_know_nothing_of_experiments_mlflow_or_optuna():
    for m, path in MODULES.items():
        if m.startswith(("dspy_for.modules", "dspy_for.optimizers", "dspy_for.lm", "dspy_for.datasets")):
            text = path.read_text(encoding="utf-8")
            assert "import mlflow" not in text and "import optuna" not in text, m
            assert not any(d.startswith(("dspy_for.experiments", "dspy_for.cli")) for d in GRAPH[m]), m


def test_no_file_over_400_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
