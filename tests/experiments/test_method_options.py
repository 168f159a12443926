"""Each method's options are declared once, by its module's constructor: every constructor option of every
registered module method is accepted by a compare config and by a sweep's search space (found by introspection,
not from a list), and `keep_unless_error = false` runs from compare and is searchable in a sweep."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest

from dspy_for.experiments import list_methods
from dspy_for.experiments.spec.config import load_spec
from dspy_for.experiments.sweeps.search_space import parse_search_space
from dspy_for.experiments.sweeps.spec import load_sweep_spec

MODULE_METHODS = [m for m in list_methods() if m.module is not None]


def _constructor_options(method: Any) -> dict[str, inspect.Parameter]:
    """Every constructor parameter a config may set: all but the signature, the LM parameters, the options the
    registry entry fixes and Python-only ones (a callable)."""
    params = list(inspect.signature(method.module.__init__).parameters.values())[2:]
    return {
        p.name: p
        for p in params
        if not p.name.endswith("_lm") and p.name not in method.fixed and p.name not in method.python_only
    }


def _other_value(annotation: Any, default: Any) -> Any:
    """A valid value of ``annotation`` other than ``default`` (so the test sees it arrive)."""
    if get_origin(annotation) is Literal:
        return next(c for c in get_args(annotation) if c != default)
    args = [a for a in get_args(annotation) if a is not type(None)]
    kind = args[0] if args else annotation
    if kind is bool:
        return not default
    if kind is int:
        return (default or 1) + 1
    if kind is float:
        return round((default + 1) / 2, 3) if default is not None and default < 1 else 2.0 * (default or 1)
    if get_origin(kind) is Literal:
        return next(c for c in get_args(kind) if c != default)
    raise AssertionError(f"no test value for {annotation!r}")


def _toml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value).replace("'", '"')


def test_the_registry_takes_every_option_from_the_constructor():
    assert {m.name for m in MODULE_METHODS} >= {"for", "prorefine", "self_consistency", "defender_sc", "cascade"}
    for m in MODULE_METHODS:
        options = _constructor_options(m)
        assert set(m.defaults) == set(options), m.name  # nothing declared twice, nothing missing
        for name, p in options.items():
            assert m.defaults[name] == p.default, (m.name, name)


@pytest.mark.parametrize("method", MODULE_METHODS, ids=lambda m: m.name)
def test_every_constructor_option_is_accepted_by_a_config_and_a_sweep(method, tmp_path: Path):
    hints = typing.get_type_hints(method.module.__init__)
    for name, p in _constructor_options(method).items():
        value = _other_value(hints[name], p.default)
        if method.name == "cascade" and name == "first_samples":
            value = 3  # must stay <= max_samples
        config = tmp_path / f"{name}.toml"
        config.write_text(
            f'lm = "openai/fake"\n[[datasets]]\nname = "gsm8k"\nsplit = "sample"\n'
            f'[[methods]]\nname = "{method.name}"\noptions = {{ {name} = {_toml(value)} }}\n'
        )
        spec = load_spec(config)
        assert spec.methods[0].options == {name: value}
        method.validate_options({name: value})  # the module itself takes it
        space = parse_search_space(method.name, {name: {"type": "categorical", "choices": [value, p.default]}})
        assert space.names == [name]


def test_keep_unless_error_runs_from_compare_and_is_searchable_in_a_sweep(install_scripted_lm, tmp_path: Path):
    from dspy_for.experiments.core import prepare_run

    install_scripted_lm(lambda messages, max_tokens: {"reasoning": "r", "answer": "1"})
    config = tmp_path / "c.toml"
    config.write_text(
        'lm = "openai/fake"\n[[datasets]]\nname = "gsm8k"\nsplit = "sample"\nfirst = 1\n'
        '[[methods]]\nname = "for"\nlabel = "paper_keep"\noptions = { keep_unless_error = false }\n'
    )
    spec = load_spec(config)
    run = prepare_run(spec, spec.datasets[0], spec.methods[0])
    assert run.program.keep_unless_error is False
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        'method = "for"\nlm = "openai/fake"\n[dataset]\nname = "gsm8k"\nsplit = "sample"\n'
        '[search.keep_unless_error]\ntype = "categorical"\nchoices = [true, false]\n'
    )
    assert load_sweep_spec(sweep).space.names == ["keep_unless_error"]
