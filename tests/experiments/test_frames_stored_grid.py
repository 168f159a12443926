"""The frames an analyst gets from the stored GSM8K grid (its records are in git: experiments/results/for/), loaded
with ``load_results`` and no LM: every row says where it came from, every column has one type whichever frame it is
in, the two configs that share records line up and keep each shared record once, a cell with no records says "not
run", and items priced from their tokens carry the dollars their cell shows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dspy_for.experiments.core.prepare as prepare_mod
from dspy_for.experiments import load_results

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"
GRID, MEASURE = "experiments/compile_grid_gsm8k.toml", "experiments/for_measure.toml"
#: what identifies one stored record
RECORD = ["dataset", "split", "method", "item_key", "epoch", "lm.task", "lm.defender"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The grid and FOR's measure config, each alone and both together, read from the stored records (no LM; a
    tracking store of their own, empty: no run to find)."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATASETS}")
    store = tmp_path_factory.mktemp("store") / "mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        mp.setattr(prepare_mod, "make_lm", _no_lm)
        kw = {"data_dir": str(SHARED_DATASETS), "tracking_uri": f"sqlite:///{store}"}
        return {
            "grid": load_results(GRID, **kw),
            "measure": load_results(MEASURE, **kw),
            "both": load_results([GRID, MEASURE], **kw),
        }


def _no_lm(*args, **kwargs):
    raise AssertionError("loading stored results must not build an LM")


def test_every_row_of_every_level_says_where_it_came_from(loaded):
    both = loaded["both"]
    for level in ("items", "cells", "pairs"):
        frame = both.to_pandas(level=level)
        assert {"run_id", "experiment", "config"} <= set(frame.columns), level
        assert frame["experiment"].notna().all() and frame["config"].notna().all(), level
        assert set(frame["experiment"]) >= {"compile_grid"}, level
        lms = [c for c in frame.columns if c.startswith("lm.")]
        assert lms and frame[lms].notna().any(axis=1).all(), f"{level}: a row names no LM"
        assert frame["run_id"].isna().all(), level  # no run of them in this store: missing, never made up
    items = both.to_pandas()
    assert set(items["lm.task"].dropna()) == {"local/qwen2.5-coder-1.5b"}
    assert {"served_by", "trace_id"} <= set(items.columns)  # these older records kept no serving identity: missing
    assert loaded["grid"].config == GRID and loaded["grid"].to_pandas()["config"].eq(GRID).all()


def test_counts_flags_methods_times_and_gold_each_have_one_type(loaded):
    for name, result in loaded.items():
        items, cells = result.to_pandas(), result.to_pandas(level="cells")
        assert str(items["epoch"].dtype) == str(items["tokens"].dtype) == "Int64", name
        assert str(items["failed"].dtype) == str(items["unparsed"].dtype) == "boolean", name
        assert str(items["gold"].dtype) == "string", name
        assert str(items["started_at"].dtype).startswith("datetime64") and str(items["started_at"].dt.tz) == "UTC"
        assert str(cells["n"].dtype) == str(cells["failed"].dtype) == str(cells["missing"].dtype) == "Int64", name
        assert str(cells["mixed_serving"].dtype) == "boolean", name
        assert isinstance(items["method"].dtype, pd.CategoricalDtype) and items["method"].cat.ordered, name
    grid = loaded["grid"].to_pandas(level="cells")
    assert list(grid["method"].cat.categories) == [c.label for c in loaded["grid"].cells]  # the table's order
    assert list(grid["method"]) == [c.label for c in loaded["grid"].cells]


def test_two_configs_that_share_records_line_up_without_duplicates(loaded):
    alone = pd.concat([loaded["grid"].to_pandas(), loaded["measure"].to_pandas()])
    shared = alone.duplicated(RECORD).sum()
    assert shared > 0  # the two configs read some of the same records (cot, FOR N=1 + Host)
    both = loaded["both"].to_pandas()
    assert not both.duplicated(RECORD).any() and len(both) == len(alone) - shared
    cot = both[both["method"] == "cot"]
    assert set(cot["config"]) == {f"{GRID}; {MEASURE}"}  # a shared record names every config that used it
    assert set(both[both["method"] == "for_a0"]["config"]) == {GRID}
    frames = [loaded[n].to_pandas() for n in ("grid", "measure")]
    for column in ("gold", "epoch", "failed", "started_at", "cost", "lm.task"):
        assert len({str(f[column].dtype) for f in [*frames, both]}) == 1, column
    cells = loaded["both"].to_pandas(level="cells")
    assert cells.groupby("config").size().to_dict() == {GRID: 8, MEASURE: 6}  # a cell per config: its own n, Δ


def test_a_cell_with_no_records_says_not_run(loaded):
    cells = loaded["grid"].to_pandas(level="cells").set_index("method")
    mipro = cells.loc["cot_mipro"]
    assert mipro["status"] == "not run" and pd.isna(mipro["accuracy"]) and pd.isna(mipro["error"])
    assert mipro["missing"] == 50 and mipro["n"] == 0
    assert (cells.drop(index="cot_mipro")["status"] == "measured").all()


def test_items_priced_from_their_tokens_carry_the_dollars_their_cell_shows(loaded):
    """The grid declares a price; its oldest records were stored without a cost: the cell prices them from their tokens,
    and so does each of its items, the same way (their mean is the cell's $/item)."""
    items = loaded["grid"].to_pandas()
    cells = loaded["grid"].to_pandas(level="cells").set_index("method")
    assert items["cost"].notna().all()
    for method, group in items.groupby("method", observed=True):
        scored = group[~group["failed"]]
        assert scored["cost"].mean() == pytest.approx(cells.loc[method, "cost_per_item"]), method
    assert items[items["method"] == "cot"]["cost.task"].notna().all()
    measure = loaded["measure"].to_pandas()  # no price declared there: a local model's, $0, as its cells say
    assert (measure["cost"] == 0).all() and (loaded["measure"].to_pandas(level="cells")["cost_per_item"] == 0).all()
