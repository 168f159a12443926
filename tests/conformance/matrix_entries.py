"""The matrix's DSPy entry points other than the compilers: each runs a module through one piece of DSPy machinery as
a user would and asserts what that entry point promises. Which model each role's calls named is asserted for every
cell from the server's log (:func:`matrix_context.check_routing`); the compilers are in :mod:`matrix_compilers`."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from dspy.clients import base_lm
from dspy.utils.callback import BaseCallback
from matrix_cells import API_KEY, SPEC_KEY, answer_of, example, question
from matrix_context import Ctx, EntryPoint, LMCalls, answer, assert_every_role_ran
from matrix_log import HINT_FIELD

from dspy_for.lm.roles import DEFAULT_ROLE
from dspy_for.lm.usage import track_usage
from dspy_for.modules.role_predict import lm_in_use

# --------------------------------------------------------------------------------------------- calls


def run_call(ctx: Ctx) -> None:
    assert answer(ctx.build()(question=question(1))) == answer_of(1)
    assert_every_role_ran(ctx)


def run_evaluate(ctx: Ctx) -> None:
    devset = [example(k) for k in (1, 2, 3)]

    def metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> float:
        return float(pred.answer == gold.answer)

    result = dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False, max_errors=0)(
        ctx.build()
    )
    assert result.score == 100.0
    assert_every_role_ran(ctx)


def run_parallel(ctx: Ctx) -> None:
    program = ctx.build()
    items = [example(k) for k in (1, 2, 3)]
    preds = dspy.Parallel(num_threads=2, max_errors=0)([(program, ex) for ex in items])
    assert [answer(p) for p in preds] == [answer_of(k) for k in (1, 2, 3)]  # in the order of the inputs
    assert_every_role_ran(ctx)


def run_batch(ctx: Ctx) -> None:
    preds = ctx.build().batch([example(k) for k in (1, 2, 3)], num_threads=2, max_errors=0)
    assert [answer(p) for p in preds] == [answer_of(k) for k in (1, 2, 3)]
    assert_every_role_ran(ctx)


def run_acall(ctx: Ctx) -> None:
    program = ctx.build()
    assert answer(asyncio.run(program.acall(question=question(1)))) == answer_of(1)
    assert_every_role_ran(ctx)


def run_asyncify(ctx: Ctx) -> None:
    program = dspy.asyncify(ctx.build())
    assert answer(asyncio.run(program(question=question(1)))) == answer_of(1)
    assert_every_role_ran(ctx)


def run_streamify(ctx: Ctx) -> None:
    program = ctx.build()
    final = dict(program.named_predictors())[ctx.spec.final]
    listener = dspy.streaming.StreamListener(
        signature_field_name="answer", predict=final, predict_name=ctx.spec.final, allow_reuse=True
    )
    streamed = dspy.streamify(program, stream_listeners=[listener])

    async def run() -> list[Any]:
        return [value async for value in streamed(question=question(1))]

    out = asyncio.run(run())
    chunks = [v for v in out if isinstance(v, dspy.streaming.StreamResponse)]
    assert chunks, "no chunk of the final answer was streamed"
    assert {(c.predict_name, c.signature_field_name) for c in chunks} == {(ctx.spec.final, "answer")}
    assert isinstance(out[-1], dspy.Prediction) and answer(out[-1]) == answer_of(1)
    final_role = ctx.spec.predictors[ctx.spec.final]
    assert any(c.body.get("stream") is True for c in ctx.calls() if c.role == final_role), "the answer was not streamed"
    assert_every_role_ran(ctx)


# --------------------------------------------------------------------------------------------- wrappers


def _attempts(ctx: Ctx, wrapper: type[dspy.Module]) -> None:
    """Two attempts (the reward stays below the threshold), each answering; every role's LM varied per attempt
    by rollout id (seen by a callback) and at DSPy's attempt temperature, 1.0 (seen by the server; a sampler keeps
    its own)."""
    rewards: list[float] = []

    def reward(args: dict[str, Any], pred: dspy.Prediction) -> float:
        rewards.append(answer(pred))
        return 0.0

    printed, lm_calls = io.StringIO(), LMCalls(ctx)
    with contextlib.redirect_stdout(printed), dspy.context(callbacks=[lm_calls]):  # a failed attempt is printed
        pred = wrapper(ctx.build(), N=2, reward_fn=reward, threshold=1.0)(question=question(1))
    assert rewards == [answer_of(1)] * 2, f"attempts {rewards}; printed: {printed.getvalue()}"
    assert answer(pred) == answer_of(1)
    same = {r: ids for r, ids in lm_calls.rollouts().items() if len(ids) < 2}
    assert not same, f"roles whose LM kept one rollout id over both attempts: {same}"
    allowed = {1.0} | set(ctx.spec.own_temperatures)
    for c in ctx.calls():
        if c.role:
            assert c.body.get("temperature") in allowed, (c.index, c.role, c.body.get("temperature"))


def run_best_of_n(ctx: Ctx) -> None:
    _attempts(ctx, dspy.BestOfN)
    assert_every_role_ran(ctx)


def run_refine(ctx: Ctx) -> None:
    ctx.tools.add(ctx.configured)  # Refine asks the LM in force for its advice
    _attempts(ctx, dspy.Refine)
    calls = ctx.calls()
    advice = [c for c in calls if c.role is None and "module_names" in c.text]
    assert len(advice) == 1 and advice[0].model == ctx.configured, [c.model for c in advice]
    second = [c for c in calls if c.index > advice[0].index]
    for role in ctx.spec.answering:
        mine = [c for c in second if c.role == role]
        assert mine, f"no {role} call in the second attempt"
        for c in mine:
            assert HINT_FIELD in c.text and any(f"hint for {p}" in c.text for p in c.predictors), (
                f"Refine's hint did not reach the {role} call {c.index} ({'/'.join(c.predictors)})"
            )
    assert_every_role_ran(ctx, advice[0].index)


# --------------------------------------------------------------------------------------------- introspection


class _Recorder(BaseCallback):
    def __init__(self) -> None:
        self.modules: dict[str, Any] = {}
        self.ends: list[tuple[Any, Any]] = []
        self.lm_models: list[str] = []

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.modules[call_id] = instance

    def on_module_end(self, call_id: str, outputs: Any | None, exception: Exception | None = None) -> None:
        self.ends.append((self.modules.get(call_id), outputs))

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.lm_models.append(str(getattr(instance, "model", "")).removeprefix("openai/"))


def run_callbacks(ctx: Ctx) -> None:
    """Every role reaches DSPy's callbacks and its trace as ``Predict`` calls, the final answer among them."""
    program = ctx.build()
    recorder, trace = _Recorder(), []
    with dspy.context(callbacks=[recorder], trace=trace):
        pred = program(question=question(1))
    calls = ctx.calls()
    assert Counter(recorder.lm_models) == Counter(c.model for c in calls), (
        "callbacks saw other LM calls than the server"
    )
    names = {id(p): n for n, p in program.named_predictors()}
    called = {c.role for c in calls if c.role}
    for seen, what in ((recorder.ends, "callbacks"), ([(p, out) for p, _, out in trace], "the trace")):
        reported = {ctx.spec.predictors[names[id(m)]] for m, _ in seen if id(m) in names}
        assert called <= reported, f"roles called but not in {what} as Predict calls: {called - reported}"
        final = dict(program.named_predictors())[ctx.spec.final]
        ends = [out for m, out in seen if m is final and out is not None]
        assert ends and {answer(e) for e in ends} == {answer(pred)} == {answer_of(1)}, (
            f"the final predictor's calls in {what} are not the final answer: {[e.get('answer') for e in ends]}"
        )


def run_track_usage(ctx: Ctx) -> None:
    program = ctx.build()
    with dspy.track_usage() as tracker, track_usage() as usage:
        program(question=question(1))
    calls = ctx.calls()
    served: dict[str, Counter[str]] = {}
    for c, response in zip(calls, ctx.server.responses, strict=True):  # one call at a time: in order
        served.setdefault(c.model, Counter()).update(
            {k: response["usage"][k] for k in ("prompt_tokens", "completion_tokens")}
        )
    totals = {m.removeprefix("openai/"): t for m, t in tracker.get_total_tokens().items()}
    assert {m: (t["prompt_tokens"], t["completion_tokens"]) for m, t in totals.items()} == {
        m: (s["prompt_tokens"], s["completion_tokens"]) for m, s in served.items()
    }
    recorded = Counter((r.role, r.model.removeprefix("openai/")) for r in usage.calls)
    served_roles = Counter((c.role if ctx.spec.records_roles else DEFAULT_ROLE, c.model) for c in calls)
    assert recorded == served_roles, (
        f"dspy_for.track_usage recorded {dict(recorded)}; the server saw {dict(served_roles)}"
    )


def run_inspect_history(ctx: Ctx) -> None:
    program = ctx.build()
    program(question=question(1))
    calls = ctx.calls()
    entries = base_lm.GLOBAL_HISTORY[-len(calls) :]
    assert [str(e["model"]).removeprefix("openai/") for e in entries] == [c.model for c in calls]
    printed = io.StringIO()
    dspy.inspect_history(n=len(calls), file=printed)
    assert ctx.server.responses[-1]["text"].splitlines()[0] in printed.getvalue()


def _with_demos(program: dspy.Module) -> dict[str, list[dict[str, Any]]]:
    """One demo on every predictor, its first input field naming the predictor (visible in its calls)."""
    for name, predictor in program.named_predictors():
        fields = {f: f"value of {f}" for f in [*predictor.signature.input_fields, *predictor.signature.output_fields]}
        first = next(iter(predictor.signature.input_fields))
        fields[first] = f"DEMO for {name}"
        predictor.demos = [dspy.Example(**fields)]
    return demos_of(program)


def demos_of(program: dspy.Module) -> dict[str, list[dict[str, Any]]]:
    return {n: [dict(d) for d in p.demos] for n, p in program.named_predictors()}


def _demos_reach_calls(ctx: Ctx, start: int) -> None:
    """Every role call after ``start`` shows its predictor's demo."""
    for c in ctx.calls(start):
        if c.role:
            assert any(f"DEMO for {p}" in c.text for p in c.predictors), f"call {c.index} ({c.predictors}) has no demo"


def run_deepcopy(ctx: Ctx) -> None:
    program = ctx.build()
    before = {n: (p.lm, lm_in_use(p)) for n, p in program.named_predictors()}
    saved = _with_demos(program)
    copy = program.deepcopy()
    assert not {id(p) for p in copy.predictors()} & {id(p) for p in program.predictors()}
    assert demos_of(copy) == saved
    assert answer(copy(question=question(1))) == answer_of(1)
    assert {n: (p.lm, lm_in_use(p)) for n, p in program.named_predictors()} == before, "the original's LMs changed"
    _demos_reach_calls(ctx, 0)
    assert_every_role_ran(ctx)


def run_reset_copy(ctx: Ctx) -> None:
    program = ctx.build()
    saved = _with_demos(program)
    copy = program.reset_copy()
    assert all(not p.demos for p in copy.predictors()), "reset_copy kept demos"
    assert demos_of(program) == saved, "reset_copy changed the original"
    assert answer(copy(question=question(1))) == answer_of(1)
    assert_every_role_ran(ctx)


# --------------------------------------------------------------------------------------------- save / load


def _saved(ctx: Ctx, form: str) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    program = ctx.build()
    demos = _with_demos(program)
    path = ctx.tmp_path / {"json": "program.json", "pkl": "program.pkl", "program": "program"}[form]
    program.save(str(path), save_program=form == "program")
    if form != "program":  # a state file carries no API key (a whole program is pickled with its LM objects)
        saved = path.read_bytes()
        assert API_KEY.encode() not in saved and SPEC_KEY.encode() not in saved, "an API key was saved"
    return path, demos


def _loaded(ctx: Ctx, form: str, *, supply: bool) -> None:
    """Save with demos on every predictor, load (state into a fresh module — built with the same role LMs when
    ``supply``, with none when they are spec strings — or the whole program), then run the loaded program."""
    path, demos = _saved(ctx, form)
    if form == "program":
        loaded = dspy.load(str(path), allow_pickle=True)
    else:
        loaded = ctx.build(with_lms=supply)
        loaded.load(str(path), allow_pickle=True) if form == "pkl" else loaded.load(str(path))
    assert demos_of(loaded) == demos, "the demos were not restored"
    ctx.checkpoint = len(ctx.server.requests)
    assert answer(loaded(question=question(1))) == answer_of(1)
    _demos_reach_calls(ctx, 0)
    assert_every_role_ran(ctx)


def save_load(form: str) -> Callable[[Ctx], None]:
    def run(ctx: Ctx) -> None:
        _loaded(ctx, form, supply=not ctx.layout.spec)

    return run


def run_mlflow_model(ctx: Ctx) -> None:
    """``mlflow.dspy.save_model`` then ``mlflow.dspy.load_model`` (what ``log_model`` saves to a run, without a
    tracking store; MLflow pickles the whole program, as ``save_program=True``): the loaded program keeps its demos
    and routes every role as the saved one."""
    import mlflow.dspy

    program = ctx.build()
    demos = _with_demos(program)
    path = ctx.tmp_path / "mlflow_model"
    mlflow.dspy.save_model(program, str(path), pip_requirements=["dspy"])  # (no inference: a subprocess)
    loaded = mlflow.dspy.load_model(str(path))
    assert demos_of(loaded) == demos, "the demos were not restored"
    assert answer(loaded(question=question(1))) == answer_of(1)
    _demos_reach_calls(ctx, 0)
    assert_every_role_ran(ctx)


def run_load_without_lms(ctx: Ctx) -> None:
    """State saved from a module whose role LMs are objects, loaded into one built without them: each role the file
    names an LM for must be supplied again (a refusal naming it), never silently run on another LM."""
    _loaded(ctx, "json", supply=False)


# --------------------------------------------------------------------------------------------- the registry


ENTRY_POINTS: dict[str, EntryPoint] = {
    e.name: e
    for e in (
        EntryPoint("call", "`program(...)`", "the right answer; every role ran", run_call),
        EntryPoint("evaluate", "`dspy.Evaluate(num_threads=2)`", "3 items scored in threads: 100%", run_evaluate),
        EntryPoint(
            "best_of_n",
            "`dspy.BestOfN(N=2)`",
            "both attempts answer; each role's own LM varied per attempt: a new rollout id, temperature 1.0 (a "
            "sampler keeps its own)",
            run_best_of_n,
        ),
        EntryPoint(
            "refine",
            "`dspy.Refine(N=2)`",
            "as `dspy.BestOfN`; the advice call names the configured LM; its hint reaches every role that answers "
            "the task",
            run_refine,
        ),
        EntryPoint("parallel", "`dspy.Parallel(num_threads=2)`", "3 items answered, in order", run_parallel),
        EntryPoint("batch", "`program.batch(num_threads=2)`", "3 items answered, in order", run_batch),
        EntryPoint("acall", "`await program.acall(...)`", "the right answer", run_acall),
        EntryPoint("asyncify", "`dspy.asyncify(program)`", "the right answer", run_asyncify),
        EntryPoint(
            "streamify",
            "`dspy.streamify` with a `StreamListener` on the final answer",
            "the final answer's call streamed from the server; its chunks reach the listener, then the prediction",
            run_streamify,
        ),
        EntryPoint(
            "callbacks",
            "callbacks and the trace (`dspy.context(callbacks=..., trace=[])`)",
            "every LM call reported with its model; every role that called in both as a `Predict` call; the final "
            "predictor's with the final answer only (never ProRefine's capped partial output)",
            run_callbacks,
        ),
        EntryPoint(
            "track_usage",
            "`dspy.track_usage()` and `dspy_for.track_usage()`",
            "tokens per model as the server served them; calls attributed to the right role and model",
            run_track_usage,
        ),
        EntryPoint(
            "inspect_history",
            "`dspy.inspect_history()`",
            "the history holds every call with its model, in order",
            run_inspect_history,
        ),
        EntryPoint(
            "deepcopy",
            "`program.deepcopy()`",
            "new predictors with the same demos; the original untouched",
            run_deepcopy,
        ),
        EntryPoint(
            "reset_copy", "`program.reset_copy()`", "demos cleared on the copy, kept on the original", run_reset_copy
        ),
        EntryPoint(
            "save_json",
            '`save("x.json")` → `load`',
            "no API key in the file; demos restored and shown in every call (spec-string roles built again from the "
            "file)",
            save_load("json"),
        ),
        EntryPoint(
            "save_pkl",
            '`save("x.pkl")` → `load(allow_pickle=True)`',
            "as JSON",
            save_load("pkl"),
        ),
        EntryPoint(
            "save_program",
            "`save(dir, save_program=True)` → `dspy.load`",
            "demos restored and shown in every call",
            save_load("program"),
        ),
        EntryPoint(
            "mlflow_model",
            "`mlflow.dspy.save_model` (what `log_model` logs) → `mlflow.dspy.load_model`",
            "demos restored and shown in every call",
            run_mlflow_model,
        ),
        EntryPoint(
            "load_without_lms",
            '`save("x.json")` → `load` into a module built without its role LMs',
            "a role whose LM was an object must be given again: a `ConfigError` at its first call, before any LM call",
            run_load_without_lms,
        ),
    )
}
