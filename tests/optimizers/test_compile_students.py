"""``compile_program`` on every registered method with predictors (FOR, ``for_paper``, ProRefine, the cascade,
``defender_sc``) with every compiler at tiny settings: the compiled program routes every role as its student did,
each compiler changes every predictor as DSPy's do, the compile's cost is recorded, and bad options fail before any
LM call. Scripted LMs, one per role (their model names tell the roles apart)."""

from __future__ import annotations

import json

import dspy
import pytest
from compile_helpers import (
    MARKER,
    SIG,
    UNTUNED,
    example,
    lms_of,
    metric,
    prompts_of,
    respond,
    responder,
    role_of,
    student,
)

from dspy_for.errors import ConfigError
from dspy_for.optimizers import TextGrad, check_compile_options, compile_program, load_compiled, predictor_lms
from dspy_for.testing import ScriptedLM

TRAIN = [example(k) for k in range(1, 5)]
VAL = [example(k) for k in range(5, 7)]
STUDENTS = ["for", "for_paper", "prorefine", "cascade", "defender_sc"]
#: each compiler at the smallest settings that run
TINY: dict[str, dict[str, int]] = {
    "bootstrap": {"max_bootstrapped_demos": 1},
    "textgrad": {"epochs": 1, "steps_per_epoch": 1, "batch_size": 2},
    "gepa": {"max_metric_calls": 24},
    "mipro": {"num_candidates": 2, "num_trials": 4},
}


def scripted(role: str) -> ScriptedLM:
    return ScriptedLM(respond, model=f"lm-{role}")


@pytest.mark.parametrize("kind", list(TINY))
@pytest.mark.parametrize("name", STUDENTS)
def test_every_student_compiles_and_routes_every_role_as_before(name, kind):
    # every role answers wrong until a compiler's proposal (carrying MARKER) is in its prompt; bootstrap needs right
    # answers to keep demos, so under it every answer is right
    answer = responder(tuned=kind != "bootstrap")
    s, lms = student(name, lambda r: ScriptedLM(answer, model=f"lm-{r}"))
    before, routes = prompts_of(s), dict(lms_of(s))
    compiler = ScriptedLM(responder(proposal=f"{UNTUNED} {MARKER}"), model="lm-compiler")
    result = compile_program(
        kind, s, trainset=TRAIN, valset=VAL, metric=metric, optimizer_lm=compiler, seed=0, **TINY[kind]
    )
    compiled = result.program
    assert compiled is not s and prompts_of(s) == before  # the student is not mutated
    # demos (bootstrap) or a proposed instruction; ProRefine rewrites its task prompt on every item (here without the
    # marker), so no proposal can score better there and GEPA and MIPROv2 rightly keep the student's prompts
    assert (prompts_of(compiled) != before) is not (name == "prorefine" and kind in ("gepa", "mipro"))
    assert all(compiled_lm is routes[n] for n, compiled_lm in lms_of(compiled).items())  # the student's own LMs
    # what the compile cost: calls per role, tokens per LM (they add up to the total), wall time
    total = result.usage["total"]
    assert total["calls"] > 0 and result.seconds > 0
    assert sum(result.tokens_by_lm.values()) == total["tokens"] + total["cached_tokens"]
    assert set(result.tokens_by_lm) <= {f"lm-{r}" for r in [*lms, "compiler"]}
    assert ("lm-compiler" in result.tokens_by_lm) == (kind != "bootstrap") == bool(compiler.calls)
    # the compiled program calls each role's own LM, and only that role's requests reach it
    for lm in [*lms.values(), compiler]:
        lm.calls.clear()
    compiled(question=example(9).question)
    for r, lm in lms.items():
        seen = {role_of(c["messages"]) for c in lm.calls}
        assert seen <= {r, "answer"}, (r, seen)
    assert sum(len(lm.calls) for lm in lms.values()) > 0 and compiler.calls == []


def test_textgrad_tunes_every_predictor_by_default_and_only_the_named_ones_with_predictors():
    def rewrite(messages, max_tokens):
        out = respond(messages, max_tokens)
        if isinstance(out, dict) and "new_instruction" in out:
            out["new_instruction"] = "Check every multiplication (rewritten)."
        return out

    s, _ = student("for", lambda r: ScriptedLM(rewrite, model=f"lm-{r}"))
    opt = ScriptedLM(rewrite, model="lm-optimizer")
    common = {"trainset": TRAIN, "valset": VAL, "metric": metric, "optimizer_lm": opt, "epochs": 1}
    every = compile_program("textgrad", s, steps_per_epoch=1, validation_revert=False, **common).program
    assert {n for n, (text, _) in prompts_of(every).items() if "(rewritten)" in text} == {
        "defender",
        "revise",
        "debater",
        "host",
    }
    one = compile_program("textgrad", s, steps_per_epoch=1, validation_revert=False, predictors=["debater"], **common)
    assert {n for n, (text, _) in prompts_of(one.program).items() if "(rewritten)" in text} == {"debater"}


def test_textgrad_alone_runs_and_returns_every_role_on_the_students_own_lm():
    s, lms = student("for", scripted)
    compiled = TextGrad(metric, optimizer_lm=scripted("compiler"), epochs=1, steps_per_epoch=1, batch_size=2).compile(
        s, trainset=TRAIN, valset=VAL
    )
    assert all(
        lm is lms[r] for r, lm in [("defender", lms_of(compiled)["revise"]), ("debater", lms_of(compiled)["debater"])]
    )
    assert all(lm.calls for lm in lms.values())  # the validation ran on the role LMs themselves, not on copies


def test_bootstrap_gives_every_predictor_that_ran_its_demos_as_dspy_does():
    s, _ = student("for", scripted)
    compiled = compile_program("bootstrap", s, trainset=TRAIN, metric=metric, max_bootstrapped_demos=2).program
    assert {n: demos for n, (_, demos) in prompts_of(compiled).items()} == {
        "defender": 2,
        "revise": 2,
        "debater": 2,
        "host": 2,
    }


@pytest.mark.parametrize(("name", "state"), [("for", "debater"), ("single", None)])
def test_a_saved_program_loads_into_its_student_keeping_each_roles_lm(tmp_path, name, state):
    s, _ = student(name, scripted)
    compiled = compile_program("bootstrap", s, trainset=TRAIN, metric=metric, max_bootstrapped_demos=1).program
    path = tmp_path / f"{name}.json"
    compiled.save(str(path))
    # a file holding an LM's state (DSPy's save stores one per predictor that has an LM; a program that is one
    # predictor, at the file's top), here of a class DSPy will not import from a file: it is not loaded, the program
    # keeps its own LMs
    saved = json.loads(path.read_text())
    (saved if state is None else saved[state])["lm"] = ScriptedLM(respond, model="lm-from-the-file").dump_state()
    path.write_text(json.dumps(saved))
    fresh, _ = student(name, scripted)
    own = lms_of(fresh)
    loaded = load_compiled(fresh, path)
    assert loaded is fresh and prompts_of(loaded) == prompts_of(compiled)
    assert all(lms_of(loaded)[n] is lm for n, lm in own.items())


def test_bad_options_and_a_program_without_predictors_fail_before_any_lm_call():
    lm = ScriptedLM(respond)
    dspy.configure(lm=lm)
    cot = dspy.ChainOfThought(SIG)
    cases = [
        ("bootstrap", {"max_demos": 2}, "Unknown option `max_demos` for compile kind `bootstrap`"),
        ("bootstrap", {"max_bootstrapped_demos": -1}, "`max_bootstrapped_demos` of compile kind `bootstrap`"),
        ("textgrad", {"epochs": 0}, "`epochs` must be a positive integer"),
        ("gepa", {"max_metric_calls": 10, "auto": "light"}, "refuses options"),
        ("mipro", {"max_bootstrapped_demos": 2}, "Unknown option `max_bootstrapped_demos` for compile kind `mipro`"),
        ("mipro", {"num_trials": 0}, "`num_trials` of compile kind `mipro`"),
        ("mipro_fewshot", {"auto": "huge"}, "Unknown option `auto`"),
        ("adam", {}, "Unknown compile kind `adam`"),
    ]
    for kind, options, message in cases:
        with pytest.raises(ConfigError, match=message):
            check_compile_options(kind, options)
        with pytest.raises(ConfigError, match=message):
            compile_program(kind, cot, trainset=TRAIN, metric=metric, optimizer_lm=lm, **options)
    check_compile_options("mipro_fewshot", {"max_bootstrapped_demos": 1, "num_trials": 3})  # fewshot takes demos

    class NoPredictors(dspy.Module):
        def forward(self, question: str) -> dspy.Prediction:
            return dspy.Prediction(answer=1.0)

    with pytest.raises(ConfigError, match="`NoPredictors` has no predictors"):
        predictor_lms(NoPredictors())
    with pytest.raises(ConfigError, match="has no predictors"):
        compile_program("bootstrap", NoPredictors(), trainset=TRAIN, metric=metric)
    assert lm.calls == []
