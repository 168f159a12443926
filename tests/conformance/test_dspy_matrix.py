"""The DSPy conformance matrix: modules × DSPy entry points × role-LM layouts (:mod:`matrix_design`), each cell run
with plain ``dspy.LM``s against the local test server, asserting from its request log which model every role's calls
named, and what the entry point promises. ``docs/dspy.md``'s tables are rendered from the cells and checked here
(``DSPY_FOR_WRITE_MATRIX=1`` rewrites them)."""

from __future__ import annotations

import os
import re
from contextlib import nullcontext
from pathlib import Path

import dspy
import pytest
from matrix_cells import CONFIGURED, MODULES, SPEC_KEY, layouts, plain_lm
from matrix_compilers import COMPILERS
from matrix_context import Ctx, check_routing
from matrix_design import ALL_ENTRY_POINTS, CELLS, END, NESTED_ENTRY_POINTS, START, Cell, render
from matrix_log import Roles
from matrix_nested import CONTEXT_MODEL, NEST_TITLES
from matrix_responder import MatrixResponder

from dspy_for.errors import ConfigError
from dspy_for.lm.factory import configure_cache
from dspy_for.testing.server import OpenAICompatibleServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "dspy.md"


def run_cell(cell: Cell, server: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run one cell; "works" or the refusal's message. Fails on a misrouted call, a broken promise, or a refusal
    that is not a ``ConfigError`` before any LM call."""
    spec = MODULES[cell.module]
    layout = layouts(spec)[cell.layout]
    if layout.spec:  # spec strings are resolved by make_lm: the endpoint and key come from the environment
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SPEC_KEY)
        monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))  # make_lm caches: a fresh cache
        configure_cache(tmp_path / "cache")
    dspy.configure(lm=plain_lm(server.base_url, CONFIGURED))
    server.responder = responder = MatrixResponder()
    ctx = Ctx(server, responder, spec, layout, tmp_path)
    failure: BaseException | None = None
    swapped = dspy.context(lm=plain_lm(server.base_url, CONTEXT_MODEL)) if layout.nest == "context" else nullcontext()
    try:
        with swapped:
            ALL_ENTRY_POINTS[cell.entry].run(ctx)
    except BaseException as exc:  # routing is checked first: a misrouted call is the headline
        failure = exc
    try:
        check_routing(ctx)
    except AssertionError as misrouted:
        raise misrouted from failure
    if failure is None:
        return "works"
    if not isinstance(failure, ConfigError):
        raise failure
    late = ctx.calls(ctx.checkpoint)
    assert not late, f"refused after {len(late)} LM call(s): {failure}"
    assert re.search(r"`[^`]+`", str(failure)), f"the refusal names no option or fix: {failure}"
    return str(failure)


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_cell(cell: Cell, fault_server: OpenAICompatibleServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    outcome = run_cell(cell, fault_server, tmp_path, monkeypatch)
    if cell.refusal is None:
        assert outcome == "works", f"refused, but the matrix says it works: {outcome}"
    else:
        assert outcome != "works" and cell.refusal.says in outcome, f"expected a refusal saying {cell.refusal.says!r}"


# ------------------------------------------------------------------------------------ the design itself


def test_every_module_meets_every_entry_point():
    for m in MODULES:
        assert {c.entry for c in CELLS if c.module == m} == set(ALL_ENTRY_POINTS), m


def test_best_of_n_and_refine_meet_every_layout_but_spec_strings():
    for m, spec in MODULES.items():
        for e in ("best_of_n", "refine"):
            flat = {c.layout for c in CELLS if (c.module, c.entry) == (m, e) and c.layout not in NEST_TITLES}
            assert flat == set(layouts(spec)) - {"spec", *NEST_TITLES}


def test_every_module_meets_every_entry_point_where_nesting_matters_in_a_nested_layout():
    for m in MODULES:
        nested = {c.entry for c in CELLS if c.module == m and c.layout in NEST_TITLES}
        assert nested == set(NESTED_ENTRY_POINTS), m
    for m in ("for", "prorefine"):
        for nest in NEST_TITLES:
            assert {c.entry for c in CELLS if (c.module, c.layout) == (m, nest)} >= set(COMPILERS), (m, nest)


def test_every_registered_module_is_in_the_matrix():
    """Every registered method with several roles by name; every registered module class by one of its methods."""
    from dspy_for.experiments.methods import list_methods

    methods = list_methods()
    assert {m.name for m in methods if len(m.roles) > 1} <= set(MODULES)
    assert {m.module for m in methods if m.module is not None} <= {s.cls for s in MODULES.values()}


@pytest.mark.parametrize("name", list(MODULES))
def test_every_predictor_has_one_role_readable_from_its_fields(name):
    spec = MODULES[name]
    program = spec.build({})
    assert {n for n, _ in program.named_predictors()} == set(spec.predictors)
    Roles(spec, program)  # raises when two roles' predictors have the same fields


def test_docs_table_is_rendered_from_the_matrix():
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"{DOC} lacks the matrix markers"
    head, rest = text.split(START, 1)
    current, tail = rest.split(END, 1)
    rendered = render(CELLS)
    if os.environ.get("DSPY_FOR_WRITE_MATRIX") == "1":
        DOC.write_text(head + rendered + tail, encoding="utf-8")
        return
    assert START + current + END == rendered, "docs/dspy.md's matrix differs: rerun with DSPY_FOR_WRITE_MATRIX=1"
