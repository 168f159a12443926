"""A method is one registry entry: how a budget sizes it, the settings advise tries, how its trajectory reads (span
names, what ``ask`` shows, diagnostics) are declared on it — once per module for the methods on one module — and
its options are checked once per run."""

from __future__ import annotations

import ast
from pathlib import Path

import dspy
import pytest

from dspy_for.errors import ConfigError
from dspy_for.experiments.core.prepare import prepare_program, prepare_run
from dspy_for.experiments.methods import MethodEntry, Sized, budget_calls, entry, get_method, list_methods
from dspy_for.experiments.spec.config import Overrides, load_spec
from dspy_for.modules.for_view import FOR_VIEW
from dspy_for.modules.prorefine_view import PROREFINE_VIEW


def test_methods_on_one_module_share_what_it_declares():
    for name, base in (("for_paper", "for"), ("prorefine_paper", "prorefine"), ("defender_sc", "self_consistency")):
        a, b = get_method(name), get_method(base)
        assert (a.roles, a.view, a.sized, a.budget_reference) == (b.roles, b.view, b.sized, b.budget_reference)
    assert get_method("for").view is FOR_VIEW and get_method("prorefine").view is PROREFINE_VIEW
    assert get_method("for").budget_reference and get_method("for_paper").budget_reference
    assert get_method("self_consistency").sized == Sized("k", least=2) and get_method("refine").sized == Sized("N")
    assert get_method("cascade").view is None and get_method("cot").sized is None


def test_one_budget_sizer_rounds_to_the_nearest_call():
    assert [budget_calls(b, 100) for b in (773, 751, 750, 749, 40)] == [8, 8, 7, 7, 0]
    assert budget_calls(0.0003 / 0.0001 * 640, 640) == 3  # a ratio of measured numbers, not 2 by a rounding error
    assert budget_calls(3.5 * 0.7 / 0.7 * 640, 640) == 3  # a half, give or take a rounding error, rounds down
    assert budget_calls(5021, 640) == budget_calls(4806, 622) == 8  # matched_budget.toml's stored k = N = 8
    sc, refine = get_method("self_consistency"), get_method("refine")
    assert sc.sized_to({"stop": "agreement"}, 4806, 622) == {"stop": "agreement", "k": 8}
    assert sc.sized_to({}, 140, 100) is None  # one sample is no vote
    assert refine.sized_to({}, 140, 100) == {"N": 1}
    assert get_method("cot").sized_to({}, 1000, 100) == {}


def test_presets_are_the_entries_own():
    labels = [p.label for p in get_method("self_consistency").presets]
    assert labels == ["self_consistency", "self_consistency_agreement"]
    assert get_method("for").presets[0].options == {"rounds": 1, "host": True}
    assert get_method("for_paper").presets == ()  # not the base method's: its options are fixed


def test_ask_needs_no_dataset():
    program = prepare_program("for", "question -> answer", {"rounds": 2}, Overrides(lm="openai/fake", max_tokens=64))
    assert program.rounds == 2
    with pytest.raises(ConfigError, match="no role `debater`"):
        prepare_program("cot", "question -> answer", {}, Overrides(lm="openai/fake", role_lms=["debater=openai/x"]))
    with pytest.raises(ConfigError, match="Unknown option `rounds`"):
        prepare_program("cot", "question -> answer", {"rounds": 1}, Overrides(lm="openai/fake"))


def test_options_are_checked_once_per_run(monkeypatch):
    built: list[dict[str, object]] = []

    def factory(sig, lms, **options):
        built.append(options)
        return dspy.Predict(sig)

    monkeypatch.setitem(entry._REGISTRY, "counted", MethodEntry("counted", "counts its builds", factory))
    spec = load_spec(None, lm="openai/fake", dataset="gsm8k", split="sample", methods="counted")
    assert len(built) == 1  # the spec's check: built without LMs
    prepare_run(spec, spec.datasets[0], spec.methods[0])
    assert len(built) == 2  # and the run's program: built once


HARNESS = ["comparison.py", "advisor", "tracking", "reports"]


def test_the_harness_names_no_registered_method_but_the_baseline():
    """comparison, advisor, tracking, reports and render read what they need of a method from its registry entry: no
    string in their code (docstrings aside) is a registered method's name, but CoT's (the unit of a budget)."""
    root = Path(__file__).resolve().parents[2] / "dspy_for"
    files = [root / "render.py"]
    for part in HARNESS:
        path = root / "experiments" / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    names = {m.name for m in list_methods()} - {"cot"}
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        found += [
            f"{path.relative_to(root)}:{node.lineno} {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
        ]
    assert not found
