"""How good is ``--dry-run``'s plan? Replays it on the stored compile grids (GSM8K and BBH object counting): each cell
with stored records — its items, and its compile step on a row of its own — is estimated from the OTHER cells'
records only (the cell's own records and compiled program are hidden from the plan), and set beside what was
measured when it ran: calls, tokens (prompt + completion, cache hits at their size) and LM time (the calls' seconds).
No LM, no server::

    python experiments/plan_replay.py --data-dir ../shared/datasets

Printed per cell: the estimate (its range) and the measured value of each, the estimate's error (estimate ÷ measured
− 1), whether the measured value is inside the range, and the estimate's source; then, over every cell, the median
absolute error and how many measured values fall inside their ranges.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from dspy_for.experiments import ResultStore, load_examples, load_spec
from dspy_for.experiments.core.estimates import Estimate, item_costs, usage_cost
from dspy_for.experiments.core.plan import plan_compare
from dspy_for.experiments.core.prepare import result_key
from dspy_for.experiments.reports.plan import duration

ROOT = Path(__file__).parent
CONFIGS = ("compile_grid_gsm8k.toml", "compile_grid_gsm8k_30.toml", "compile_grid_bbh.toml", "compile_grid_bbh_30.toml")
QUANTITIES = ("calls", "tokens", "seconds")


def measured_items(path: Path, keys: set[str]) -> dict[str, float | None] | None:
    """The stored records of the items the config scores: their calls, tokens and LM seconds (None when some of
    their calls were answered from the DSPy cache of an earlier run: their time is not what the calls take)."""
    records = [r for k, r in ResultStore(path).load(repair=False).items() if k in keys]
    costs = item_costs(records)
    if len(costs) < len(keys):
        return None
    cached = any(r.usage.get("total", {}).get("cached_calls", 0) for r in records)
    return {
        "calls": sum(c.calls for cost in costs for c in cost.values()),
        "tokens": sum(c.tokens for cost in costs for c in cost.values()),
        "seconds": None if cached else sum(float(r.usage.get("total", {}).get("wall_time", 0.0)) for r in records),
    }


def measured_compile(path: Path) -> dict[str, float | None] | None:
    """A compile's calls, tokens and its calls' seconds (cache hits in a compile are its own repeats: a cold compile
    gets them too)."""
    usage_path = path.with_name(path.name.removesuffix(".jsonl") + ".compiled.usage.json")
    if not usage_path.is_file():
        return None
    usage = json.loads(usage_path.read_text(encoding="utf-8"))
    cost = usage_cost(usage)
    return {
        "calls": sum(c.calls for c in cost.values()),
        "tokens": sum(c.tokens for c in cost.values()),
        "seconds": float(usage.get("total", {}).get("wall_time", 0.0)),
    }


def cell_text(e: Estimate | None, measured: float | None, time: bool) -> tuple[str, float | None, bool]:
    def f(x: float) -> str:
        return duration(x) if time else f"{x:,.0f}"

    if measured is None:
        return f"{'-' if e is None else f(e.value)} vs (cached: not measured)", None, False
    if e is None:
        return f"- vs {f(measured)}", None, False
    error = e.value / measured - 1 if measured else None
    inside = e.low <= measured <= e.high
    return f"{f(e.value)} ({f(e.low)}–{f(e.high)}) vs {f(measured)}", error, inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="Directory with the upstream dataset files.")
    args = parser.parse_args()
    errors: dict[str, list[float]] = {q: [] for q in QUANTITIES}
    inside: dict[str, int] = dict.fromkeys(QUANTITIES, 0)
    seen: set[tuple[str, str, str]] = set()
    rows = []
    for name in CONFIGS:
        spec = load_spec(ROOT / name, data_dir=args.data_dir)
        items_dir = ROOT.parent / str(spec.results_dir)
        for d in spec.datasets:
            examples = load_examples(d)
            keys = set(_keys(examples))
            for m in spec.methods:
                cell = (d.name, d.split, m.label)
                path = ResultStore.in_dir(items_dir, d.name, d.split, m.label, result_key(spec, d, m)).path
                if cell in seen or not path.is_file():
                    continue
                seen.add(cell)
                plan = plan_compare(replace(spec, datasets=[d]), items_dir, exclude=[cell])
                for step, measure in (("compile", measured_compile(path)), ("items", measured_items(path, keys))):
                    planned = next((c for c in plan.cells if c.label == m.label and c.step == step), None)
                    if measure is None or planned is None:
                        continue
                    texts = []
                    for q in QUANTITIES:
                        text, error, within = cell_text(getattr(planned, q), measure[q], q == "seconds")
                        texts.append(text + ("" if error is None else f" {error:+.0%}") + (" ✓" if within else ""))
                        if error is not None:
                            errors[q].append(abs(error))
                            inside[q] += within
                    rows.append((f"{d.name} {m.label}", step, *texts, planned.source))
    print("| cell | step | calls: estimate (range) vs measured | tokens | LM time | estimated from |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for q in QUANTITIES:
        n = len(errors[q])
        if n:
            median = statistics.median(errors[q])
            within_25 = sum(1 for e in errors[q] if e <= 0.25)
            print(
                f"{q}: median |error| {median:.0%} over {n} cells, {within_25} within 25%; "
                f"measured inside the range in {inside[q]} of {n}"
            )


def _keys(examples: list) -> list[str]:
    from dspy_for.datasets import content_key

    return [content_key(ex.get("question"), ex.get("answer")) for ex in examples]


if __name__ == "__main__":
    main()
