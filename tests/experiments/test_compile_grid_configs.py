"""The compile grid's configs (``experiments/compile_grid*.toml``), checked without any LM call: each loads and its
compile tables pass the compile check; every cell without a compile step replays stored records (its result key names
a stored file holding at least the items the config scores), but the new ones named in :data:`NEW`; no compile decides on an item a cell scores (on the
real data); each header says how to run it and how to see, before it runs, what it takes (``--dry-run``), and that
dry run gives every cell's LM time even with nothing stored."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import dspy_for.experiments.core.compile_step as compile_step
from dspy_for.datasets import content_key, dataset_info, signature_for
from dspy_for.experiments.core.compile_step import compile_for_run
from dspy_for.experiments.core.plan import plan_compare
from dspy_for.experiments.methods import check_compile, get_method
from dspy_for.experiments.spec.config import load_spec
from dspy_for.experiments.spec.model import ExperimentSpec, load_examples, prompts_fingerprint
from dspy_for.optimizers import CompileResult

ROOT = Path(__file__).resolve().parents[2]
GRID = sorted((ROOT / "experiments").glob("compile_grid*.toml"))
#: the cells without a compile step that the grid runs (every other one replays stored records)
NEW = {("compile_grid_gsm8k.toml", "for_a0")}


def test_the_grid_is_there():
    assert {p.name for p in GRID} >= {
        "compile_grid_prorefine.toml",
        "compile_grid_prorefine_aqua.toml",
        "compile_grid_bbh.toml",
        "compile_grid_bbh_30.toml",
        "compile_grid_gsm8k.toml",
        "compile_grid_gsm8k_30.toml",
    }


def result_key(spec: ExperimentSpec, dataset, method) -> str:
    """The key a run stores ``method``'s items under, as the run computes it, from the program built without LMs."""
    entry = get_method(method.name)
    own, _ = entry.split_options(method.options)
    program = entry.build(signature_for(dataset.name), dict.fromkeys(entry.roles), entry.with_defaults(own))
    return spec.item_key(dataset, method, method.options, entry.roles, prompts_fingerprint(program), entry.revision)


@pytest.mark.parametrize("path", GRID, ids=lambda p: p.name)
def test_a_grid_config_checks_and_its_uncompiled_cells_are_stored(path):
    spec = load_spec(path)
    assert spec.results_dir and any(m.compile for m in spec.methods)
    for dataset in spec.datasets:
        for method in spec.methods:
            check_compile(
                method.name,
                method.options,
                method.compile,
                label=method.label,
                splits=dataset_info(dataset.name).splits,
            )
            if method.compile or (path.name, method.label) in NEW:
                continue
            stored = (
                ROOT
                / spec.results_dir
                / dataset.name
                / dataset.split
                / f"{method.label}.{result_key(spec, dataset, method)}.jsonl"
            )
            assert stored.is_file(), f"{path.name}: {method.label} on {dataset.name} would not replay ({stored.name})"
            assert len(stored.read_text(encoding="utf-8").splitlines()) >= (dataset.first or 0)
    text = path.read_text(encoding="utf-8")
    assert f"dspy-for compare experiments/{path.name} --data-dir DATA_DIR\n" in text
    assert f"dspy-for compare experiments/{path.name} --data-dir DATA_DIR --dry-run\n" in text, (
        "the header gives the plan"
    )


@pytest.mark.parametrize("path", GRID, ids=lambda p: p.name)
def test_the_dry_run_gives_every_cells_lm_time_from_the_other_cells(path, shared_datasets, no_lm_no_run, monkeypatch):
    """What the header's LM-time comment used to give by hand: each cell's LM time, its own records hidden (as if it
    had not run), estimated from the other cells'."""
    monkeypatch.chdir(ROOT)
    spec = dataclasses.replace(load_spec(path), datasets=[])
    for dataset in load_spec(path).datasets:
        d = dataclasses.replace(dataset, data_dir=str(shared_datasets))
        one = dataclasses.replace(spec, datasets=[d])
        for method in one.methods:
            plan = plan_compare(one, ROOT / str(one.results_dir), exclude=[(d.name, d.split, method.label)])
            for cell in (c for c in plan.cells if c.label == method.label):
                assert cell.error is None and cell.to_run > 0, (path.name, cell)
                assert cell.seconds is not None and cell.seconds.value > 0, (
                    path.name,
                    cell.label,
                    cell.step,
                    cell.source,
                )


@pytest.mark.parametrize("path", GRID, ids=lambda p: p.name)
def test_no_compile_decides_on_an_item_a_cell_scores(path, shared_datasets, monkeypatch):
    seen: dict[str, tuple[list, list]] = {}

    def record(kind, program, *, trainset, valset, **_):
        seen["sets"] = (trainset, valset)
        return CompileResult(program=program, kind=kind, usage={})

    monkeypatch.setattr(compile_step, "compile_program", record)
    spec = load_spec(path)
    for dataset in spec.datasets:
        dataset = dataclasses.replace(dataset, data_dir=str(shared_datasets))
        scored = load_examples(dataset)
        keys = {content_key(ex.get("question"), ex.get("answer")) for ex in scored}
        for method in (m for m in spec.methods if m.compile):
            entry = get_method(method.name)
            program = entry.build(
                signature_for(dataset.name), dict.fromkeys(entry.roles), entry.with_defaults(method.options)
            )
            _, cost = compile_for_run(program, method, dataset, metric=None, seed=0, optimizer_lm=None, scored=scored)
            train, val = seen.pop("sets")
            decided = {content_key(ex.get("question"), ex.get("answer")) for ex in [*train, *val]}
            assert train and (val or method.compile["kind"] == "bootstrap") and not decided & keys
            # only AQuA, without a local train split, trains on the split it scores: the rest never meet a scored item
            assert (cost.left_out > 0) == (method.compile["trainset"] == dataset.split), (path.name, method.label)
