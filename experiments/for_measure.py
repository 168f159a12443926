"""FOR-Prompting measurement (issue 4): single vs CoT vs FOR (N = 1, 3; with and without Host).

One FOR N = 3 run gives every no-Host prefix A_0..A_3 through ``answers_by_round``; the N = 1 run with a
Host then costs only Host calls (the DSPy cache serves its rounds). Per-item results are appended to
JSONL files in compare's layout (``<out>/<dataset>/<split>/<label>.<key>.jsonl``), so a killed run
resumes where it stopped and ``dspy-for compare`` with ``results_dir`` = ``--out`` reuses every stored
item (``experiments/matched_budget.toml`` does).

    python experiments/for_measure.py --lm local/qwen2.5-coder-1.5b --first 50 \
        --data-dir ../shared/datasets --out experiments/results/for

The FOR paper's Figure 2 layout (judged accuracy and quality by an LLM judge) on the same items: add
``--judge-lm local/qwen2.5-coder-1.5b --methods single,cot,for_n3_host``. The judge grades stored items
without re-running the methods; verdicts are stored with them (``summary_judged.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, ResultStore, evaluate, prepare_run
from dspy_for.experiments.core.summary import JUDGE_SCORES, judge_summary
from dspy_for.experiments.reports.diagnostics import debate_diagnostics, round_scores
from dspy_for.experiments.spec.model import JudgeConfig
from dspy_for.metrics import numeric_match
from dspy_for.stats import format_p_value, mean_with_ci, paired_comparison


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--split", default="val")
    ap.add_argument("--first", type=int, default=50, help="the first N items of the split")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--out", default="experiments/results/for")
    ap.add_argument("--guard", choices=["on", "off"], default="on")
    ap.add_argument("--judge-lm", default=None, help="grade every item: judged accuracy and quality scores")
    ap.add_argument("--methods", default=None, help="comma-separated labels to run (default: all four)")
    args = ap.parse_args()
    logging.basicConfig(format="%(asctime)s %(message)s")
    logging.getLogger("dspy_for").setLevel(logging.INFO)  # progress of the judge, waits on a results lock

    out = Path(args.out)
    guard = args.guard == "on"
    suffix = "" if guard else "_noguard"
    # the run path compare uses: one spec, prepare_run, evaluate into a resumable results file per method
    dataset = DatasetConfig(args.dataset, args.split, first=args.first, data_dir=args.data_dir)
    no_guard = {} if guard else {"guard": False}  # the default left out: the same key as a config's FOR
    spec = ExperimentSpec(
        lm=args.lm,
        max_tokens=args.max_tokens,
        datasets=[dataset],
        methods=[
            MethodConfig("single"),
            MethodConfig("cot"),
            MethodConfig("for", f"for_n3_host{suffix}", {"rounds": 3, "host": True, **no_guard}),
            MethodConfig("for", f"for_n1_host{suffix}", {"rounds": 1, "host": True, **no_guard}),
        ],
        judge=JudgeConfig(args.judge_lm) if args.judge_lm else None,
    ).validate()
    if args.methods:
        spec.methods = [m for m in spec.methods if m.label in args.methods.split(",")]
    examples = None
    results = {}
    for m in spec.methods:
        run = prepare_run(spec, dataset, m, examples=examples)
        examples = run.examples
        store = ResultStore.in_dir(out, dataset.name, dataset.split, m.label, run.key)  # compare's layout
        with store.exclusive():
            results[m.label] = evaluate(run, store=store)
        if results[m.label].n_failed:
            raise SystemExit(
                f"{m.label}: {results[m.label].n_failed} item(s) failed "
                f"({results[m.label].error_counts().most_common(1)}); run again to retry them."
            )
    rows = []
    diagnostics = {}
    for label, r in results.items():
        acc, lo, hi = mean_with_ci(r.scores)
        rows.append(
            {
                "method": label,
                "n": r.n,
                "acc": acc,
                "lo": lo,
                "hi": hi,
                "tokens_per_item": r.tokens_per_item,
                "calls_per_item": r.calls_per_item,
                "failed": r.n_failed,
                **{f"mean_{k}": v for k, v in r.stats_mean.items()},
            }
        )
        rows[-1]["scores"] = r.scores
        if label.startswith("for_n3"):
            diagnostics = debate_diagnostics(r.scored, numeric_match)
            for k, scores in enumerate(round_scores(r.scored, numeric_match, rounds=4)):  # A_0..A_3
                acc, lo2, hi2 = mean_with_ci(scores)
                rows.append(
                    {
                        "method": f"for_n{k}_nohost (prefix of N=3)",
                        "n": r.n,
                        "acc": acc,
                        "lo": lo2,
                        "hi": hi2,
                        "tokens_per_item": None,
                        "calls_per_item": None,
                        "failed": r.n_failed,
                        "scores": scores,
                    }
                )
    if args.judge_lm:
        _judged_table(results, out / f"summary_judged{suffix}.json")
        return
    by_method = {row["method"]: row["scores"] for row in rows}
    for row in rows:  # paired tests on the same items: exact McNemar
        for base in ("single", "cot"):
            if row["method"] != base:
                c = paired_comparison(row["scores"], by_method[base])
                row[f"vs_{base}"] = {"diff": c.diff, "lo": c.low, "high": c.high, "p": c.p_value}
    (out / f"summary{suffix}.json").write_text(json.dumps({"rows": rows, "debate": diagnostics}, indent=2))
    _plot(
        rows,
        out / f"accuracy{suffix}.png",
        title=f"{args.dataset} {args.split} first {len(examples or [])}, {args.lm}, guard {args.guard}",
    )
    print(
        f"{'method':38s} {'n':>3s} {'acc':>6s} {'95% CI':>15s} {'tok/item':>9s} {'calls':>6s} "
        f"{'vs single (p)':>15s} {'vs CoT (p)':>15s}"
    )
    for row in rows:
        tok = f"{row['tokens_per_item']:.0f}" if row["tokens_per_item"] is not None else "-"
        calls = f"{row['calls_per_item']:.1f}" if row["calls_per_item"] is not None else "-"
        ci = f"[{row['lo']:5.1%}, {row['hi']:5.1%}]"
        vs = [
            f"{row[k]['diff']:+.0%} ({format_p_value(row[k]['p'])})" if k in row else "-"
            for k in ("vs_single", "vs_cot")
        ]
        print(
            f"{row['method']:38s} {row['n']:3d} {row['acc']:6.1%} {ci} {tok:>9s} {calls:>6s} {vs[0]:>15s} {vs[1]:>15s}"
        )
    if diagnostics:
        d = diagnostics
        print(
            f"\nN = 3 debate ({'guard on' if guard else 'guard off'}): Defender named an error in "
            f"{d['error_found_rate']:.0%} of {d['revisions']} revisions; Debater items breaking the rules: "
            f"{d['collapse_first_attempt']:.1%} of {d['debater_items']} on first attempt, "
            f"{d['collapse_after_reask']:.1%} after the guard's re-ask; keep_unless_error set aside "
            f"{d['kept_previous']} changed answers ({d['kept_saved']} saved a right answer, "
            f"{d['kept_cost']} lost one)"
        )
        for f in d["flips"]:
            print(
                f"  revision {f['round']}: changed {f['changed']}, right→wrong {f['right_to_wrong']}, "
                f"wrong→right {f['wrong_to_right']}"
            )


def _judged_table(results: dict, path: Path) -> None:
    """The FOR paper's Figure 2 layout: accuracy, judged accuracy and the three quality scores per method,
    each with its 95% CI and the paired difference from CoT, and the judge's agreement with the metric."""
    base = results.get("cot")
    rows = {
        label: {"accuracy": mean_with_ci(r.scores), **judge_summary(r, base if label != "cot" else None)}
        for label, r in results.items()
    }
    path.write_text(json.dumps(rows, indent=2))
    print(f"{'method':16s} {'acc %':>18s} " + " ".join(f"{s.split('.')[-1]:>22s}" for s in JUDGE_SCORES))
    for label, row in rows.items():
        acc, lo, hi = row["accuracy"]
        cells = []
        for score in JUDGE_SCORES:
            e = row.get(score)
            k = 100 if score == "judged_accuracy" else 1
            cell = f"{k * e['mean']:.2f} [{k * e['low']:.2f}, {k * e['high']:.2f}]" if e else "-"
            if e and "delta" in e:
                cell += f" Δ{k * e['delta']:+.2f} {format_p_value(e['p_value'])}"
            cells.append(cell)
        print(f"{label:16s} {100 * acc:5.1f} [{100 * lo:4.1f}, {100 * hi:4.1f}] " + " | ".join(cells))
        if "kappa" in row:
            print(
                f"{'':16s} judge vs numeric rule: agreement {100 * row['agreement']:.0f}%, Cohen's kappa "
                f"{row['kappa']:.2f} (n={row['kappa_n']}); judge failed on {row['fallbacks']}; "
                f"judge tokens/item {row['tokens_per_item']:.0f}"
            )
    print(f"written: {path}")


def _plot(rows: list[dict], path: Path, title: str) -> None:
    """Accuracy with 95% CIs per method (bars) and tokens/item (labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [r["method"].replace(" (prefix of N=3)", "*") for r in rows]
    accs = [r["acc"] for r in rows]
    errs = [[r["acc"] - r["lo"] for r in rows], [r["hi"] - r["acc"] for r in rows]]
    bars = ax.bar(range(len(rows)), accs, yerr=errs, capsize=4, color="#4c72b0")
    for bar, r in zip(bars, rows, strict=True):
        if r["tokens_per_item"] is not None:
            ax.annotate(
                f"{r['tokens_per_item']:.0f} tok",
                (bar.get_x() + bar.get_width() / 2, 0.01),
                ha="center",
                va="bottom",
                fontsize=7,
                color="white",
                rotation=90,
            )
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (95% CI)")
    ax.set_ylim(0, 1)
    ax.set_title(f"{title}\n* = no-Host prefix A_k of the N = 3 run", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
