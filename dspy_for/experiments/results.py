"""Stored results loaded back: :func:`load_results` turns a comparison's stored records into the
:class:`~dspy_for.experiments.core.outcome.ComparisonResult` ``compare`` returned — the same cells, table and data
frames — from its config and its results directory, with no LM built or called and no item run::

    result = load_results("experiments/quickstart.toml")   # records in the config's `results_dir`, else mlruns/
    result.to_pandas(level="cells")

Each method's records are found where ``compare`` keeps them (``<results_dir>/<dataset>/<split>/<label>.<key>.jsonl``,
the key worked out from the config as the run works it out, without an LM) and matched to the config's items by
content, in the dataset's order; a record stored more than once counts as its last (a failed item that a later run
finished counts as finished). What a loaded result cannot know is said, never made up: its wall times are the
records' own (the run's wall clock is not stored), a method with no stored records is a cell that did not run
(``not run``, every record counted in ``missing``), and a cell with records missing for some items counts them in
``missing`` (a sequential comparison, which stops early by design, counts none: its cells are over the records
stored; its anytime-valid pairs come back with a ``run_id``, from the run's ``sequential.jsonl``, not from a
config).

Where it came from comes with it: the config's path (as given), and, when the config's tracking store is here, the
latest comparison run of the same spec (its ``run_id``) and each record's MLflow trace in it. Several configs
loaded together (``load_results([a, b])``) give one result whose frames line up and keep each record two configs
share once, naming both.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import dspy

from dspy_for.datasets import content_key
from dspy_for.errors import ConfigError
from dspy_for.experiments.comparison import config_name, matched_budget, phases  # as compare orders and sizes
from dspy_for.experiments.core import MethodResult, ResultStore, load_examples
from dspy_for.experiments.core.compile_step import CompileCost
from dspy_for.experiments.core.outcome import ComparisonResult, ComparisonResults
from dspy_for.experiments.core.pairs import BaselinePair
from dspy_for.experiments.core.prepare import result_key, with_options
from dspy_for.experiments.core.records import ItemResult, record_key
from dspy_for.experiments.core.stored_lms import configured_lm
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.reports.compiled import breakeven_of
from dspy_for.experiments.reports.table import summary_cells
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, load_spec
from dspy_for.experiments.spec.config import Overrides
from dspy_for.experiments.spec.model import JudgeConfig
from dspy_for.experiments.tracking.lookup import latest_comparison, record_traces
from dspy_for.experiments.tracking.store import tracking_root
from dspy_for.lm.pricing import Price

if TYPE_CHECKING:
    pass

__all__ = ["items_dir_of", "load_results", "read_records"]

logger = logging.getLogger("dspy_for.experiments")


@overload
def load_results(
    config: ExperimentSpec | str | Path | None = None,
    results_dir: str | Path | None = None,
    *,
    run_id: str | None = None,
    overrides: Overrides | None = None,
    **kwargs: Any,
) -> ComparisonResult: ...


@overload
def load_results(
    config: list[ExperimentSpec | str | Path] | tuple[ExperimentSpec | str | Path, ...],
    results_dir: str | Path | None = None,
    *,
    run_id: None = None,
    overrides: Overrides | None = None,
    **kwargs: Any,
) -> ComparisonResults: ...


def load_results(
    config: ExperimentSpec | str | Path | Sequence[ExperimentSpec | str | Path] | None = None,
    results_dir: str | Path | None = None,
    *,
    run_id: str | None = None,
    overrides: Overrides | None = None,
    **kwargs: Any,
) -> ComparisonResult | ComparisonResults:
    """The comparison ``config`` describes, rebuilt from its stored records (see the module docstring).
    ``results_dir``: where the run kept them (default: the config's ``results_dir``, else ``compare/items`` beside
    its tracking store); ``overrides`` (or keyword arguments, as for ``compare``: ``first=10``, ...) apply first.
    ``run_id`` (instead of ``config``): a comparison's MLflow parent run, whose logged spec stands for the config
    (its store: ``tracking_uri=``, else the default one); its sequential pairs come back with it. Several configs
    (a list): one :class:`~dspy_for.experiments.core.outcome.ComparisonResults` of them all, whose frames line up and
    keep a record they share once. A directory without any record of the config is a
    :class:`~dspy_for.errors.ConfigError` naming the fix."""
    if isinstance(config, ExperimentSpec | str | Path) or config is None:
        return _load(config, results_dir, run_id, overrides, kwargs)
    if run_id is not None:
        raise ConfigError("Give `load_results` configs or a `run_id`, not both.")
    return ComparisonResults([_load(c, results_dir, None, overrides, kwargs) for c in config])


def _load(
    config: ExperimentSpec | str | Path | None,
    results_dir: str | Path | None,
    run_id: str | None,
    overrides: Overrides | None,
    kwargs: dict[str, Any],
) -> ComparisonResult:
    """One comparison's stored records (:func:`load_results`)."""
    mlflow_client: Any = None
    if run_id is not None:
        if config is not None:
            raise ConfigError("Give `load_results` a config or a `run_id`, not both.")
        mlflow_client, config = _comparison_run(run_id, kwargs.get("tracking_uri"))
    spec = load_spec(config, overrides, **kwargs)
    items_dir = items_dir_of(spec, results_dir)
    out = ComparisonResult(spec=spec, run_id=run_id, config=config_name(config))
    if mlflow_client is not None and run_id is not None:
        out.sequential = [BaselinePair.from_row(r) for r in _logged_rows(mlflow_client, run_id, "sequential.jsonl")]
    for d in spec.datasets:
        out.results[d.name], out.errors[d.name] = {}, {}
        examples = load_examples(d)
        for phase in phases(spec):
            for m in phase:
                if spec.match_budget and get_method(m.name).sized is not None:
                    m = with_options(m, matched_budget(spec, out.results[d.name], m))  # as compare sized it
                _load_method(out, items_dir, d, m, examples)
    if not any(r.items for by_label in out.results.values() for r in by_label.values()):
        raise ConfigError(
            f"{items_dir} has no stored records for this config (its datasets, methods, LMs and options): pass the "
            "results directory the comparison used (`--results-dir`) and the same config and flags it ran with, or "
            "run `dspy-for compare` on it first."
        )
    if out.run_id is None:
        out.run_id = latest_comparison(spec.tracking_uri, spec.experiment, spec.fingerprint())
    if out.run_id is not None:
        _with_traces(out, record_traces(spec.tracking_uri, out.run_id))
    out.cells = summary_cells(out)
    out.breakeven = breakeven_of(out)
    return out


def _with_traces(out: ComparisonResult, traces: dict[tuple[str, str], dict[tuple[str, int], str]]) -> None:
    """Each loaded record's trace in the comparison's run, where that run traced it."""
    for dataset, by_label in out.results.items():
        for label, r in by_label.items():
            found = traces.get((dataset, label), {})
            r.trace_ids = {i.key: t for i in r.items if (t := found.get((i.id, i.epoch))) is not None}


def items_dir_of(spec: ExperimentSpec, results_dir: str | Path | None = None) -> Path:
    """Where ``spec``'s records are kept: ``results_dir``, else the spec's ``results_dir``, else ``compare/items``
    beside its tracking store (found, nothing created); a directory that is not there fails, naming the fix."""
    items_dir = Path(results_dir) if results_dir is not None else spec.items_dir(tracking_root(spec.tracking_uri))
    if not items_dir.is_dir():
        raise ConfigError(
            f"No results directory {items_dir}: pass the results directory the comparison used (`--results-dir`, "
            "the config's `results_dir`), or run `dspy-for compare` on this config first."
        )
    return items_dir


def _load_method(
    out: ComparisonResult, items_dir: Path, d: DatasetConfig, m: MethodConfig, examples: list[dspy.Example]
) -> None:
    """One method's stored records on ``d`` into ``out`` (its result, or why it has none)."""
    spec = out.spec
    key = result_key(spec, d, m)
    path = ResultStore.in_dir(items_dir, d.name, d.split, m.label, key).path
    stored = read_records(path) if path.is_file() else {}  # none stored: a cell that did not run
    keys = [content_key(ex.get("question"), ex.get("answer")) for ex in examples]
    wanted = [record_key(k, e) for k in keys for e in range(spec.epochs)]
    items = [stored[k] for k in wanted if k in stored]
    if spec.judge is None:  # a verdict stays in the store, out of a run without a judge
        items = [replace(i, judge=None, judge_usage={}) if i.judge is not None else i for i in items]
    if not stored:
        out.missing.setdefault(d.name, {})[m.label] = len(wanted)
        logger.warning(
            "%s on %s: no stored records (no %s in %s): not run (or run with other settings)",
            m.label,
            d.name,
            path.name,
            path.parent,
        )
    elif len(items) < len(wanted) and not spec.sequential:  # a sequential comparison stops early by design
        out.missing.setdefault(d.name, {})[m.label] = len(wanted) - len(items)
        logger.warning(
            "%s on %s: %d of %d record(s) are not stored (the run did not finish them): its numbers are over "
            "the %d stored; run `dspy-for compare` on the config to finish it",
            m.label,
            d.name,
            len(wanted) - len(items),
            len(wanted),
            len(items),
        )
    cached = items_dir / d.name / d.split / f"{m.label}.{key}.compiled.json"
    kind = str((m.compile or {}).get("kind", ""))
    compiled = CompileCost.load(cached, kind) if m.compile and cached.is_file() else None
    lms, prices = _role_lms(spec, m)
    out.results[d.name][m.label] = MethodResult(
        label=m.label,
        items=items,
        wall_time=0.0,
        reused_time=sum(i.wall_time for i in items),  # every record is reused: each keeps the time it took
        reducer=spec.reducer,
        compile=compiled,
        lms=lms,
        prices=prices,
        store=path,
    )


def read_records(path: Path) -> dict[str, ItemResult]:
    """Every record of a results file by record key, the last one of a key counting (a failed item a later run
    finished is finished); the file is only read, as the store reads it (:meth:`~dspy_for.experiments.core.store.
    ResultStore.records`): a torn last line, left by a killed run, is skipped, and a line that is not a record is
    skipped with a warning naming it."""
    return ResultStore(path).records(repair=False)


def _role_lms(spec: ExperimentSpec, m: MethodConfig) -> tuple[dict[str, str], dict[str, Price]]:
    """Each role's LM name (the ``model`` the built LM would have) and declared price, from the config alone."""
    lms: dict[str, str] = {}
    prices: dict[str, Price] = {}
    for r in get_method(m.name).roles:
        lms[r], price = configured_lm(spec.lm_for(r, m.role_lms), spec.lm_options_for(r))
        if price is not None:
            prices[r] = price
    return lms, prices


# ------------------------------------------------------------------------------------------------ a run id


def _comparison_run(run_id: str, tracking_uri: str | None) -> tuple[Any, ExperimentSpec]:
    """An MLflow client of the store of ``run_id`` (a comparison's parent run) and the spec it logged (its
    ``spec.*`` params)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments.tracking.store import default_tracking_uri

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :].split("?", 1)[0]).is_file():
        raise ConfigError(f"No MLflow store at {uri}: pass the `tracking_uri` the comparison logged to.")
    client = MlflowClient(uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise ConfigError(f"No MLflow run {run_id!r} in {uri}: pass a comparison's parent run id.") from None
    kind = run.data.tags.get("dspy_for.kind")
    if kind != "comparison":
        raise ConfigError(
            f"MLflow run {run_id} is not a comparison's parent run (its kind: {kind or 'none'}): pass the run "
            "`dspy-for compare` printed, or the comparison's config."
        )
    return client, _logged_spec(run_id, run.data.params)


def _logged_spec(run_id: str, params: dict[str, str]) -> ExperimentSpec:
    """The spec a comparison logged as ``spec.*`` params (flattened, each value JSON unless it was text)."""
    data: dict[str, Any] = {}
    for key, text in params.items():
        if not key.startswith("spec.") or key == "spec.time":
            continue
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        *parents, leaf = key[len("spec.") :].split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    where = f"MLflow run {run_id}"
    if not isinstance(data.get("datasets"), list) or not isinstance(data.get("methods"), list):
        raise ConfigError(f"{where} has no readable spec (its params were cut short): load it with its config.")
    if any(isinstance(v, dict) for v in [data.get("lm"), *(data.get("role_lms") or {}).values()]):
        raise ConfigError(f"{where} ran with an LM object, not a model string: load it with its spec (Python).")
    try:
        return ExperimentSpec(
            datasets=[DatasetConfig(**d) for d in data.pop("datasets")],
            methods=[MethodConfig(**m) for m in data.pop("methods")],
            judge=JudgeConfig(**j) if (j := data.pop("judge", None)) else None,
            **{k: v for k, v in data.items() if v is not None},
        )
    except TypeError as exc:
        raise ConfigError(f"{where}: its logged spec is not one this version reads ({exc}); use its config.") from None


def _logged_rows(client: Any, run_id: str, name: str) -> list[dict[str, Any]]:
    """The rows of a JSONL table logged on ``run_id`` (none when it has no such artifact)."""
    if name not in {a.path for a in client.list_artifacts(run_id)}:
        return []
    text = Path(client.download_artifacts(run_id, name)).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
