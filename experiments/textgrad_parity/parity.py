"""Parity: the ``textgrad`` library's prompt-optimization loop vs ``dspy_for.optimizers.TextGrad``.

Both runs use the same task model, the same optimizer (backward) model, the same BBH object counting data
(TextGrad's split: train [:50], val [50:150], test [150:]), the same starting system prompt (TextGrad's
``BigBenchHard`` task description), batches of 3, the same number of updates and validation revert.

The library side is ``evaluation/prompt_optimization.py`` of zou-group/textgrad with ``--run_validation``,
re-typed against the installed library (``pip install 'dspy-for[textgrad]'``). Comparability: the
library's ``experimental:`` litellm engine ignores ``temperature`` and ``max_tokens``, so it is not used;
both models are reached through the library's OpenAI-compatible ``ChatExternalClient`` pointed at the same
llama.cpp servers ``make_lm('local/...')`` uses, with a subclass that sends ``temperature=0`` and the same
``max_tokens`` caps as our side (the library's default would be 2000). Test accuracy is scored before and
after optimization (the reference also scores test after every step; ``--test-every-step`` does that).

Run (full size; ~3,000 task calls, hours on a 2-core CPU)::

    DSPY_FOR_DATA_DIR=../shared/datasets LITELLM_LOCAL_MODEL_COST_MAP=True \\
        .venv/bin/python experiments/textgrad_parity/parity.py --out /tmp/textgrad_parity.json
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import dspy
from tqdm import tqdm

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)
from dspy_for import make_lm
from dspy_for.datasets import load_dataset
from dspy_for.errors import require
from dspy_for.experiments import DatasetConfig, evaluate
from dspy_for.experiments.core import program_run
from dspy_for.metrics import metric_for
from dspy_for.optimizers import compile_program
from dspy_for.stats import mean_with_ci

DATASET = "bbh_object_counting"
#: TextGrad's starting system prompt for BBH (``textgrad.tasks.big_bench_hard.BigBenchHard``)
START_PROMPT = (
    "You will answer a reasoning question. Think step by step. The last line of your response should be of "
    "the following format: 'Answer: $VALUE' where VALUE is a numerical value."
)


# ------------------------------------------------------------------------------------- library side


def library_engine(model: str, max_tokens: int) -> Any:
    """A textgrad engine on our shared llama.cpp server for registry model ``model`` (temperature 0)."""
    require("textgrad", extra="textgrad")
    from openai import OpenAI
    from textgrad.engine.local_model_openai_api import ChatExternalClient

    from dspy_for.lm.server import ensure_server

    info = ensure_server(model.removeprefix("local/"))

    class CappedClient(ChatExternalClient):
        def generate(self, content: Any, system_prompt: str | None = None, **kwargs: Any) -> Any:
            kwargs.setdefault("temperature", 0.0)
            kwargs.setdefault("max_tokens", max_tokens)
            return super().generate(content, system_prompt=system_prompt, **kwargs)

    client = OpenAI(base_url=info.base_url, api_key="local")
    return CappedClient(client=client, model_string=info.alias)


def run_library(args: argparse.Namespace, train: list, val: list, test: list) -> dict[str, Any]:
    import numpy as np
    import textgrad as tg
    from textgrad.autograd.string_based_ops import StringBasedFunction
    from textgrad.tasks.big_bench_hard import string_based_equality_fn

    random.seed(args.seed)
    np.random.seed(args.seed)
    task_engine = library_engine(args.task_model, args.task_max_tokens)
    opt_engine = library_engine(args.optimizer_model, args.optimizer_max_tokens)
    tg.set_backward_engine(opt_engine, override=True)
    eval_fn = StringBasedFunction(string_based_equality_fn, function_purpose=(
        "The runtime of string-based function that checks if the prediction is correct."))
    system_prompt = tg.Variable(args.start_prompt, requires_grad=True, role_description=(
        "structured system prompt to a somewhat capable language model that specifies the behavior and "
        "strategies for the QA task"))
    model = tg.BlackboxLLM(task_engine, system_prompt)
    optimizer = tg.TextualGradientDescent(engine=opt_engine, parameters=[system_prompt])

    def score(data: list[tuple[str, str]]) -> list[int]:
        out = []
        for x, y in tqdm(data, desc=f"library: scoring {len(data)} items", leave=False):
            xv = tg.Variable(x, requires_grad=False, role_description="query to the language model")
            yv = tg.Variable(y, requires_grad=False, role_description="correct answer for the query")
            out.append(int(eval_fn(inputs=dict(prediction=model(xv), ground_truth_answer=yv)).value))
        return out

    results: dict[str, Any] = {"val": [float(np.mean(score(val)))], "prompt": [system_prompt.get_value()],
                               "test_per_step": [], "unparsable_steps": []}
    results["test_before"] = score(test)
    loader = tg.tasks.DataLoader(train, batch_size=args.batch_size, shuffle=True)
    for _epoch in range(args.epochs):
        for step, (batch_x, batch_y) in enumerate(loader):
            optimizer.zero_grad()
            losses = []
            for x, y in zip(batch_x, batch_y, strict=True):
                xv = tg.Variable(x, requires_grad=False, role_description="query to the language model")
                yv = tg.Variable(y, requires_grad=False, role_description="correct answer for the query")
                losses.append(eval_fn(inputs=dict(prediction=model(xv), ground_truth_answer=yv)))
            tg.sum(losses).backward()
            try:
                optimizer.step()
            except IndexError as exc:
                # The library raises when the optimizer model does not wrap its answer in
                # <IMPROVED_VARIABLE> tags (the 1.5B does not, sometimes), which would end the run. Count the
                # update as made-but-unusable and keep the prompt, as our optimizer does with an unusable step.
                results["unparsable_steps"].append({"step": len(results["val"]), "response": str(exc)[-2000:]})
                print(f"library step {len(results['val'])}: optimizer output without tags; prompt kept",
                      flush=True)
            val_acc = float(np.mean(score(val)))
            if val_acc < results["val"][-1]:  # run_validation_revert
                system_prompt.set_value(results["prompt"][-1])
                val_acc = results["val"][-1]
            results["val"].append(val_acc)
            results["prompt"].append(system_prompt.get_value())
            if args.test_every_step:
                results["test_per_step"].append(float(np.mean(score(test))))
            print(f"library step {len(results['val']) - 1}: val {val_acc:.3f}", flush=True)
            if step == args.steps_per_epoch - 1:
                break
    results["test_after"] = score(test)
    return results


# ----------------------------------------------------------------------------------------- our side


def run_ours(args: argparse.Namespace, train: list, val: list, test: list) -> dict[str, Any]:
    task_lm = make_lm(args.task_model, max_tokens=args.task_max_tokens)
    opt_lm = make_lm(args.optimizer_model, max_tokens=args.optimizer_max_tokens)
    metric = metric_for(DATASET)
    student = dspy.ChainOfThought("question -> answer: int")
    student.predict.signature = student.predict.signature.with_instructions(args.start_prompt)

    def score(program: dspy.Module) -> list[float]:
        """Test scores through the project's run core: an LM failure is an error that stops the script, never a 0."""
        run = program_run(program, test, metric, lm=task_lm, dataset=DatasetConfig(DATASET, "test"), label="ours")
        res = evaluate(run)
        if res.n_failed:
            raise SystemExit(f"{res.n_failed} test item(s) failed: {res.error_counts().most_common(1)[0][0]}")
        return res.scores

    before = score(student)
    result = compile_program("textgrad", student, trainset=train, valset=val, metric=metric, seed=args.seed,
                             optimizer_lm=opt_lm, task_lm=task_lm, batch_size=args.batch_size, epochs=args.epochs,
                             steps_per_epoch=args.steps_per_epoch)
    accepted: list[float] = []  # the library records the accepted score after a revert; so do we here
    for row in result.history:
        accepted.append(accepted[-1] if row["reverted"] else row["val_score"])
    return {"val": accepted, "reverted": [r["reverted"] for r in result.history],
            "prompt": [row["instructions"]["predict"] for row in result.history], "test_before": before,
            "test_after": score(result.program), "compile_usage": result.usage}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task-model", default="local/qwen2.5-coder-0.5b")
    ap.add_argument("--optimizer-model", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--train", type=int, default=50)
    ap.add_argument("--val", type=int, default=100)
    ap.add_argument("--test", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=3)
    ap.add_argument("--task-max-tokens", type=int, default=384)
    ap.add_argument("--optimizer-max-tokens", type=int, default=512)
    ap.add_argument("--test-every-step", action="store_true")
    ap.add_argument("--only", choices=["library", "ours"], default=None)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=Path("/tmp/textgrad_parity.json"))
    args = ap.parse_args()
    progress = logging.StreamHandler()  # one line per optimizer step (train batch, val, reverted)
    progress.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    logging.getLogger("dspy_for.optimizers").addHandler(progress)
    logging.getLogger("dspy_for.optimizers").setLevel(logging.INFO)
    args.start_prompt = START_PROMPT

    examples = {s: load_dataset(DATASET, s) for s in ("train", "val", "test")}
    train = examples["train"][: args.train]
    val = examples["val"][: args.val]
    test = examples["test"][: args.test]
    out: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    out["config"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    sides = [args.only] if args.only else ["library", "ours"]
    for side in sides:
        if side in out:
            continue
        t = time.time()
        if side == "library":
            pairs = [[(ex.question, str(ex.answer)) for ex in part] for part in (train, val, test)]
            out[side] = run_library(args, *pairs)
        else:
            out[side] = run_ours(args, train, val, test)
        out[side]["seconds"] = time.time() - t
        args.out.write_text(json.dumps(out, indent=2, default=str))
    print_report(out)


def print_report(out: dict[str, Any]) -> None:
    print("\nValidation curve (accepted score after each update; step 0 = start prompt)")
    print(f"{'step':>4} " + " ".join(f"{side:>9}" for side in ("library", "ours") if side in out))
    n = max(len(out[s]["val"]) for s in ("library", "ours") if s in out)
    for i in range(n):
        cells = [f"{out[s]['val'][i]:>9.3f}" if i < len(out[s]["val"]) else f"{'':>9}"
                 for s in ("library", "ours") if s in out]
        print(f"{i:>4} " + " ".join(cells))
    print("\nTest accuracy (95% CI)")
    for side in ("library", "ours"):
        if side in out:
            for when in ("test_before", "test_after"):
                mean, lo, hi = mean_with_ci(out[side][when])
                print(f"  {side:<8} {when:<12} {mean:.3f} [{lo:.3f}, {hi:.3f}] n={len(out[side][when])}")


if __name__ == "__main__":
    main()
