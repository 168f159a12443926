"""Saving keeps what can be restored (each role predictor saves its own LM): a role LM built from a spec string is saved as that spec and built again on load
(a local model gets today's server), in all three forms (JSON, pickle, the whole program); a role LM given as an
object is reported on load as one to give again, never silently replaced; a program loaded into one built with the
same LMs keeps them; copies (``deepcopy``, ``reset_copy``) keep every role's LM."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dspy
import pytest
from role_lm_helpers import RoleServer

from dspy_for.errors import ConfigError
from dspy_for.lm import make_lm
from dspy_for.lm import server as local_server
from dspy_for.lm.origin import made_from
from dspy_for.lm.registry import list_models
from dspy_for.modules import Cascade, FORPrompting, ProRefine
from dspy_for.modules.role_lm_state import STATE_KEY, UnsuppliedLM, lm_record

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"
LOCAL = f"local/{list_models()[0].name}"


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))


def serve_local_model_at(monkeypatch: pytest.MonkeyPatch, server: RoleServer, alias: str) -> None:
    """``local/...`` specs reach ``server`` (as a started llama.cpp server would be reached), serving ``alias``."""
    info = SimpleNamespace(alias=alias, base_url=server.base_url, pid=os.getpid(), slots=4, build="llama.cpp b0-test")
    monkeypatch.setattr(local_server, "ensure_server", lambda *args, **kwargs: info)


def save(program: dspy.Module, tmp_path: Path, form: str) -> Path:
    path = tmp_path / {"json": "p.json", "pkl": "p.pkl", "program": "program"}[form]
    program.save(str(path), save_program=form == "program")
    return path


def load(path: Path, form: str, into: dspy.Module | None = None, **options: Any) -> dspy.Module:
    if form == "program":
        return dspy.load(str(path), allow_pickle=True)
    assert into is not None
    into.load(str(path), allow_pickle=form == "pkl", **options)
    return into


@pytest.mark.parametrize("form", ["json", "pkl", "program"])
def test_a_spec_role_is_saved_as_its_spec_and_a_local_model_gets_todays_server(monkeypatch, tmp_path, form) -> None:
    with RoleServer() as first_run:
        serve_local_model_at(monkeypatch, first_run, "local-a")
        program = FORPrompting(SIG, rounds=1, debater_lm=LOCAL)
        path = save(program, tmp_path, form)
    if form == "json":
        saved = json.loads(path.read_text())
        assert saved["debater"][STATE_KEY] == {"role_lm": {"spec": LOCAL, "options": {}, "changes": {}}, "lm": None}
        assert saved["defender"][STATE_KEY]["role_lm"] is None and first_run.base_url not in path.read_text()
        assert all(entry["lm"] is None for entry in saved.values() if "signature" in entry)
    with RoleServer() as today:
        serve_local_model_at(monkeypatch, today, "local-b")
        dspy.configure(lm=today.lm("cfg"))
        loaded = load(path, form, FORPrompting(SIG, rounds=1))
        loaded(question=Q)
        assert today.models_by_role() == {"answer": {"cfg"}, "debater": {"local-b"}, "revise": {"cfg"}, "host": {"cfg"}}
    assert made_from(loaded.debater.role_lm).spec == LOCAL and loaded.defender.role_lm is None


@pytest.mark.parametrize("form", ["json", "pkl"])
def test_an_object_role_is_reported_on_load_and_kept_when_the_program_has_it(tmp_path, caplog, form) -> None:
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        debater = server.lm("deb")
        path = save(FORPrompting(SIG, rounds=1, debater_lm=debater), tmp_path, form)
        with caplog.at_level(logging.WARNING, logger="dspy_for.modules"):
            bare = load(path, form, FORPrompting(SIG, rounds=1))
        assert "`debater`" in caplog.text and "debater_lm=<LM>" in caplog.text
        assert isinstance(bare.debater.role_lm, UnsuppliedLM) and bare.defender.role_lm is None
        with pytest.raises(ConfigError, match=r"`debater`.*\(`openai/deb`\).*LM object.*debater_lm=<LM>"):
            bare(question=Q)
        with pytest.raises(ConfigError, match="`debater`"):
            asyncio.run(bare.acall(question=Q))
        assert server.requests == []  # refused before any LM call
        again = load(path, form, FORPrompting(SIG, rounds=1, debater_lm=debater))
        assert again.debater.role_lm is debater
        bare.debater.role_lm = debater  # or given afterwards
        bare(question=Q)
        assert server.models_by_role()["debater"] == {"deb"}


def test_an_endpoint_spec_is_built_again_only_from_a_trusted_file(monkeypatch, tmp_path, caplog) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")  # keys come from the environment only
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        host = make_lm("openai/hosty", api_base=server.base_url, num_retries=0)
        path = save(ProRefine(SIG, k=5, n=1, optimizer_lm=host), tmp_path, "json")
        with caplog.at_level(logging.WARNING, logger="dspy_for.modules"):
            untrusted = load(path, "json", ProRefine(SIG, k=5, n=1))
        assert "allow_unsafe_lm_state=True" in caplog.text
        with pytest.raises(ConfigError, match=r"`optimizer`.*`openai/hosty`.*allow_unsafe_lm_state=True"):
            untrusted(question=Q)
        trusted = load(path, "json", ProRefine(SIG, k=5, n=1), allow_unsafe_lm_state=True)
        assert trusted.optimizer.role_lm is not host and lm_record(trusted.optimizer.role_lm) == lm_record(host)
        trusted(question=Q)
        assert server.models_by_role()["optimizer"] == {"hosty"}


def test_a_program_loaded_into_one_built_with_the_same_lms_keeps_them(tmp_path) -> None:
    """What a resumed compiled run does: its program is built with the LMs of its first run, then loaded."""
    lms = {role: make_lm(f"openai/{role}", api_base="http://127.0.0.1:9/v1") for role in ("defender", "debater")}
    compiled = Cascade(SIG, defender_lm=lms["defender"], debater_lm=lms["debater"])
    compiled.debate.host.demos = [dspy.Example(question=Q, reasoning="r", answer=36.0)]
    path = save(compiled, tmp_path, "json")
    resumed = Cascade(SIG, defender_lm=lms["defender"], debater_lm=lms["debater"])
    resumed.load(str(path))
    assert {name: p.role_lm for name, p in resumed.named_predictors()} == {
        name: p.role_lm for name, p in compiled.named_predictors()
    }
    assert resumed.samples.defender.role_lm is lms["defender"] and resumed.debate.host.role_lm is None
    assert len(resumed.debate.host.demos) == 1


def test_a_state_saved_by_dspy_itself_reads_every_lm_as_an_object(tmp_path, caplog) -> None:
    with RoleServer() as server:
        debater = server.lm("deb")
        program = FORPrompting(SIG, rounds=1, debater_lm=debater)
        path = tmp_path / "dspy.json"
        state = {name: dspy.Predict.dump_state(p) for name, p in program.named_predictors()}
        state["debater"]["lm"] = debater.dump_state()  # DSPy's own state of a predictor with an LM: its state inside
        path.write_text(json.dumps({**state, "metadata": {"dependency_versions": {}}}))
        assert json.loads(path.read_text())["debater"]["lm"]["model"] == "openai/deb"
        with caplog.at_level(logging.WARNING, logger="dspy_for.modules"):
            bare = load(path, "json", FORPrompting(SIG, rounds=1))
        assert isinstance(bare.debater.role_lm, UnsuppliedLM) and "`debater`" in caplog.text
        assert load(path, "json", FORPrompting(SIG, rounds=1, debater_lm=debater)).debater.role_lm is debater


def test_what_a_spec_lm_record_keeps() -> None:
    base = make_lm("openai/m", temperature=0.2, price={"input": 1.0, "output": 2.0})
    assert lm_record(base) == {
        "spec": "openai/m",
        "options": {"temperature": 0.2, "price": {"input": 1.0, "output": 2.0}},
        "changes": {},
    }
    varied = base.copy(temperature=0.9, rollout_id=2)  # a copy keeps its spec and says what it changed
    assert lm_record(varied)["changes"] == {"temperature": 0.9, "rollout_id": 2}
    rebuilt = FORPrompting(SIG, host_lm=varied)
    state = rebuilt.dump_state()
    fresh = FORPrompting(SIG)
    fresh.load_state(state)
    assert (fresh.host.role_lm.kwargs["temperature"], fresh.host.role_lm.kwargs["rollout_id"]) == (0.9, 2)
    secret = make_lm("openai/m", extra_headers={"Authorization": "Bearer abcdefgh123456"})
    assert lm_record(secret) == {"object": "openai/m"}  # never written to a file
    assert lm_record(dspy.LM("openai/plain")) == {"object": "openai/plain"} and lm_record(None) is None


def test_copies_keep_every_roles_lm(caplog) -> None:
    lm = make_lm("openai/x", api_base="http://127.0.0.1:9/v1")
    program = FORPrompting(SIG, defender_lm=lm, debater_lm="openai/y")
    program.defender.demos = [dspy.Example(question=Q, reasoning="r", answer=1.0)]
    with caplog.at_level(logging.WARNING):
        deep, reset = program.deepcopy(), program.reset_copy()
    assert "Failed to deep copy" not in caplog.text
    for copied in (deep, reset):
        assert copied.defender.role_lm is copied.revise.role_lm and copied.defender.role_lm is not lm
        assert copied.defender.role_lm.endpoint is lm.endpoint  # one endpoint (limit, retries) per process
        assert [p.role_lm.model if p.role_lm else None for p in copied.predictors()] == [
            "openai/x",
            "openai/x",
            "openai/y",
            None,
        ]
    assert len(deep.defender.demos) == 1 and reset.defender.demos == []
    assert copy.deepcopy(lm).kwargs == lm.kwargs
