"""BBH object counting: CoT before and after TextGrad, and after GEPA at a similar metric-call budget.

TextGrad's split: train = [:50], val = [50:150] (a slice of it drives the revert decisions), test = [150:].
Every stage's numbers are written to ``--out`` as soon as they exist and compiled programs are saved next
to it, so a killed run resumes where it stopped (``--out`` is re-read; the DSPy cache makes repeated LM
calls free).

Full size (the issue's)::

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python experiments/textgrad_parity/measure_bbh.py \\
        --val 30 --test 100 --epochs 3 --steps-per-epoch 4 --out /tmp/textgrad_bbh_full.json

Reduced (fits a shared 2-core CPU in ~45 minutes)::

    ... measure_bbh.py --val 15 --test 30 --epochs 1 --steps-per-epoch 4 --out /tmp/textgrad_bbh_small.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import dspy

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)
from dspy_for import make_lm
from dspy_for.datasets import load_dataset
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, evaluate, prepare_run
from dspy_for.metrics import metric_for
from dspy_for.optimizers import compile_program
from dspy_for.stats import paired_comparison

DATASET = "bbh_object_counting"
INSTRUCTION = (
    "Solve the problem step by step: list every item that is mentioned together with how many of it there "
    "are, keep only the items of the kind the question asks about, add their counts, then give the final "
    "answer as a single integer."
)


def student() -> dspy.Module:
    program = dspy.ChainOfThought("question -> answer: int")
    program.predict.signature = program.predict.signature.with_instructions(INSTRUCTION)
    return program


def score_test(program: dspy.Module, test: list[dspy.Example], task_lm: dspy.BaseLM) -> dict[str, Any]:
    """Score ``program`` on ``test`` through the run path ``compare`` uses (an LM failure stops the script
    instead of being scored 0)."""
    spec = ExperimentSpec(lm=task_lm, datasets=[DatasetConfig(DATASET, "test")], methods=[MethodConfig("cot")])
    run = prepare_run(spec.validate(), spec.datasets[0], spec.methods[0], examples=test)
    run.program = program  # the student (or its compiled version) instead of the registry's plain CoT
    res = evaluate(run)
    if res.n_failed:
        raise SystemExit(f"{res.n_failed} test item(s) failed: {res.error_counts().most_common(1)}; run again.")
    low, high = res.ci
    return {"scores": res.scores, "accuracy": res.accuracy, "ci": [low, high], "usage": res.usage.to_dict(),
            "unparsed": res.n_unparsed}


def instructions_of(program: dspy.Module) -> dict[str, str]:
    return {name: p.signature.instructions for name, p in program.named_predictors()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task-model", default="local/qwen2.5-coder-0.5b")
    ap.add_argument("--optimizer-model", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--train", type=int, default=50)
    ap.add_argument("--val", type=int, default=30, help="first N items of the val split drive the reverts")
    ap.add_argument("--test", type=int, default=100, help="first N items of the test split")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=3)
    ap.add_argument("--task-max-tokens", type=int, default=384)
    ap.add_argument("--optimizer-max-tokens", type=int, default=512)
    ap.add_argument("--gepa-budget", type=int, default=None,
                    help="GEPA max_metric_calls (default: TextGrad's own metric-call count)")
    ap.add_argument("--skip-gepa", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/textgrad_bbh.json"))
    args = ap.parse_args()
    progress = logging.StreamHandler()  # one line per optimizer step (train batch, val, reverted)
    progress.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    logging.getLogger("dspy_for.optimizers").addHandler(progress)
    logging.getLogger("dspy_for.optimizers").setLevel(logging.INFO)

    task_lm = make_lm(args.task_model, max_tokens=args.task_max_tokens)
    opt_lm = make_lm(args.optimizer_model, max_tokens=args.optimizer_max_tokens)
    dspy.configure(lm=task_lm)
    metric = metric_for(DATASET)
    train = load_dataset(DATASET, "train")[: args.train]
    val = load_dataset(DATASET, "val")[: args.val]
    test = load_dataset(DATASET, "test")[: args.test]
    updates = args.epochs * args.steps_per_epoch
    tg_metric_calls = len(val) + updates * (args.batch_size + len(val))
    budget = args.gepa_budget or tg_metric_calls

    out: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    out["config"] = {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                     "n_train": len(train), "n_val": len(val), "n_test": len(test), "updates": updates,
                     "textgrad_metric_calls": tg_metric_calls, "gepa_max_metric_calls": budget}

    def save() -> None:
        args.out.write_text(json.dumps(out, indent=2, default=str))

    if "cot" not in out:
        t = time.time()
        out["cot"] = {**score_test(student(), test, task_lm), "seconds": time.time() - t,
                      "instructions": instructions_of(student())}
        save()
    print(f"CoT: {out['cot']['accuracy']:.3f} {out['cot']['ci']}", flush=True)

    kinds = [("textgrad", {"epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
                           "batch_size": args.batch_size})]
    if not args.skip_gepa:
        kinds.append(("gepa", {"max_metric_calls": budget, "reflection_minibatch_size": args.batch_size}))
    for kind, options in kinds:
        path = args.out.with_suffix(f".{kind}.json")
        if kind not in out or not path.exists():
            t = time.time()
            result = compile_program(kind, student(), trainset=train, valset=val, metric=metric, seed=args.seed,
                                     optimizer_lm=opt_lm, task_lm=task_lm, **options)
            result.program.save(str(path))
            out[kind] = {"compile_usage": result.usage, "history": result.history, "options": options,
                         "compile_seconds": time.time() - t, "instructions": instructions_of(result.program)}
            save()
        if "test" not in out[kind]:
            program = student()
            program.load(str(path))
            t = time.time()
            out[kind]["test"] = {**score_test(program, test, task_lm), "seconds": time.time() - t}
            save()

    print_table(out)
    plot(out, args.out.with_suffix(".png"))


def plot(out: dict[str, Any], path: Path) -> None:
    """Test accuracy with 95% CIs per program, and TextGrad's validation curve (reverted steps marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    rows = [("cot", out["cot"])] + [(k, out[k]["test"]) for k in ("textgrad", "gepa") if "test" in out.get(k, {})]
    for i, (_name, res) in enumerate(rows):
        ax1.errorbar(i, res["accuracy"], yerr=[[res["accuracy"] - res["ci"][0]], [res["ci"][1] - res["accuracy"]]],
                     fmt="o", capsize=6)
    ax1.set_xticks(range(len(rows)), [name for name, _ in rows])
    ax1.set_ylabel(f"test accuracy (n={len(out['cot']['scores'])}, 95% CI)")
    ax1.set_ylim(0, 1)
    ax1.set_xlim(-0.5, len(rows) - 0.5)
    if "textgrad" in out:
        hist = out["textgrad"]["history"]
        ax2.plot([r["step"] for r in hist], accepted_curve(hist), marker="o", label="accepted val")
        rev = [r for r in hist if r["reverted"]]
        ax2.scatter([r["step"] for r in rev], [r["val_score"] for r in rev], marker="x", color="red",
                    label="reverted step (its val)")
        ax2.set_xlabel("TextGrad step")
        ax2.set_ylabel("validation accuracy")
        ax2.set_ylim(0, 1)
        ax2.legend()
    fig.suptitle(f"BBH object counting: task {out['config']['task_model']}, "
                 f"optimizer {out['config']['optimizer_model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


def print_table(out: dict[str, Any]) -> None:
    base = out["cot"]["scores"]
    print(f"\nBBH object counting, test n={len(base)}; task {out['config']['task_model']}, "
          f"optimizer {out['config']['optimizer_model']}")
    print("(compile tokens count cache hits too: a resumed run replays earlier calls from the DSPy cache)")
    print(f"{'program':<10} {'test acc':>9} {'95% CI':>15} {'vs CoT':>8} {'p':>6} {'compile tokens':>15} "
          f"{'compile calls':>14}")
    print(f"{'cot':<10} {out['cot']['accuracy']:>9.3f} {_ci(out['cot']['ci']):>15} {'':>8} {'':>6} {0:>15} {0:>14}")
    for kind in ("textgrad", "gepa"):
        if kind not in out or "test" not in out[kind]:
            continue
        test = out[kind]["test"]
        cmp = paired_comparison(test["scores"], base)
        total = out[kind]["compile_usage"]["total"]
        print(f"{kind:<10} {test['accuracy']:>9.3f} {_ci(test['ci']):>15} {cmp.diff:>+8.3f} {cmp.p_value:>6.3f} "
              f"{int(total['tokens'] + total['cached_tokens']):>15} {int(total['calls']):>14}")
    if "textgrad" in out:
        hist = out["textgrad"]["history"]
        print("\nTextGrad validation curve (step, val of the step's prompt, accepted val, reverted):")
        for row, accepted in zip(hist, accepted_curve(hist), strict=True):
            print(f"  {row['step']:>3} {row['val_score']:.3f} {accepted:.3f} {row['reverted']}")
        for kind in ("textgrad", "gepa"):
            if kind in out:
                roles = {r: int(v["tokens"] + v["cached_tokens"]) for r, v in out[kind]["compile_usage"].items()
                         if r != "total"}
                print(f"{kind} compile tokens by role: {roles}")


def accepted_curve(history: list[dict[str, Any]]) -> list[float]:
    """Validation score of the prompt in force after each step (a reverted step keeps the previous one)."""
    curve: list[float] = []
    for row in history:
        curve.append(curve[-1] if row["reverted"] and curve else row["val_score"])
    return curve


def _ci(ci: list[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


if __name__ == "__main__":
    main()
