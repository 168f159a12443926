"""Paired vs median pruning in a sweep: the tokens each pruner needs to reach the best trial (issue 29 §3;
docs/sweep.md, "paired pruning").

The same sweep config runs once per pruner, with the same sampler seed, each in its own fresh study (a journal
in the work directory) and MLflow store, all sharing one DSPy cache: a configuration an earlier pruner's sweep
evaluated costs a later one no LM call. So the tokens counted here are what each trial's configuration needs,
cached or not (the trial's ``spent_tokens`` + ``cached_tokens``, over the items it ran before it ended or was
pruned), the same whichever pruner ran first. Per pruner it prints the trials completed and pruned, the best
trial (its parameters and value), the tokens needed up to the end of that trial ("to best") and in all, and
whether the pruners found the same best configuration.

    python experiments/benchmarks/pruners.py --scripted                      # seconds: a scripted LM, 12 items
    python experiments/benchmarks/pruners.py --config experiments/sweep_for.toml --data-dir ../shared/datasets
    python experiments/benchmarks/pruners.py --config experiments/sweep_prorefine.toml --data-dir ../shared/datasets

``--work-dir`` keeps the studies, the MLflow store and the DSPy cache: a killed run resumes there (each study
resumes its trials). ``--cache-dir`` shares a DSPy cache instead (e.g. the one ``compare`` filled, by default
``~/.cache/dspy-for/dspy_cache``): the tokens counted are the same, cached or not; only the time changes.
With the embedded LM this is hours (one FOR item on the 1.5B takes about two minutes).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)
from dspy_for.errors import DspyForError

PRUNERS = ("median", "paired")

SCRIPTED_CONFIG = """
method = "for"
study = "pruners"
lm = "openai/scripted"
n_trials = 10
chunk_size = 3
sampler = "tpe"
enqueue = [{ rounds = 1, host = true }]
[fixed]
stop = "fixed"
[dataset]
name = "gsm8k"
split = "sample"
first = 12
[search.rounds]
type = "int"
low = 0
high = 3
[search.host]
type = "categorical"
choices = [true, false]
"""


def scripted_lm() -> Any:
    """A scripted FOR whose Host is always right and whose Defender is right on a third of the items: trials
    without the Host are clearly worse, so a pruner has something to find."""
    from dspy_for.datasets import load_dataset
    from dspy_for.modules.for_signatures import HOST_INSTRUCTIONS
    from dspy_for.testing import ScriptedLM, for_responder, system_text, user_text

    gold = {str(ex.question): str(ex.answer) for ex in load_dataset("gsm8k", "sample")}
    host = HOST_INSTRUCTIONS.split(".")[0]  # "You are the Host"

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> Any:
        user = user_text(messages)
        question = next((q for q in gold if q in user), "")
        right = gold.get(question, "0")
        if host in system_text(messages) or sum(map(ord, question)) % 3 == 0:
            return for_responder(right, reasoning=f"work for {question[:40]}")(messages, max_tokens)
        return for_responder(str(int(float(right)) + 1), reasoning="hasty work")(messages, max_tokens)

    return ScriptedLM(respond, cache=True)


def run_pruner(config: Path, pruner: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One sweep of ``config`` with ``pruner`` in its own study under ``work``; per trial (in order) its state,
    parameters, value and tokens needed."""
    from dspy_for.experiments.sweeps.spec import load_sweep_spec
    from dspy_for.experiments.sweeps.sweep import sweep

    base = load_sweep_spec(config)
    overrides: dict[str, Any] = {
        "seed": args.seed,
        "study": f"{base.study}-{pruner}",
        "storage": f"journal:{work / f'{base.study}-{pruner}.journal'}",
        "tracking_uri": f"sqlite:///{work / 'mlruns' / 'mlflow.db'}",
        **({"data_dir": args.data_dir} if args.data_dir else {}),
        **({"n_trials": args.n_trials} if args.n_trials else {}),
    }
    spec = load_sweep_spec(replace(base, pruner=pruner), **overrides)
    result = sweep(spec)
    trials = []
    for t in ran(result.study):
        a = t.user_attrs
        needed = float(a.get("spent_tokens", 0.0)) + float(a.get("cached_tokens", 0.0))
        trials.append({"state": t.state.name, "params": t.params, "value": t.value, "tokens": needed,
                       "items": a.get("n_items", 0)})  # fmt: skip
    return {"spec": spec, "trials": trials}


def ran(study: Any) -> list[Any]:
    """The study's trials in order, less those that failed (or were killed) and were then re-run: the re-run, which
    names the trial in its ``retry_of`` attribute, counts their tokens again, cached or not."""
    retried = {t.user_attrs.get("retry_of") for t in study.trials}
    return [
        t for t in sorted(study.trials, key=lambda t: t.number) if not (t.state.name == "FAIL" and t.number in retried)
    ]


def summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The best completed trial and the tokens needed up to its end (in trial order) and in all."""
    done = [t for t in trials if t["state"] == "COMPLETE"]
    best = max(done, key=lambda t: t["value"]) if done else None
    upto = trials.index(best) + 1 if best is not None else len(trials)
    return {
        "complete": len(done),
        "pruned": sum(t["state"] == "PRUNED" for t in trials),
        "failed": sum(t["state"] == "FAIL" for t in trials),
        "best": best,
        "to_best": sum(t["tokens"] for t in trials[:upto]),
        "total": sum(t["tokens"] for t in trials),
        "items": sum(t["items"] for t in trials),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help="a sweep config (default with --scripted: a 12-item FOR sweep)")
    p.add_argument("--scripted", action="store_true", help="a scripted LM instead of the config's LMs")
    p.add_argument("--data-dir", default=None, help="directory with the upstream dataset files")
    p.add_argument("--n-trials", type=int, default=None, help="trials per pruner (default: the config's)")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed, the same for every pruner")
    p.add_argument("--pruners", default=",".join(PRUNERS), help=f"comma-separated, of: {', '.join(PRUNERS)}")
    p.add_argument("--work-dir", default=None, help="keep studies, MLflow store and DSPy cache here (resumable)")
    p.add_argument("--cache-dir", default=None, help="the DSPy cache to share (default: one in the work directory)")
    args = p.parse_args(argv)
    pruners = [x.strip() for x in args.pruners.split(",") if x.strip()]
    if not pruners or any(x not in PRUNERS for x in pruners):
        p.error(f"--pruners: choose from {', '.join(PRUNERS)}")
    if args.config is None and not args.scripted:
        p.error("give --config (a sweep config) or --scripted")

    from dspy_for.cli_common import show_progress

    show_progress("dspy_for.sweep")  # a line per chunk and per trial, as `dspy-for sweep` prints: runs take hours
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="dspy-for-pruners-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    # shared by the pruners' sweeps; an existing cache (--cache-dir) changes the time taken, not the table
    os.environ["DSPY_FOR_CACHE_DIR"] = str(Path(args.cache_dir).resolve() if args.cache_dir else work / "dspy_cache")
    if args.data_dir:  # the sweeps run in the work directory: a relative path must not change its meaning
        args.data_dir = str(Path(args.data_dir).resolve())
    config = Path(args.config).resolve() if args.config else work / "scripted.toml"
    if args.config is None:
        config.write_text(SCRIPTED_CONFIG)
    if args.scripted:
        import dspy
        from dspy.clients.cache import Cache

        import dspy_for.experiments.core.prepare as prepare

        dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="",
                           memory_max_entries=1_000_000)  # fmt: skip
        lm = scripted_lm()
        prepare.make_lm = lambda spec, **options: lm  # type: ignore[assignment]
    cwd = os.getcwd()
    os.chdir(work)  # the sweeps' relative paths (results, plots) land in the work directory
    try:
        runs = {x: run_pruner(config, x, work, args) for x in pruners}
    except DspyForError as exc:  # a bad config or option: said before any LM call, as `dspy-for sweep` says it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        os.chdir(cwd)

    print(f"\npruners on {config.name} (seed {args.seed}; work directory {work})")
    head = f"{'pruner':7s} {'trials':>6s} {'complete':>8s} {'pruned':>6s} {'failed':>6s} {'items':>6s} "
    print(head + f"{'best value':>10s} {'tokens to best':>14s} {'tokens in all':>13s}  best trial")
    sums = {x: summary(r["trials"]) for x, r in runs.items()}
    for x, s in sums.items():
        best = s["best"]
        value = f"{best['value']:.3f}" if best else "-"
        print(
            f"{x:7s} {len(runs[x]['trials']):6d} {s['complete']:8d} {s['pruned']:6d} {s['failed']:6d} {s['items']:6d} "
            f"{value:>10s} {s['to_best']:14,.0f} {s['total']:13,.0f}  {best['params'] if best else '-'}"
        )
    print("\nper trial: pruner, number, state, items run, value, tokens needed, parameters")
    for x, r in runs.items():
        for n, t in enumerate(r["trials"]):
            value = f"{t['value']:.3f}" if t["value"] is not None else "-"
            print(f"{x:7s} {n:3d} {t['state']:8s} {t['items']:4d} {value:>6s} {t['tokens']:9,.0f}  {t['params']}")
    if len(sums) == 2:
        a, b = (sums[x] for x in pruners)
        same = a["best"] is not None and b["best"] is not None and a["best"]["params"] == b["best"]["params"]
        print(f"same best trial: {'yes' if same else 'no'}", end="")
        if same and b["to_best"]:
            print(f"; tokens to reach it, {pruners[1]} / {pruners[0]}: {b['to_best'] / a['to_best']:.2f}", end="")
        print(f"; tokens in all, {pruners[1]} / {pruners[0]}: {b['total'] / max(a['total'], 1):.2f}")
    failed = sum(s["failed"] for s in sums.values())
    if failed:  # a failed trial is an error, never a value: the comparison above is then incomplete
        print(f"{failed} trial(s) failed (see the sweeps' MLflow runs); the pruners are not compared on equal terms")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
