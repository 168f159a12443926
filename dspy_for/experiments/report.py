"""The comparison table (accuracy ± 95% CI, Δ vs baseline with the paired test's p-value, cost) and plots."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from dspy_for.experiments.diagnostics import round_accuracy
from dspy_for.metrics import metric_for
from dspy_for.stats import bootstrap_interval, cohens_kappa, mean_with_ci, paired_comparison

if TYPE_CHECKING:
    from dspy_for.experiments.comparison import ComparisonResult
    from dspy_for.experiments.records import MethodResult

__all__ = [
    "JUDGE_SCORES",
    "detail_lines",
    "error_lines",
    "figures",
    "judge_lines",
    "judge_summary",
    "legend",
    "rich_tables",
    "summary_rows",
    "table_text",
]


JUDGE_SCORES = ("judged_accuracy", "quality.reasoning", "quality.coherence", "quality.holistic")


def judge_summary(r: MethodResult, base: MethodResult | None) -> dict[str, Any]:
    """The judge's view of one method: per score its mean with a 95% CI (Wilson for judged accuracy,
    bootstrap for the quality scores) and n, the paired difference from ``base`` (exact McNemar / paired
    bootstrap) with p; how often the rule decided because the judge failed; the judge's agreement with the
    dataset metric (Cohen's κ over the items it judged); and the judge's tokens per item (apart from the
    method's own)."""
    judged = [(i.judge, i.score) for i in r.scored if i.judge is not None and i.judge.get("method") != "error"]
    if not judged and not r.judge_errors:
        return {}
    out: dict[str, Any] = {
        "n": len(judged),
        "errors": r.judge_errors,
        "fallbacks": sum(1 for verdict, _ in judged if verdict.get("method") == "rule"),
        "tokens_per_item": r.judge_usage.total.served_tokens / max(1, len(judged)),
    }
    by_judge = [(verdict, score) for verdict, score in judged if verdict.get("method") == "judge"]
    if by_judge:
        agree = [bool(verdict.get("correct")) for verdict, _ in by_judge]
        rule = [bool(score) for _, score in by_judge]
        out["kappa"] = cohens_kappa(agree, rule)
        out["agreement"] = sum(a == b for a, b in zip(agree, rule, strict=True)) / len(by_judge)
        out["kappa_n"] = len(by_judge)
    for score in JUDGE_SCORES:
        values = r.judge_values(score)
        if not values:
            continue
        xs = list(values.values())
        mean = sum(xs) / len(xs)
        lo, hi = mean_with_ci(xs)[1:] if score == "judged_accuracy" else bootstrap_interval(xs)
        entry: dict[str, Any] = {"mean": mean, "low": lo, "high": hi, "n": len(xs)}
        if base is not None:
            theirs = base.judge_values(score)
            common = [k for k in values if k in theirs]
            if common:
                paired = paired_comparison([values[k] for k in common], [theirs[k] for k in common])
                entry.update(delta=paired.diff, p_value=paired.p_value, paired_n=len(common))
        out[score] = entry
    return out


def summary_rows(result: ComparisonResult) -> list[dict[str, Any]]:
    """One row per method × dataset. ``n`` counts scored items (failed ones are errors, left out of accuracy
    and tokens/item and counted in ``failed``); the Δ pairs each method with the baseline on the items both
    scored (matched by content)."""
    rows = []
    baseline = result.spec.baseline
    for dataset, by_label in result.results.items():
        base = by_label.get(baseline or "")
        for label, r in by_label.items():
            acc, lo, hi = mean_with_ci(r.scores)
            row: dict[str, Any] = {
                "dataset": dataset,
                "method": label,
                "n": r.n_scored,
                "failed": r.n_failed,
                "unparsed": r.n_unparsed,
                "accuracy": acc if r.n_scored else None,
                "ci_low": lo,
                "ci_high": hi,
                "tokens_per_item": r.tokens_per_item if r.n_scored else None,
                "calls_per_item": r.calls_per_item,
                "wall_time": r.wall_time + r.reused_time,
                "reused_time": r.reused_time,
                "delta": None,
                "p_value": None,
                "paired_n": 0,
                "tokens_per_item_by_role": {name: r.per_item("served_tokens", name) for name in r.usage.roles},
                "stats": r.stats_mean,
                "errors": dict(r.error_counts()),
            }
            judged = judge_summary(r, base if label != baseline else None)
            if judged:
                row["judge"] = judged
            if base is not None and label != baseline and r.n_scored:
                mine, theirs = r.scores_by_key(), base.scores_by_key()
                common = [k for k in mine if k in theirs]
                if common:
                    paired = paired_comparison([mine[k] for k in common], [theirs[k] for k in common])
                    row.update(
                        delta=paired.diff,
                        delta_low=paired.low,
                        delta_high=paired.high,
                        p_value=paired.p_value,
                        paired_n=len(common),
                    )
            rows.append(row)
        for label, err in result.errors.get(dataset, {}).items():
            rows.append({"dataset": dataset, "method": label, "error": err})
    return rows


_HEADER = ["method", "n", "acc % [95% CI]", "Δ pts", "tok/item", "time"]


def _duration(seconds: float) -> str:
    if seconds < 100:
        return f"{seconds:.0f}s"
    if seconds < 6000:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _fmt_row(row: dict[str, Any], baseline: str | None) -> list[str]:
    if "error" in row:
        return [row["method"], "-", "FAILED (could not run)", "", "", ""]
    n = str(row["n"]) + (f" +{row['failed']}✗" if row["failed"] else "")
    if row["accuracy"] is None:
        return [row["method"], n, "FAILED (every item)", "", "", ""]
    acc = f"{100 * row['accuracy']:.1f} [{100 * row['ci_low']:.1f}–{100 * row['ci_high']:.1f}]"
    if row["method"] == baseline:
        delta = "(baseline)"
    elif row["delta"] is None:
        delta = "-"
    else:
        delta = f"{100 * row['delta']:+.1f} (p={row['p_value']:.2f})"
    time_ = _duration(row["wall_time"]) + ("*" if row.get("reused_time") else "")
    return [row["method"], n, acc, delta, f"{row['tokens_per_item']:,.0f}", time_]


def legend(result: ComparisonResult) -> str:
    """What the columns mean, printed under each table."""
    rows = [r for r in result.rows if "error" not in r]
    text = (
        f"n: scored items; acc: % with Wilson 95% CI; Δ: points vs {result.spec.baseline} on the items both "
        "scored (exact McNemar p); tok/item: prompt+completion tokens per scored item, cache hits at their "
        "original cost"
    )
    if any(r["failed"] for r in rows):
        text += "; +N✗: items that failed (LM errors), left out of accuracy and tokens"
    if any(r.get("reused_time") for r in rows):
        text += "; time*: includes results reused from an earlier run"
    return text + "."


def detail_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """One line per method with its unparsed count, tokens per item by role and the mean of its per-item
    stats (e.g. FOR's rounds used, ProRefine's steps used and refined share)."""
    lines = []
    for row in result.rows:
        if row["dataset"] != dataset or "error" in row or row["accuracy"] is None:
            continue
        roles = row.get("tokens_per_item_by_role") or {}
        line = f"{row['method']}: tokens/item by role: " + " · ".join(
            f"{name} {value:,.0f}" for name, value in sorted(roles.items())
        )
        line += f"; calls/item {row['calls_per_item']:.1f}"
        if row["unparsed"]:
            line += f"; unparsed {row['unparsed']} (scored wrong)"
        stats = row.get("stats") or {}
        if stats:
            line += "; mean " + ", ".join(f"{key} {value:.2f}" for key, value in sorted(stats.items()))
        lines.append(line)
    return lines


def error_lines(result: ComparisonResult) -> list[str]:
    """Each distinct error once, with how many items (or methods) it failed."""
    lines = [f"{count} item(s) failed: {error}" for error, count in result.item_errors().most_common()]
    verdicts = [i.judge for by_label in result.results.values() for r in by_label.values() for i in r.scored]
    judge = Counter(str(v.get("error")) for v in verdicts if v is not None and v.get("method") == "error")
    lines += [f"{count} item(s) not graded, the judge's LM failed: {error}" for error, count in judge.most_common()]
    for dataset, errs in result.errors.items():
        lines.extend(f"{label} on {dataset} could not run: {err}" for label, err in errs.items())
    return lines


_JUDGE_HEADER = ["method", "judged acc %", "reasoning", "coherence", "holistic"]


def _fmt_judge_row(row: dict[str, Any]) -> list[str]:
    j = row["judge"]

    def cell(score: str, pct: bool) -> str:
        if score not in j:
            return "-"
        e, k = j[score], 100 if pct else 1
        fmt = "{:.1f}" if pct else "{:.2f}"
        return f"{fmt.format(k * e['mean'])} [{fmt.format(k * e['low'])}–{fmt.format(k * e['high'])}]"

    return [row["method"], cell("judged_accuracy", True), *(cell(s, False) for s in JUDGE_SCORES[1:])]


def judge_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """Under the judged table: each method's differences from the baseline, and whether the judge can be
    trusted (its agreement with the dataset's metric, and how often it failed)."""
    lines = []
    spec_judge = result.spec.judge
    for row in result.rows:
        if row["dataset"] != dataset or "judge" not in row:
            continue
        j = row["judge"]
        deltas = [
            f"{s.split('.')[-1]} {(100 if s == 'judged_accuracy' else 1) * j[s]['delta']:+.2f} "
            f"(p={j[s]['p_value']:.2f})"
            for s in JUDGE_SCORES
            if s in j and "delta" in j[s]
        ]
        line = f"{row['method']}: judged {j['n']}"
        if "kappa" in j:
            line += (
                f"; judge vs metric: agreement {100 * j['agreement']:.0f}%, Cohen's κ {j['kappa']:.2f} "
                f"(n={j['kappa_n']})"
            )
        if j["fallbacks"]:
            line += f"; judge failed on {j['fallbacks']} (the metric decided)"
        if j["errors"]:
            line += f"; judge's LM failed on {j['errors']}: not graded, graded on the next run"
        line += f"; judge tokens/item {j['tokens_per_item']:,.0f}"
        if deltas:
            line += f"; Δ vs {result.spec.baseline}: " + ", ".join(deltas)
        lines.append(line)
    if lines and spec_judge is not None:
        lm = spec_judge.lm if isinstance(spec_judge.lm, str) else getattr(spec_judge.lm, "model", "judge")
        lines.insert(
            0,
            f"judge: {lm}; quality scores in [0, 1] with bootstrap 95% CIs; a κ near 0 means the "
            "judge cannot read the answers and its scores say little",
        )
    return lines


def _judged(result: ComparisonResult, dataset: str) -> list[dict[str, Any]]:
    return [r for r in result.rows if r["dataset"] == dataset and "judge" in r]


def table_text(result: ComparisonResult) -> str:
    out = []
    for dataset in result.results:
        rows = [_fmt_row(r, result.spec.baseline) for r in result.rows if r["dataset"] == dataset]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(_HEADER)]
        out.append(f"== {dataset} ==")
        out.append("  ".join(h.ljust(w) for h, w in zip(_HEADER, widths, strict=True)))
        out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
        out.append(legend(result))
        out.extend(detail_lines(result, dataset))
        judged = [_fmt_judge_row(r) for r in _judged(result, dataset)]
        if judged:
            widths = [max(len(h), *(len(r[i]) for r in judged)) for i, h in enumerate(_JUDGE_HEADER)]
            out.append(f"== {dataset}: judged ==")
            out.append("  ".join(h.ljust(w) for h, w in zip(_JUDGE_HEADER, widths, strict=True)))
            out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in judged)
            out.extend(judge_lines(result, dataset))
    out.extend(error_lines(result))
    return "\n".join(out)


def rich_tables(result: ComparisonResult) -> list[Any]:
    tables = []
    for dataset in result.results:
        t = Table(title=f"{dataset} — baseline: {result.spec.baseline}", box=box.SIMPLE_HEAD, padding=(0, 1))
        for h in _HEADER:
            t.add_column(h, justify="left" if h == "method" else "right", no_wrap=True)
        for r in result.rows:
            if r["dataset"] == dataset:
                t.add_row(*_fmt_row(r, result.spec.baseline))
        t.caption = "\n".join([legend(result), *detail_lines(result, dataset)])
        t.caption_justify = "left"
        tables.append(t)
        judged = _judged(result, dataset)
        if judged:
            jt = Table(title=f"{dataset} — judged", box=box.SIMPLE_HEAD, padding=(0, 1))
            for h in _JUDGE_HEADER:
                jt.add_column(h, justify="left" if h == "method" else "right", no_wrap=True)
            for r in judged:
                jt.add_row(*_fmt_judge_row(r))
            jt.caption = "\n".join(judge_lines(result, dataset))
            jt.caption_justify = "left"
            tables.append(jt)
    return tables


def figures(result: ComparisonResult) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: dict[str, Any] = {}
    for dataset, by_label in result.results.items():
        if not by_label:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, r in by_label.items():
            if not r.n_scored:  # nothing measured: no point on the plot
                continue
            acc, lo, hi = mean_with_ci(r.scores)
            ax.errorbar(
                [r.tokens_per_item],
                [acc],
                yerr=[[max(0.0, acc - lo)], [max(0.0, hi - acc)]],
                fmt="o",
                capsize=4,
                label=label,
            )
            ax.annotate(label, (r.tokens_per_item, acc), textcoords="offset points", xytext=(5, 5), fontsize=8)
        ax.set_xlabel("tokens per item (prompt + completion, cold-cache cost)")
        ax.set_ylabel("accuracy (95% CI)")
        ax.set_title(f"Cost / accuracy on {dataset}")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        figs[f"frontier_{dataset}.png"] = fig
        judged = _judged(result, dataset)
        if judged:
            figs[f"judged_{dataset}.png"] = _judge_figure(plt, dataset, judged)
        metric = metric_for(dataset)
        for label, r in by_label.items():
            if not any(i.answers_by_round for i in r.scored):
                continue
            by_round = round_accuracy(r.scored, metric)
            fig2, ax2 = plt.subplots(figsize=(5, 3.5))
            xs = list(range(len(by_round)))
            yerr = [[max(0.0, a - lo) for a, lo, _ in by_round], [max(0.0, hi - a) for a, _, hi in by_round]]
            ax2.errorbar(
                xs, [a for a, _, _ in by_round], yerr=yerr, fmt="-o", capsize=4, label="Defender A_r (no Host)"
            )
            final = mean_with_ci(r.scores)[0]
            ax2.axhline(final, color="gray", linestyle="--", label=f"{label} final")
            ax2.set_xticks(xs, [f"A{x}" for x in xs])
            ax2.set_ylabel("accuracy (95% CI)")
            ax2.set_ylim(-0.05, 1.05)
            ax2.set_title(f"{label}: accuracy by round on {dataset}")
            ax2.legend(fontsize=8)
            figs[f"rounds_{label}_{dataset}.png"] = fig2
    return figs


def _judge_figure(plt: Any, dataset: str, rows: list[dict[str, Any]]) -> Any:
    """The four judge scores per method (grouped bars, 95% CIs)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(JUDGE_SCORES)
    for k, score in enumerate(JUDGE_SCORES):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]
        for i, row in enumerate(rows):
            e = row["judge"].get(score)
            if e:
                xs.append(i + (k - 1.5) * width)
                ys.append(e["mean"])
                err[0].append(max(0.0, e["mean"] - e["low"]))
                err[1].append(max(0.0, e["high"] - e["mean"]))
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=score.replace("quality.", ""))
    ax.set_xticks(range(len(rows)), [r["method"] for r in rows], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("judge score (95% CI)")
    ax.set_title(f"Judged accuracy and quality on {dataset}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return fig
