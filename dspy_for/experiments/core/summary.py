"""What a result reports, declared once: :class:`Summary`, one method's numbers on one dataset (with its judge's:
:class:`~dspy_for.experiments.core.judge_summary.JudgeSummary`).

Every number of a summary is a field whose annotation declares it as a
:class:`~dspy_for.experiments.spec.measures.Measure` — its meaning, unit, aggregation, table column and legend,
frame column and MLflow metric — and the table, the MLflow metrics, the data frames and the column reference read
those declarations (:data:`MEASURES`). :func:`~dspy_for.experiments.core.summarize.summarize` computes them.

Numbers are over the *scored* items only; failed items are errors, counted apart and never a score. When no
item was scored, accuracy, its interval and every cost are ``None`` (absent), never 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any

from dspy_for.experiments.core.compile_step import CompileCost
from dspy_for.experiments.core.judge_summary import JudgeSummary
from dspy_for.experiments.spec.measures import Measure, measures_of, metrics_of, plain
from dspy_for.lm.pricing import Price
from dspy_for.stats import Spread

__all__ = ["MEASURES", "Summary"]

_PER_ANSWER = "per scored answer"
_SECONDS = (
    "s/item: seconds of the method's own call per scored answer, as it ran (items run side by side overlap, so these "
    "do not add up to the run's time; answers every one of whose LM calls DSPy's cache served are left out, '-' when "
    "every answer was)"
)
_MIXED = (
    "†: the cell's records were served by more than one stack (another model snapshot, system_fingerprint, local "
    "server build or slots, or model file; see 'served by' below): an answer can change with the stack alone, so part "
    "of the cell's accuracy and Δ may be the stack's; --rerun-changed runs the records another stack served again"
)
_COMPILE = (
    "compile: what the method's compile step cost once (prompt+completion tokens of every LM it called, USD where "
    "every call is priced, wall seconds), 'reused' when the compiled program came from the cache: its first "
    "compile's cost, not spent by this run"
)
_REPEATS = (
    "n×k: items × epochs, each item's value the {reducers} of its epochs (reducer); the CI (for means: Student's t "
    "over items) and Δ are over items as clusters; tok/item per answer"
)


def _per_role(what: str, unit: str, metric: str, frame: str | None = None) -> Measure:
    """A number per scored answer, per role (``what`` per scored answer, per role)."""
    return Measure(f"{what} per scored answer, per role", unit, _PER_ANSWER, frame=frame, key="role", metric=metric)


@dataclass(frozen=True, kw_only=True)
class Summary:
    """One method's numbers on one dataset (see the module docstring), each declared where it is held."""

    method: str  # the method's label
    n: Annotated[
        int,
        Measure(
            "scored items (those with at least one scored epoch)",
            unit="items",
            aggregated="count",
            shown="items",
            header="n",
            legend="n: scored items",
            metric="n",
        ),
    ]
    failed: Annotated[
        int,
        Measure(
            "failed records (an LM error or the method raised): left out of every number",
            unit="records",
            aggregated="count",
            legend="+N✗: answers that failed (LM errors), left out of accuracy and tokens",
            legend_when="any",
            metric="failed_items",
        ),
    ]
    unparsed: Annotated[
        int,
        Measure(
            "scored records whose answer could not be parsed (scored 0)",
            unit="records",
            aggregated="count",
            metric="unparsed_items",
        ),
    ]
    answers: Annotated[
        int, Measure("scored records (an item's scored epochs)", unit="records", aggregated="count", metric="answers")
    ]
    epochs: Annotated[int, Measure("repeats per item", unit="epochs", metric="epochs")]
    reducer: Annotated[str, Measure("how an item's epochs make its value (`mean`, `majority`, `pass_at_k`)")]
    accuracy: Annotated[
        float | None,
        Measure(
            "mean score over the scored items (each item's value from its epochs)",
            unit="proportion",
            aggregated="mean over scored items",
            shown="interval",
            header="acc % [95% CI]",
            legend="acc: % with Wilson 95% CI",
            metric="accuracy",
        ),
    ] = None
    ci_low: Annotated[
        float | None, Measure("its 95% interval, low end", unit="proportion", metric="accuracy_ci_low")
    ] = None
    ci_high: Annotated[float | None, Measure("high end", unit="proportion", metric="accuracy_ci_high")] = None
    #: against the baseline on the items both scored (matched by content)
    delta: Annotated[
        float | None,
        Measure(
            "accuracy minus the baseline's on the items both scored",
            unit="proportion",
            aggregated="paired items",
            shown="paired",
            header="Δ pts",
            legend="Δ: points vs {baseline} on the items both scored",
        ),
    ] = None
    delta_low: Annotated[float | None, Measure("its 95% interval, low end", unit="proportion")] = None
    delta_high: Annotated[float | None, Measure("high end", unit="proportion")] = None
    p_value: Annotated[float | None, Measure("the paired test's p")] = None
    paired_n: Annotated[int, Measure("items paired with the baseline", unit="items", aggregated="count")] = 0
    paired_test: Annotated[
        str | None, Measure("`mcnemar_exact` (0/1 values) or `paired_bootstrap`: which test gave `p_value`")
    ] = None
    tokens_per_item: Annotated[
        float | None,
        Measure(
            "prompt + completion tokens per scored answer, cache hits at their original size (a cold run's)",
            unit="tokens",
            aggregated=_PER_ANSWER,
            shown="tokens",
            header="tok/item",
            legend="tok/item: prompt+completion tokens per scored item, cache hits at their original cost",
            metric="tokens_per_item",
        ),
    ] = None
    calls_per_item: Annotated[
        float | None,
        Measure("LM calls per scored answer", unit="calls", aggregated=_PER_ANSWER, metric="calls_per_item"),
    ] = None
    completion_tokens_per_item: Annotated[
        float | None,
        Measure(
            "completion tokens per scored answer (how long the answers are; reasoning tokens included), cache hits at "
            "their original size",
            unit="tokens",
            aggregated=_PER_ANSWER,
            metric="completion_tokens_per_item",
        ),
    ] = None
    reasoning_tokens_per_item: Annotated[
        float | None,
        Measure(
            "of the completion tokens, those a reasoning model spent reasoning",
            unit="tokens",
            aggregated=_PER_ANSWER,
            legend="tok/item includes reasoning tokens (see reasoning/item below)",
            legend_when="any",
            metric="reasoning_tokens_per_item",
        ),
    ] = None
    cost_per_item: Annotated[
        float | None,
        Measure(
            "USD per scored answer (a cold run's); missing when an LM has no price",
            unit="USD",
            aggregated=_PER_ANSWER,
            shown="usd",
            header="$/item",
            column_when="any",
            legend=(
                "$/item: USD per scored item at litellm's prices (or the LM's `price`), cache hits at their original "
                "cost; '-': an LM without a price"
            ),
            metric="cost_per_item_usd",
        ),
    ] = None
    seconds_per_item: Annotated[
        float | None,
        Measure(
            "the method's own seconds per scored answer, answers every call of which DSPy's cache served left out",
            unit="seconds",
            aggregated="mean over timed answers",
            shown="seconds",
            header="s/item",
            legend=_SECONDS,
            metric="seconds_per_item",
        ),
    ] = None
    seconds_lower_bound: Annotated[
        bool,
        Measure(
            "true when some calls of the timed answers were served by DSPy's cache: `seconds_per_item` is then a lower "
            "bound on a cold run's (the table prints it with `≥`)",
            legend="≥: some LM calls of the timed answers were served by DSPy's cache, so a cold run takes longer",
            legend_when="any",
        ),
    ]
    spent_tokens: Annotated[
        int,
        Measure("tokens spent now (not served from a cache) over the scored answers", unit="tokens", aggregated="sum"),
    ]
    cached_tokens: Annotated[int, Measure("tokens a cache served", unit="tokens", aggregated="sum")]
    calls: Annotated[int, Measure("LM calls over the scored answers", unit="calls", aggregated="sum")]
    spent_usd: Annotated[
        float | None,
        Measure("USD spent now; missing when an LM has no price", unit="USD", aggregated="sum", metric="cost_usd"),
    ] = None
    wall_time: Annotated[
        float,
        Measure(
            "the run's wall time (its pool's), plus reused records' own; for a loaded result, the records' own only",
            unit="seconds",
            metric="wall_time",
        ),
    ]
    reused_time: Annotated[
        float,
        Measure(
            "the wall time of records reused from an earlier run (every record, for a loaded result)",
            unit="seconds",
            aggregated="sum",
            legend="s/item*: includes results reused from an earlier run, at the time they took then",
            legend_when="any",
        ),
    ]
    role_collapse_rate: Annotated[
        float | None,
        Measure(
            "FOR: share of answers where the Debater answered instead of asking",
            unit="proportion",
            aggregated=_PER_ANSWER,
            metric="role_collapse_rate",
        ),
    ] = None
    serving_identities: Annotated[
        int, Measure("serving identities of the scored records", aggregated="count", metric="serving.identities")
    ] = 0
    serving_now: Annotated[
        list[str] | None,
        Measure("the serving stack the run talks to now, `; `-joined; missing when unknown (nothing new ran)"),
    ] = None
    mixed_serving: Annotated[
        bool,
        Measure(
            "true when the cell's records come from more than one serving stack (the table's `†`)",
            legend=_MIXED,
            legend_when="any",
        ),
    ] = False
    mixed_pairs: Annotated[
        int,
        Measure(
            "paired items (with the baseline) whose two records were served by different stacks",
            unit="items",
            aggregated="count",
            legend="mixed pairs: items whose two paired answers different stacks served (in the Δ's test)",
            legend_when="any",
            metric="serving.mixed_pairs",
        ),
    ] = 0
    reran: Annotated[
        int, Measure("stored records run again on the stack now (`rerun_changed`)", unit="records", aggregated="count")
    ] = 0
    tokens_per_item_by_role: Annotated[
        dict[str, float], _per_role("tokens", "tokens", "tokens_per_item.{key}", frame="tokens_per_item")
    ] = field(default_factory=dict)
    spent_tokens_per_item_by_role: Annotated[
        dict[str, float], _per_role("tokens spent now (not from a cache)", "tokens", "tokens_per_item.{key}.spent")
    ] = field(default_factory=dict)
    cached_tokens_per_item_by_role: Annotated[
        dict[str, float], _per_role("tokens a cache served", "tokens", "tokens_per_item.{key}.cached")
    ] = field(default_factory=dict)
    calls_per_item_by_role: Annotated[
        dict[str, float], _per_role("LM calls", "calls", "calls_per_item.{key}", frame="calls_per_item")
    ] = field(default_factory=dict)
    #: a token of one model is never added to another's
    tokens_per_item_by_lm: Annotated[
        dict[str, float],
        Measure(
            "tokens per scored answer of each LM (its model name)", unit="tokens", aggregated=_PER_ANSWER, key="lm"
        ),
    ] = field(default_factory=dict)
    stats: Annotated[
        dict[str, float],
        Measure(
            "the mean of a per-item stat the method reports (`rounds_used`, `steps_used`, ...)",
            aggregated=_PER_ANSWER,
            key="name",
            metric="mean.{key}",
        ),
    ]
    spread: Annotated[
        Spread | None,
        Measure(
            "with repeats: how the epochs disagree (`items`, `disagreeing`, `epoch_sd`, `sampling_se`)",
            values="float",
            legend=_REPEATS,
            legend_when="any",
            metric="epochs.{key}",
        ),
    ] = None
    judge: Annotated[JudgeSummary | None, Measure("with a judge: what it graded")] = None
    compile: Annotated[
        CompileCost | None,
        Measure(
            "a compiled method's compile cost (`tokens`, `usd`, `seconds`, `reused`, `tokens_by_lm.<lm>`, ...)",
            shown="compile",
            header="compile",
            column_when="any",
            legend=_COMPILE,
        ),
    ] = None
    #: when ``cost_per_item`` was priced from the tokens at the LMs' declared ``price`` (records kept without a cost)
    priced_at: Annotated[
        dict[str, Price],
        Measure(
            "when `cost_per_item` was priced from an LM's declared `price` (records kept without a cost): its `input` "
            "and `output` USD per million tokens",
            unit="USD per million tokens",
            key="lm",
        ),
    ] = field(default_factory=dict)
    errors: Annotated[
        dict[str, int], Measure("each distinct error (secrets masked) with its failed records", in_frame=False)
    ]
    #: what served the scored records (:mod:`dspy_for.lm.serving`); the stack the run talks to now (None: unknown,
    #: nothing new ran); the records come from more than one stack; stored records run again (``rerun_changed``)
    served_by: Annotated[
        dict[str, int], Measure("each serving identity with the scored records it served", in_frame=False)
    ] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.n > 0

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: each measured number under its declared metric name (a number not measured is absent)."""
        return metrics_of(self)

    def row(self) -> dict[str, Any]:
        """The summary as plain data (the table's row, ``summary.jsonl``, the final test): every field, nested values
        as their rows; no ``judge`` without one."""
        out = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        if self.judge is None:
            out.pop("judge")
        return out


#: every measure a summary declares, in order: the table's columns, the cell frame's, the MLflow metrics
MEASURES = measures_of(Summary)
