"""Configs and flags → a run specification (:mod:`dspy_for.experiments.spec`), validated before anything runs.

Comparison config layout (see ``experiments/*.toml``)::

    experiment = "quickstart"          # MLflow experiment name
    lm = "local/qwen2.5-coder-1.5b"    # default LM for every role
    lm_options = { timeout = 120, num_retries = 2 }          # every role (api_base, timeout, num_retries, ...)
    role_lms = { host = "hosted_vllm/qwen2.5-7b" }
    role_lm_options = { host = { api_base = "http://gpu-box:8000/v1" } }
    max_tokens = 1024
    seed = 0
    num_threads = 1
    baseline = "cot"                   # label the table's Δ and paired p-values refer to
    match_budget = false
    results_dir = "experiments/results/my_run"   # per-item results (resume); default mlruns/compare/items

    [[datasets]]
    name = "gsm8k"
    split = "sample"
    limit = 5                          # seeded uniform subsample; `first = 50` takes the first N

    [[methods]]
    name = "for"
    label = "for_n1"
    options = { rounds = 1 }
    role_lms = { debater = "local/qwen2.5-coder-0.5b" }

API keys never go in a spec: they come from the environment (``OPENAI_API_KEY``, ...).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.experiments.spec import (
    DatasetConfig,
    ExperimentSpec,
    JudgeConfig,
    LMSpec,
    MethodConfig,
    RunSpec,
)
from dspy_for.secrets import is_secret_key

__all__ = [
    "apply_overrides",
    "load_spec",
    "parse_dataset",
    "parse_judge",
    "parse_lm_options",
    "parse_role_lm_options",
    "parse_role_lms",
    "parse_value",
    "read_toml",
]


def check_keys(section: str, data: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"Unknown key `{unknown[0]}` in {section}. Allowed keys: {', '.join(sorted(allowed))}.")


def parse_dataset(data: Mapping[str, Any], where: str, defaults: Mapping[str, Any] | None = None) -> DatasetConfig:
    check_keys(where, data, [f.name for f in fields(DatasetConfig)])
    if "name" not in data:
        raise ConfigError(f'{where} needs a `name` (e.g. name = "gsm8k").')
    return DatasetConfig(**{**(defaults or {}), **data})


def parse_judge(data: Mapping[str, Any] | None, where: str) -> JudgeConfig | None:
    if data is None:
        return None
    check_keys(f"{where} [judge]", data, [f.name for f in fields(JudgeConfig)])
    return JudgeConfig(**data)


def _parse(data: dict[str, Any], where: str) -> ExperimentSpec:
    check_keys(where, data, [f.name for f in fields(ExperimentSpec)])
    data = copy.deepcopy(data)
    datasets = [parse_dataset(d, f"{where} [[datasets]] #{i + 1}") for i, d in enumerate(data.pop("datasets", []))]
    methods = []
    for i, m in enumerate(data.pop("methods", [])):
        check_keys(f"{where} [[methods]] #{i + 1}", m, [f.name for f in fields(MethodConfig)])
        if "name" not in m:
            raise ConfigError(f'{where} [[methods]] #{i + 1} needs a `name` (e.g. name = "cot").')
        methods.append(MethodConfig(**m))
    judge = parse_judge(data.pop("judge", None), where)
    return ExperimentSpec(datasets=datasets, methods=methods, judge=judge, **data)


def load_spec(path: str | Path | ExperimentSpec | None = None, **overrides: Any) -> ExperimentSpec:
    """A comparison spec from a TOML config, an :class:`ExperimentSpec` (copied) or nothing, with flag-style
    overrides applied (see :func:`apply_overrides`), validated.

    Comparison-only overrides: ``dataset`` (replaces the list), ``methods`` (list or "a,b,c" of labels or
    method names), ``baseline``, ``match_budget``.
    """
    if isinstance(path, ExperimentSpec):
        spec = path.copy()
    else:
        data = read_toml(path, "Config file", "experiments/*.toml") if path is not None else {}
        spec = _parse(data, f"`{path}`" if path is not None else "the config")
    o = {k: v for k, v in overrides.items() if v is not None}
    if "dataset" in o:
        spec.datasets = [DatasetConfig(name=o.pop("dataset"), split=o.get("split", "test"))]
    if "methods" in o:
        wanted = o.pop("methods")
        wanted = [w.strip() for w in wanted.split(",") if w.strip()] if isinstance(wanted, str) else list(wanted)
        by_label = {m.label: m for m in spec.methods}
        by_name = {m.name: m for m in spec.methods}
        spec.methods = [by_label.get(w) or by_name.get(w) or MethodConfig(name=w) for w in wanted]
    apply_overrides(spec, o)
    if spec.baseline is None and spec.methods:
        labels = [m.label for m in spec.methods]
        spec.baseline = "cot" if "cot" in labels else labels[0]
    return spec.validate()


def apply_overrides(spec: RunSpec, overrides: Mapping[str, Any]) -> None:
    """Apply flag-style overrides (None = not given) to ``spec`` in place — one meaning for every command.

    ``split``, ``limit``, ``first``, ``data_dir`` apply to every dataset; ``judge_lm`` sets (or replaces the
    LM of) the ``[judge]``; ``role_lms`` (dict or
    ["ROLE=SPEC", ...]), ``lm_options`` (dict or ["KEY=VALUE", ...]) and ``role_lm_options`` (dict or
    ["ROLE:KEY=VALUE", ...]) merge into the spec's; any other key must be a field of the spec.
    """
    allowed = {f.name for f in fields(spec)}
    for key, value in overrides.items():
        if value is None:
            continue
        if key in ("split", "limit", "first", "data_dir"):
            for d in spec.dataset_configs():
                setattr(d, key, value)
        elif key == "role_lms":
            spec.role_lms = {**spec.role_lms, **parse_role_lms(value)}
        elif key == "lm_options":
            spec.lm_options = {**spec.lm_options, **parse_lm_options(value)}
        elif key == "judge_lm":
            spec.judge = JudgeConfig(
                lm=value,
                rubrics=spec.judge.rubrics if spec.judge else [],
                verify=spec.judge.verify if spec.judge else True,
            )
        elif key == "role_lm_options":
            for r, opts in parse_role_lm_options(value).items():
                spec.role_lm_options[r] = {**spec.role_lm_options.get(r, {}), **opts}
        elif key in allowed:
            setattr(spec, key, value)
        else:
            raise ConfigError(f"Unknown override `{key}`. Allowed: {', '.join(sorted(allowed))}.")


def read_toml(path: str | Path, what: str, examples: str) -> dict[str, Any]:
    """Read a TOML config, or raise a :class:`ConfigError` that says what is wrong and where to look."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} `{p}` does not exist. Pass an existing TOML file (see {examples}).")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} `{p}` is not valid TOML: {exc}.") from None


def parse_role_lms(value: Any) -> dict[str, LMSpec]:
    if isinstance(value, Mapping):
        return {str(k): v if isinstance(v, dspy.BaseLM) else str(v) for k, v in value.items()}
    out: dict[str, LMSpec] = {}
    for item in value:
        role, sep, lm = str(item).partition("=")
        if not sep or not role.strip() or not lm.strip():
            raise ConfigError(f"`--role-lm` takes ROLE=SPEC (e.g. debater=local/qwen2.5-coder-0.5b), got {item!r}.")
        out[role.strip()] = lm.strip()
    return out


def parse_value(text: str) -> Any:
    """A flag value as TOML would read it: true/false, numbers, quoted strings; anything else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return {"none": None, "null": None}.get(text.lower(), text)


def parse_lm_options(value: Any, flag: str = "--lm-option") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out = dict(value)
    else:
        out = {}
        for item in value:
            key, sep, raw = str(item).partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"`{flag}` takes KEY=VALUE (e.g. {flag} timeout=60), got {item!r}.")
            out[key.strip()] = parse_value(raw.strip())
    secret = sorted(k for k in out if is_secret_key(k))
    if secret:
        raise ConfigError(
            f"`{secret[0]}` cannot be set in a config or on the command line: API keys come from "
            "the environment only (e.g. OPENAI_API_KEY), so they never reach results or tracking."
        )
    return out


def parse_role_lm_options(value: Any) -> dict[str, dict[str, Any]]:
    if isinstance(value, Mapping):
        return {str(r): parse_lm_options(o, "role_lm_options") for r, o in value.items()}
    out: dict[str, dict[str, Any]] = {}
    for item in value:
        role, sep, rest = str(item).partition(":")
        if not sep or not role.strip() or "=" not in rest:
            raise ConfigError(
                "`--role-lm-option` takes ROLE:KEY=VALUE (e.g. --role-lm-option "
                f"debater:api_base=http://127.0.0.1:8000/v1), got {item!r}."
            )
        out.setdefault(role.strip(), {}).update(parse_lm_options([rest], "--role-lm-option"))
    return out
