"""The data frames' columns, each declared once as a :class:`~dspy_for.experiments.spec.measures.Measure`: its
name, type and meaning. A cell's numbers are its summary's declared measures
(:data:`~dspy_for.experiments.core.summary.MEASURES`); the other columns are declared here: what identifies a row,
where it came from (:data:`PROVENANCE`: the run, the experiment, the config, each role's LM), a record's own values.
:func:`typed_frame` builds a frame of rows with these columns first and each column of the type its declaration
says (nullable integers for counts, nullable booleans for flags, UTC times, ``method`` ordered as the table)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.summary import MEASURES
from dspy_for.experiments.spec.measures import (
    REFERENCE_DETAIL_HEADER,
    REFERENCE_HEADER,
    Kind,
    Measure,
    column_dtype,
    keyed_columns,
    reference_rows,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CANDIDATE_COLUMNS",
    "CELL_COLUMNS",
    "ITEM_COLUMNS",
    "PAIR_COLUMNS",
    "PROVENANCE",
    "TRIAL_COLUMNS",
    "column",
    "fixed_names",
    "reference_tables",
    "typed_frame",
]


def column(name: str, kind: Kind, meaning: str, *, key: str = "key", values: Kind | None = None) -> Measure:
    """A frame column declared on its own (``kind`` ``mapping`` for ``<name>.<key>`` columns of ``values``)."""
    return Measure(meaning, name=name, kind=kind, key=key, values=values)


_HEAD = (
    column("dataset", "str", "the dataset's name"),
    column("split", "str", "its split"),
    column("method", "str", "the method's label in the run, ordered as the table orders them"),
    column("method_name", "str", "its registry name"),
)

#: where every row of every level comes from
PROVENANCE = (
    column("run_id", "str", "the comparison's (advice's, sweep's) MLflow run; `; `-joined when runs share the row"),
    column("experiment", "str", "its MLflow experiment"),
    column("config", "str", "the config file it ran from (its path as given); `; `-joined when configs share the row"),
    column("lm", "mapping", "each role's LM as the config names it", key="role", values="str"),
)

ITEM_COLUMNS = (
    *_HEAD,
    column("item_id", "str", "the item's id in its dataset (e.g. `gsm8k/sample/0`)"),
    column("item_key", "str", "the item's content key (its question and gold): how stored results are matched"),
    column("epoch", "int", "which repeat of the item (0: the first; `epochs = k` gives 0..k-1)"),
    column("question", "str", "the item's question"),
    column("gold", "str", "its gold answer, as text (a number as Python writes it: `2200.0`)"),
    column("answer", "str", "the answer as given (its `answer` output, else every output but the reasoning, as JSON)"),
    column("score", "float", "the metric's score (an unparsed answer scores 0); missing for a failed item"),
    column("failed", "bool", "an LM call failed or the method raised: left out of accuracy and tokens"),
    column("unparsed", "bool", "the method answered, but its output could not be parsed (scored 0)"),
    column("error_class", "str", "a failed item's exception class (`APIConnectionError`, `Timeout`, ...)"),
    column("error", "str", "a failed item's error, secrets masked"),
    column("tokens", "int", "prompt + completion tokens of its LM calls, cache hits at their original size"),
    column("calls", "int", "its LM calls"),
    column(
        "cost",
        "float",
        "USD of its LM calls priced as its cell is (recorded costs, cache hits at their original price, or its "
        "tokens at the declared `price`); missing when a call has no price",
    ),
    column("seconds", "float", "the method's own time on the item (its call, start to end, as it ran)"),
    column("cache_served", "bool", "DSPy's cache served at least one of its LM calls"),
    column("served_by", "str", "what served its LM calls (each serving identity, `; `-joined); missing: not recorded"),
    column("started_at", "time", "when the item started (UTC); missing in records kept before starts were"),
    column("origin", "str", "the MLflow run that produced the record"),
    column("trace_id", "str", "the record's MLflow trace in the comparison's run; missing when it was not traced"),
    *PROVENANCE,
    column("tokens", "mapping", "the same, per role", key="role", values="int"),
    column("calls", "mapping", "per role", key="role", values="int"),
    column("cost", "mapping", "per role", key="role", values="float"),
    column("seconds", "mapping", "the time of the role's LM calls", key="role", values="float"),
    column("judge", "mapping", "with a judge: its verdict (`correct`, `method`, `reasoning`, ...)"),
)

CELL_COLUMNS = (
    *_HEAD,
    column("status", "str", "`measured`, `not run` (no record), `failed` (every record failed), `could not run`"),
    column("error", "str", "why the method could not run (its numbers then missing)"),
    *MEASURES,
    column("served_by", "str", "what served the method's scored answers: every identity, `; `-joined"),
    column("missing", "int", "`load_results` only: records the config asks for that are not stored"),
    *PROVENANCE,
    column("diagnostics", "mapping", "what the method's registry entry reports on its records (FOR: `flips`, ...)"),
    column(
        "breakeven",
        "mapping",
        "a compiled method's break-even volume (items) against another method; in tokens, one per LM: "
        "`breakeven.<against>.<lm>`",
        key="against",
        values="float",
    ),
)

PAIR_COLUMNS = (
    column("dataset", "str", "the dataset's name"),
    column("split", "str", "its split"),
    column("method", "str", "the method tested (an advice: candidate `a`)"),
    column("baseline", "str", "what it was tested against (an advice: candidate `b`)"),
    column("score", "str", "what was paired: `accuracy`, `judged_accuracy`, `quality.<rubric>`"),
    column("paired_test", "str", "`mcnemar_exact`, `paired_bootstrap`, or `sequential_binary` / `sequential_bounded`"),
    column("paired_n", "int", "items paired"),
    column("delta", "float", "the method's value minus the baseline's"),
    column("delta_low", "float", "its 95% interval (a sequential test: its confidence sequence), low end"),
    column("delta_high", "float", "high end"),
    column("p_value", "float", "the test's p (a sequential test has an e-value instead)"),
    column("resolved", "bool", "a sequential test: it resolved"),
    column("e_value", "float", "a sequential test's evidence against no difference"),
    column("threshold", "float", "the e-value at which it resolves"),
    column("direction", "int", "+1: the method better, −1: worse, 0: unresolved"),
    column("stopped_at", "int", "the n at which it resolved"),
    column("wins", "int", "items where the method scored higher"),
    column("losses", "int", "items where it scored lower"),
    column("alpha", "float", "the test's level"),
    *PROVENANCE,
)

CANDIDATE_COLUMNS = (
    *_HEAD,
    column(
        "status", "str", "`recommended`, `in the running`, `over budget`, `resolved worse`, `failed`, `not run`, ..."
    ),
    column("recommended", "bool", "it is the recommendation"),
    column("reason", "str", "why it has its status"),
    column("n", "int", "scored items"),
    column("failed", "int", "failed items"),
    column("accuracy", "float", "as in the cells"),
    column("ci_low", "float", "as in the cells"),
    column("ci_high", "float", "as in the cells"),
    column("tokens_per_item", "float", "as in the cells"),
    column("cost_per_item", "float", "as in the cells; missing when an LM has no price"),
    column("sized", "str", "how its sized option was set from the budget"),
    column("served_by", "str", "as in the cells"),
    *PROVENANCE,
    column("options", "mapping", "each option it ran with", key="name"),
    column("compile", "mapping", "with `--compile`: its compile cost"),
)

TRIAL_COLUMNS = (
    column("trial", "int", "the trial's number"),
    column("state", "str", "`COMPLETE`, `PRUNED`, `FAIL`, `RUNNING`, `WAITING`"),
    column("<objective>", "float", "each objective's value, by its name (`accuracy`, `tokens_per_item`, ...)"),
    column("options", "mapping", "each searched option's value", key="name"),
    column(
        "<user attribute>",
        "float",
        "each number the trial recorded, by its name: `n_items`, `n_failed`, `n_unparsed`, `tokens_per_item`, "
        "`spent_tokens`, `cached_tokens`, `calls`, `spent_usd`, `compile_tokens`, `compile_calls`, "
        "`objective.<name>`, `mlflow_run_id`, `worker`, `retry_of`, `enqueued`",
    ),
    column("started", "time", "when it started (UTC)"),
    column("completed", "time", "when it ended (UTC)"),
    column("seconds", "float", "how long it took"),
    *PROVENANCE,
)


def reference_tables() -> dict[str, list[str]]:
    """Each frame's column table in ``docs/reference.md`` (by its marker: ``frame.items``, ...), header included,
    made from the declarations; the cells' with each measure's unit, aggregation, table column and MLflow metric."""
    plain = {"frame.items": ITEM_COLUMNS, "frame.pairs": PAIR_COLUMNS}
    plain |= {"frame.candidates": CANDIDATE_COLUMNS, "frame.trials": TRIAL_COLUMNS}
    tables = {name: [*REFERENCE_HEADER, *reference_rows(cols)] for name, cols in plain.items()}
    tables["frame.cells"] = [*REFERENCE_DETAIL_HEADER, *reference_rows(CELL_COLUMNS, detail=True)]
    return tables


def fixed_names(columns: Sequence[Measure]) -> list[str]:
    """The columns every frame of ``columns`` has, in order (those of one value: not ``<name>.<key>`` ones)."""
    return [name for name, _, _, always in keyed_columns(columns) if always]


def _kinds(columns: Sequence[Measure]) -> tuple[dict[str, Kind], dict[str, Kind]]:
    """Each declared column's kind, and each ``<name>.`` prefix's (the kind of its values, where declared)."""
    fixed: dict[str, Kind] = {}
    prefixes: dict[str, Kind] = {}
    for name, m, _, _ in keyed_columns(columns):
        if "<" not in name:
            fixed[name] = m.kind
        elif name.count("<") == 1 and name.endswith(">") and m.values is not None:
            prefixes[name[: name.index("<")]] = m.values
    return fixed, prefixes


def typed_frame(
    rows: Iterable[Mapping[str, Any]], columns: Sequence[Measure], methods: Sequence[str] = ()
) -> pd.DataFrame:
    """A frame of ``rows``: the fixed columns of ``columns`` first (present even with no rows), then every other
    column any row has, sorted; each of the type its declaration gives (nullable integers, nullable booleans,
    ``float64``, nullable text, UTC times; undeclared ones as pandas reads them), and ``method`` an ordered
    categorical in the order ``methods`` gives (the table's)."""
    import pandas as pd

    rows = [dict(r) for r in rows]
    declared, prefixes = _kinds(columns)
    names = fixed_names(columns)
    extra = sorted({k for r in rows for k in r} - set(names))
    out = pd.DataFrame(rows, columns=[*names, *extra])
    for name in out.columns:
        kind = declared.get(name) or next((k for p, k in prefixes.items() if name.startswith(p)), None)
        kind = kind or _inferred(r.get(name) for r in rows)
        if kind == "time":
            stamps = pd.to_datetime(pd.Series([_utc(r.get(name)) for r in rows], dtype=object), utc=True)
            out[name] = stamps.dt.as_unit("us")
        elif kind == "str":
            out[name] = pd.array([None if _missing(v) else str(v) for v in out[name]], dtype="string")
        elif kind is not None and (dtype := column_dtype(kind)) is not None:
            out[name] = out[name].astype(dtype)
    if "method" in out.columns:
        order = list(dict.fromkeys([*methods, *(m for m in out["method"] if not _missing(m))]))
        out["method"] = pd.Categorical(out["method"], categories=order, ordered=True)
    return out


def _inferred(values: Iterable[object]) -> Kind | None:
    """An undeclared column's kind, from its values: flags, whole numbers, numbers or text when they all are one."""
    present = [v for v in values if not _missing(v)]
    if not present:
        return None
    if all(isinstance(v, bool) for v in present):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "float"
    return "str" if all(isinstance(v, str) for v in present) else None


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _utc(value: object) -> datetime | None:
    """A time as an aware UTC datetime: Unix seconds, or a datetime (a naive one is local time, as Optuna's)."""
    if _missing(value):
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromtimestamp(float(value), UTC)  # type: ignore[arg-type]
