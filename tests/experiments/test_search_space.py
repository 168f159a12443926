from __future__ import annotations

import optuna
import pytest

from dspy_for.errors import ConfigError
from dspy_for.experiments.sweeps.search_space import parse_search_space


def test_parse_and_suggest():
    space = parse_search_space(
        "for",
        {
            "rounds": {"type": "int", "low": 0, "high": 4},
            "host": {"type": "categorical", "choices": [True, False]},
            "temperature": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
        },
    )
    assert space.names == ["rounds", "host", "temperature"]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    params = space.suggest(study.ask())
    assert (
        0 <= params["rounds"] <= 4
        and params["host"] in (True, False)
        and params["temperature"] in (0, 0.25, 0.5, 0.75, 1)
    )


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"round": {"type": "int", "low": 0, "high": 3}}, "Unknown option `round`"),
        ({"rounds": {"type": "int", "low": 5, "high": 1}}, "greater than `high`"),
        ({"rounds": {"type": "int", "low": 0, "high": 5, "step": 2}}, "does not divide"),
        ({"rounds": {"type": "int", "low": 0}}, "needs `low` and `high`"),
        ({"host": {"type": "categorical", "choices": []}}, "non-empty `choices`"),
        ({"rounds": {"type": "integer", "low": 0, "high": 1}}, "`type` must be"),
        ({"rounds": {"type": "int", "low": 0, "high": 2, "max": 3}}, "Unknown key `max`"),
        ({"temperature": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}, "log = true"),
        ({}, "no `[search]` table"),
    ],
)
def test_bad_spaces_are_clear_errors(search, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_search_space("for", search)


def test_options_of_another_method_are_rejected():
    with pytest.raises(ConfigError, match="Searchable options"):
        parse_search_space("prorefine", {"rounds": {"type": "int", "low": 0, "high": 2}})


def test_enqueued_points_are_checked_against_the_space():
    space = parse_search_space(
        "prorefine",
        {
            "k": {"type": "int", "low": 5, "high": 50, "step": 5},
            "verifier": {"type": "categorical", "choices": ["none", "llm"]},
        },
    )
    assert space.validate_point({"k": 10, "verifier": "none"}) == {"k": 10, "verifier": "none"}
    with pytest.raises(ConfigError, match="`k` = 12, outside"):
        space.validate_point({"k": 12, "verifier": "none"})
    with pytest.raises(ConfigError, match="`verifier` = 'oracle', outside"):
        space.validate_point({"k": 10, "verifier": "oracle"})
    with pytest.raises(ConfigError, match=r"missing \['verifier'\]"):
        space.validate_point({"k": 10})
    with pytest.raises(ConfigError, match=r"not searched \['n'\]"):
        space.validate_point({"k": 10, "verifier": "none", "n": 3})
