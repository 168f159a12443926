"""The matrix's compilers: every DSPy optimizer the modules are meant to work under, and the project's TextGrad, at
the smallest settings that run (two training items). Each compiles the cell's module, runs the compiled program on a
new item and asserts what the compiler promises: demos added (and shown in every later call, ProRefine's capped
steps too), instructions changed (the responder answers right only under a proposed instruction, so a compiler that
keeps one measurably improves the program), or its candidates kept. Routing during the compile and after it is
asserted for every cell from the server's log (:func:`matrix_context.check_routing`)."""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable
from typing import Any

import dspy
import numpy as np
from matrix_cells import MARKER, answer_of, example, model_name, question
from matrix_context import Ctx, EntryPoint, LMCalls, answer, assert_every_role_ran, expected_roles

from dspy_for.optimizers import TextGrad

TRAIN = [example(1), example(2)]
VAL = [example(3)]
#: the item the compiled program answers after compiling
AFTER = 7


def metric(gold: dspy.Example, pred: Any, trace: Any = None) -> float:
    return float(pred is not None and float(pred.answer) == gold.answer)


def feedback_metric(gold: dspy.Example, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None):
    score = metric(gold, pred)
    return dspy.Prediction(score=score, feedback="Right." if score else f"Wrong: the answer is {gold.answer:g}.")


def _after(ctx: Ctx, compiled: dspy.Module) -> int:
    """Run the compiled program on a new item; the index of its first request."""
    start = len(ctx.server.requests)
    assert answer(compiled(question=question(AFTER))) == answer_of(AFTER)
    assert_every_role_ran(ctx, start)
    return start


def _longest_input(demo: Any, predictor: dspy.Predict) -> str | None:
    values = [str(demo[f]) for f in predictor.signature.input_fields if f in demo and str(demo[f]).strip()]
    return max(values, key=len) if values else None


def demos_reach_calls(ctx: Ctx, program: dspy.Module, start: int) -> None:
    """Every role call from ``start`` whose predictor has demos shows them (its longest demo input, in part)."""
    named = dict(program.named_predictors())
    for c in ctx.calls(start):
        shown = [
            text[:60]
            for p in c.predictors
            for d in named[p].demos[:1]
            if (text := _longest_input(d, named[p])) is not None
        ]
        if c.role and shown:
            assert any(s in c.text for s in shown), f"call {c.index} ({'/'.join(c.predictors)}) shows no demo"


def _bootstrapped(ctx: Ctx, program: dspy.Module) -> None:
    named = dict(program.named_predictors())
    missing = [p for p in ctx.spec.always_called if not any(d.get("augmented") for d in named[ctx.prefix + p].demos)]
    assert not missing, f"no bootstrapped demo for {missing}"


def run_bootstrap(ctx: Ctx) -> None:
    compiled = dspy.BootstrapFewShot(metric, max_bootstrapped_demos=1, max_labeled_demos=0, max_rounds=1).compile(
        ctx.build(), trainset=TRAIN
    )
    _bootstrapped(ctx, compiled)
    demos_reach_calls(ctx, compiled, _after(ctx, compiled))


def run_bootstrap_labeled(ctx: Ctx) -> None:
    compiled = dspy.BootstrapFewShot(metric, max_bootstrapped_demos=1, max_labeled_demos=2, max_rounds=1).compile(
        ctx.build(), trainset=TRAIN
    )
    _bootstrapped(ctx, compiled)
    demos_reach_calls(ctx, compiled, _after(ctx, compiled))


def run_bootstrap_teacher(ctx: Ctx) -> None:
    """The teacher's settings put another LM in force while bootstrapping: a role without an LM of its own runs on
    it, a role with one keeps its own (as DSPy's predictors with an LM do); the compiled program runs as the student."""
    teacher = model_name("teacher")
    start = len(ctx.server.requests)
    optimizer = dspy.BootstrapFewShot(
        metric, max_bootstrapped_demos=1, max_labeled_demos=0, max_rounds=1, teacher_settings={"lm": ctx.lm(teacher)}
    )
    compiled = optimizer.compile(ctx.build(), trainset=TRAIN)
    ctx.in_force.append((start, len(ctx.server.requests), teacher))
    _bootstrapped(ctx, compiled)
    demos_reach_calls(ctx, compiled, _after(ctx, compiled))


def run_labeled(ctx: Ctx) -> None:
    compiled = dspy.LabeledFewShot(k=1).compile(ctx.build(), trainset=TRAIN)
    assert all(len(p.demos) == 1 for p in compiled.predictors())
    _after(ctx, compiled)


def run_random_search(ctx: Ctx) -> None:
    optimizer = dspy.BootstrapFewShotWithRandomSearch(
        metric, max_bootstrapped_demos=1, max_labeled_demos=0, num_candidate_programs=1, num_threads=1
    )
    compiled = optimizer.compile(ctx.build(), trainset=TRAIN, valset=VAL)
    assert len(compiled.candidate_programs) >= 2
    demos_reach_calls(ctx, compiled, _after(ctx, compiled))


def _embed(texts: list[str]) -> np.ndarray:
    """A bag of hashed words: the nearest training item shares the most words."""
    out = np.zeros((len(texts), 64))
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, int(hashlib.sha256(word.encode()).hexdigest(), 16) % 64] += 1.0
    return out


def run_knn(ctx: Ctx) -> None:
    optimizer = dspy.KNNFewShot(
        k=1, trainset=TRAIN, vectorizer=dspy.Embedder(_embed), max_bootstrapped_demos=1, max_labeled_demos=0
    )
    compiled = optimizer.compile(ctx.build())
    start = len(ctx.server.requests)
    assert answer(compiled(question=question(AFTER))) == answer_of(AFTER)  # bootstraps on the neighbour, then answers
    assert_every_role_ran(ctx, start)
    answering = [c for c in ctx.calls(start) if c.role and question(AFTER) in c.text]
    assert answering, "no call answered the new item"
    for c in answering:  # each shows the neighbour's bootstrapped demo before the item
        assert re.search(r"and [12] more apples", c.text.split(question(AFTER))[0]), f"call {c.index} has no demo"


def _tuned(ctx: Ctx, program: dspy.Module) -> None:
    """The compiler kept a proposed instruction where it decides the answer: the final predictor's."""
    final = dict(program.named_predictors())[ctx.prefix + ctx.spec.final]
    assert MARKER in final.signature.instructions, f"{ctx.spec.final}'s instruction was not changed"


def _read_the_source(ctx: Ctx, program: dspy.Module, start: int) -> None:
    """The proposer's calls from ``start`` were given the program's source: its own class, the module's, each role's."""
    proposer = [c.text for c in ctx.calls(start) if c.model == model_name("proposer")]
    shown = [t for t in proposer if "[[ ## program_code ## ]]" in t]
    assert shown, "the proposer was never given the program's code (MIPROv2 ran without its program-aware proposer)"
    for cls in {type(program), ctx.spec.cls, *(type(p) for p in program.predictors() if type(p) is not dspy.Predict)}:
        if cls.__module__.startswith("dspy."):
            continue  # DSPy's own modules, whose source DSPy leaves out
        first = inspect.getsource(cls).strip().splitlines()[0]
        assert any(first in t for t in shown), f"the proposer never saw {cls.__name__}'s source ({first!r})"


def run_mipro(ctx: Ctx) -> None:
    ctx.responder.tuned = True
    ctx.tools.add(model_name("proposer"))
    program = ctx.build()
    start = len(ctx.server.requests)
    optimizer = dspy.MIPROv2(
        metric,
        prompt_model=ctx.lm(model_name("proposer")),
        auto=None,
        num_candidates=2,
        max_bootstrapped_demos=0,
        max_labeled_demos=0,
        num_threads=1,
        seed=0,
        verbose=False,
    )
    compiled = optimizer.compile(
        program,
        trainset=TRAIN,
        valset=VAL,
        num_trials=4,
        minibatch=False,
        program_aware_proposer=True,  # the proposer reads the program's source (every role predictor's class too)
        data_aware_proposer=False,
        tip_aware_proposer=False,
        fewshot_aware_proposer=False,
    )
    _read_the_source(ctx, program, start)
    _tuned(ctx, compiled)
    _after(ctx, compiled)


def run_gepa(ctx: Ctx) -> None:
    ctx.responder.tuned = True
    ctx.tools.add(model_name("reflection"))
    optimizer = dspy.GEPA(
        feedback_metric,
        reflection_lm=ctx.lm(model_name("reflection")),
        max_metric_calls=8,
        reflection_minibatch_size=2,
        component_selector="all",
        use_merge=False,
        num_threads=1,
        seed=0,
    )
    compiled = optimizer.compile(ctx.build(), trainset=TRAIN, valset=VAL)
    _tuned(ctx, compiled)
    _after(ctx, compiled)


def run_simba(ctx: Ctx) -> None:
    ctx.tools.add(model_name("simba"))
    optimizer = dspy.SIMBA(
        metric=metric,
        bsize=2,
        num_candidates=2,
        max_steps=1,
        max_demos=1,
        prompt_model=ctx.lm(model_name("simba")),
        num_threads=1,  # its candidates run the same items: one at a time, so a cascade's samples disagree
    )
    lm_calls = LMCalls(ctx)
    with dspy.context(callbacks=[lm_calls]):
        compiled = optimizer.compile(ctx.build(), trainset=TRAIN, seed=0)
    assert compiled.candidate_programs and compiled.trial_logs is not None
    resampled = {r for r, ids in lm_calls.rollouts().items() if len(ids) > 1}
    assert expected_roles(ctx.spec) <= resampled, (
        f"roles SIMBA did not resample: {expected_roles(ctx.spec) - resampled}"
    )
    _after(ctx, compiled)


def run_textgrad(ctx: Ctx) -> None:
    ctx.responder.tuned = True
    ctx.tools.add(model_name("textgrad"))
    optimizer = TextGrad(metric, optimizer_lm=ctx.lm(model_name("textgrad")), batch_size=2, epochs=1, steps_per_epoch=1)
    compiled = optimizer.compile(ctx.build(), trainset=TRAIN, valset=VAL)
    _tuned(ctx, compiled)
    _after(ctx, compiled)


def _compiler(name: str, title: str, promise: str, run: Callable[[Ctx], None]) -> EntryPoint:
    return EntryPoint(name, title, promise, run)


COMPILERS: dict[str, EntryPoint] = {
    e.name: e
    for e in (
        _compiler(
            "bootstrap",
            "`BootstrapFewShot` (bootstrapped demos only)",
            "a bootstrapped demo on every predictor that ran (ProRefine's `task` too), shown in every later call, "
            "the capped steps too",
            run_bootstrap,
        ),
        _compiler(
            "bootstrap_labeled",
            "`BootstrapFewShot` with labeled demos",
            "as above; the teacher is compiled with labeled demos first",
            run_bootstrap_labeled,
        ),
        _compiler(
            "bootstrap_teacher",
            '`BootstrapFewShot(teacher_settings={"lm": teacher})`',
            "while bootstrapping, a role without an LM of its own runs on the teacher's, the others on their own "
            "(as DSPy's predictors with an LM do); demos as above",
            run_bootstrap_teacher,
        ),
        _compiler("labeled", "`LabeledFewShot(k=1)`", "one labeled demo on every predictor", run_labeled),
        _compiler(
            "random_search",
            "`BootstrapFewShotWithRandomSearch`",
            "its candidate programs kept; the best one's demos shown in every later call",
            run_random_search,
        ),
        _compiler(
            "knn",
            "`KNNFewShot(k=1)`",
            "each call bootstraps demos on the nearest training item, then answers with them",
            run_knn,
        ),
        _compiler(
            "mipro",
            "`MIPROv2(auto=None)`, instructions only, program-aware",
            "its proposer reads the program's source (each class: the program's, the module's, each role's); a "
            "proposed instruction kept on the final predictor (the proposer's calls name its prompt model)",
            run_mipro,
        ),
        _compiler(
            "gepa",
            "`GEPA`",
            "a reflected instruction kept on the final predictor (reflection calls name the reflection LM)",
            run_gepa,
        ),
        _compiler(
            "simba",
            "`SIMBA`",
            "its candidates and trial logs kept; its resampling varies every role's own LM",
            run_simba,
        ),
        _compiler(
            "textgrad",
            "`dspy_for.optimizers.TextGrad`",
            "a rewritten instruction kept on the final predictor (its calls name its optimizer LM)",
            run_textgrad,
        ),
    )
}
