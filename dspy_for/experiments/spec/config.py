"""Configs and flags → a run specification (:mod:`dspy_for.experiments.spec.model`), validated before anything runs.

Comparison config layout (see ``experiments/*.toml``)::

    experiment = "quickstart"          # MLflow experiment name
    lm = "local/qwen2.5-coder-1.5b"    # default LM for every role
    lm_options = { timeout = 120, num_retries = 2 }          # every role (api_base, timeout, num_retries, ...)
    role_lms = { host = "hosted_vllm/qwen2.5-7b" }
    role_lm_options = { host = { api_base = "http://gpu-box:8000/v1" } }
    max_tokens = 1024
    seed = 0
    num_threads = 1                    # a run setting: see spec/settings.py for them all
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import dspy

from dspy_for.datasets import dataset_info, register_jsonl
from dspy_for.datasets.formats import read_utf8
from dspy_for.datasets.user import USER_SPLIT
from dspy_for.errors import ConfigError, DatasetError
from dspy_for.experiments.spec.model import (
    DatasetConfig,
    ExperimentSpec,
    JudgeConfig,
    LMLike,
    MethodConfig,
    RunSpec,
)
from dspy_for.experiments.spec.settings import SETTINGS, check_settings, settings_for
from dspy_for.secrets import is_secret_key

__all__ = [
    "DEFAULT_METHODS",
    "Overrides",
    "apply_overrides",
    "load_spec",
    "parse_dataset",
    "parse_judge",
    "parse_lm_options",
    "parse_role_lm_options",
    "parse_role_lms",
    "parse_value",
    "read_toml",
    "split_settings",
    "task_dataset",
]


def check_keys(section: str, data: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"Unknown key `{unknown[0]}` in {section}. Allowed keys: {', '.join(sorted(allowed))}.")


def parse_dataset(data: Mapping[str, Any], where: str) -> DatasetConfig:
    check_keys(where, data, [f.name for f in fields(DatasetConfig)])
    if "name" not in data:
        raise ConfigError(f'{where} needs a `name` (e.g. name = "gsm8k").')
    return DatasetConfig(**data)


def parse_judge(data: Mapping[str, Any] | None, where: str) -> JudgeConfig | None:
    if data is None:
        return None
    check_keys(f"{where} [judge]", data, [f.name for f in fields(JudgeConfig)])
    return JudgeConfig(**data)


def split_settings(data: dict[str, Any], spec_class: type[RunSpec], where: str) -> dict[str, Any]:
    """Take the run settings out of a config's top-level ``data`` (checked by their declarations: see
    :mod:`~dspy_for.experiments.spec.settings`) and check that every key left is one of ``spec_class``'s own."""
    given = {k: data.pop(k) for k in list(data) if k in SETTINGS}
    settings = check_settings(given, spec_class.COMMAND, f" from {where}")
    own = [f.name for f in fields(spec_class) if f.name not in SETTINGS]
    check_keys(where, data, [*own, *(s.name for s in settings_for(spec_class.COMMAND))])
    return settings


def _parse(data: dict[str, Any], where: str) -> ExperimentSpec:
    data = copy.deepcopy(data)
    settings = split_settings(data, ExperimentSpec, where)
    datasets = [parse_dataset(d, f"{where} [[datasets]] #{i + 1}") for i, d in enumerate(data.pop("datasets", []))]
    methods = []
    for i, m in enumerate(data.pop("methods", [])):
        check_keys(f"{where} [[methods]] #{i + 1}", m, [f.name for f in fields(MethodConfig)])
        if "name" not in m:
            raise ConfigError(f'{where} [[methods]] #{i + 1} needs a `name` (e.g. name = "cot").')
        methods.append(MethodConfig(**m))
    judge = parse_judge(data.pop("judge", None), where)
    return ExperimentSpec(datasets=datasets, methods=methods, judge=judge, **data, **settings)


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """Flag-style changes to a spec (None: not given): the LMs of its roles, its data and methods, and the run
    ``settings`` given (name -> value, each a declared :class:`~dspy_for.experiments.spec.settings.Setting`). The
    CLI builds one from its options; the Python API's keyword arguments (``compare(config, first=10,
    num_threads=8)``) become one (:meth:`of`); both are applied by :func:`apply_overrides`, so a flag means the same
    thing in every command."""

    # the LMs of every role and their options (the spec's own are merged, not replaced)
    lm: LMLike | None = None
    role_lms: Mapping[str, LMLike] | Sequence[str] | None = None  # {"debater": lm} or ["debater=model", ...]
    lm_options: Mapping[str, Any] | Sequence[str] | None = None  # {"timeout": 60} or ["timeout=60", ...]
    role_lm_options: Mapping[str, Mapping[str, Any]] | Sequence[str] | None = None  # or ["host:timeout=60", ...]
    judge_lm: LMLike | None = None  # sets (or replaces the LM of) the [judge]
    max_tokens: int | None = None
    cache: bool | None = None
    seed: int | None = None
    experiment: str | None = None
    # every dataset of the run
    data_dir: str | None = None
    split: str | None = None
    limit: int | None = None
    first: int | None = None
    # comparisons only
    dataset: str | None = None  # replaces the list of datasets (split default: the dataset's val)
    data: str | Path | None = None  # the user's JSONL file (question / answer per line) replaces the list of datasets
    methods: str | Sequence[str] | None = None  # "a,b,c" or a list: labels of the config's methods or method names
    baseline: str | None = None
    match_budget: bool | None = None
    sequential: bool | None = None
    max_items: int | None = None
    # sweeps only
    n_trials: int | None = None
    storage: str | None = None
    study: str | None = None
    #: the run settings given, by their declared names (checked against the spec's command when applied)
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, overrides: Mapping[str, Any]) -> Overrides:
        """Keyword arguments → :class:`Overrides` (run settings by their declared names); an unknown name fails with
        the list of known ones."""
        known = {f.name for f in fields(cls)} - {"settings"}
        unknown = sorted(set(overrides) - known - set(SETTINGS))
        if unknown:
            allowed = ", ".join(sorted(known | set(SETTINGS)))
            raise ConfigError(f"Unknown override `{unknown[0]}`. Allowed: {allowed}.")
        return cls(
            **{k: v for k, v in overrides.items() if k in known},
            settings={k: v for k, v in overrides.items() if k in SETTINGS},
        )

    def compare_only(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "data": self.data,
            "methods": self.methods,
            "baseline": self.baseline,
            "match_budget": self.match_budget,
            "sequential": self.sequential,
            "max_items": self.max_items,
        }

    def sweep_only(self) -> dict[str, Any]:
        return {"n_trials": self.n_trials, "storage": self.storage, "study": self.study}


#: what ``compare --dataset NAME`` (or ``--data FILE``) runs when neither the config nor ``--methods`` names methods
DEFAULT_METHODS = ("cot", "for")


def load_spec(
    path: str | Path | ExperimentSpec | None = None, overrides: Overrides | None = None, **kwargs: Any
) -> ExperimentSpec:
    """A comparison spec from a TOML config, an :class:`ExperimentSpec` (copied) or nothing, with ``overrides``
    (or the same as keyword arguments) applied, validated."""
    if isinstance(path, ExperimentSpec):
        spec = path.copy()
    else:
        data = read_toml(path, "Config file", "experiments/*.toml") if path is not None else {}
        spec = _parse(data, f"`{path}`" if path is not None else "the config")
    spec = apply_overrides(spec, overrides or Overrides.of(kwargs))
    if spec.baseline is None and spec.methods:
        labels = [m.label for m in spec.methods]
        spec.baseline = "cot" if "cot" in labels else labels[0]
    return spec.validate()


_Spec = TypeVar("_Spec", bound=RunSpec)


def apply_overrides(spec: _Spec, o: Overrides) -> _Spec:
    """``spec`` with the overrides ``o`` applied (a new spec; see :class:`Overrides`)."""
    compare = isinstance(spec, ExperimentSpec)
    misplaced = o.sweep_only() if compare else o.compare_only()
    wrong = sorted(name for name, value in misplaced.items() if value is not None)
    if wrong:
        raise ConfigError(f"`{wrong[0]}` applies to {'sweeps' if compare else 'comparisons'} only: drop it here.")
    changes: dict[str, Any] = check_settings(o.settings, spec.COMMAND, " here")
    for name, value in (
        ("lm", o.lm),
        ("max_tokens", o.max_tokens),
        ("cache", o.cache),
        ("seed", o.seed),
        ("experiment", o.experiment),
        *(() if compare else o.sweep_only().items()),
    ):
        if value is not None:
            changes[name] = value
    if o.role_lms is not None:
        changes["role_lms"] = {**spec.role_lms, **parse_role_lms(o.role_lms)}
    if o.lm_options is not None:
        changes["lm_options"] = {**spec.lm_options, **parse_lm_options(o.lm_options)}
    if o.role_lm_options is not None:
        merged = {r: dict(v) for r, v in spec.role_lm_options.items()}
        for r, opts in parse_role_lm_options(o.role_lm_options).items():
            merged[r] = {**merged.get(r, {}), **opts}
        changes["role_lm_options"] = merged
    if o.judge_lm is not None:
        old = spec.judge
        changes["judge"] = JudgeConfig(
            lm=o.judge_lm, rubrics=old.rubrics if old else [], verify=old.verify if old else True
        )
    if isinstance(spec, ExperimentSpec):
        changes.update(_compare_changes(spec, o))
    spec = replace(spec, **changes)
    slicing = {"split": o.split, "limit": o.limit, "first": o.first, "data_dir": o.data_dir}
    slicing = {k: v for k, v in slicing.items() if v is not None}
    return spec.with_datasets(**slicing) if slicing else spec


def task_dataset(
    dataset: str | None, split: str | None, data: str | Path | None, data_dir: str | None
) -> DatasetConfig:
    """The one dataset named by ``--dataset NAME [--split S]`` (a benchmark; split default
    :attr:`~dspy_for.datasets.DatasetInfo.default_split`, ``val``) or by ``--data FILE.jsonl`` (the user's file,
    read, checked and registered now by :func:`~dspy_for.datasets.register_jsonl`: a bad line fails before any LM
    call). Exactly one of ``dataset`` and ``data`` must be given."""
    if (dataset is None) == (data is None):
        raise ConfigError(
            "Give the task once: `--dataset NAME [--split S]` for a benchmark, or `--data FILE.jsonl` for your own "
            "data (one JSON object per line with `question` and `answer`)."
            + (" Both were given: drop one." if dataset is not None else "")
        )
    if data is None:
        assert dataset is not None
        return DatasetConfig(name=dataset, split=split or dataset_info(dataset).default_split, data_dir=data_dir)
    for flag, value in (("--split", split), ("--data-dir", data_dir)):
        if value is not None:
            raise ConfigError(
                f"`{flag}` applies to `--dataset`; with `--data FILE.jsonl` drop it (a file is one split)."
            )
    try:
        info = register_jsonl(data)
    except DatasetError as exc:
        raise ConfigError(f"`--data`: {exc}") from None
    return DatasetConfig(name=info.name, split=USER_SPLIT)


def _compare_changes(spec: ExperimentSpec, o: Overrides) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if o.dataset is not None or o.data is not None:
        out["datasets"] = [task_dataset(o.dataset, o.split, o.data, o.data_dir)]
    if o.methods is None and not spec.methods and "datasets" in out:
        out["methods"] = [MethodConfig(name=name) for name in DEFAULT_METHODS]
    if o.methods is not None:
        wanted = o.methods
        wanted = [w.strip() for w in wanted.split(",") if w.strip()] if isinstance(wanted, str) else list(wanted)
        by_label = {m.label: m for m in spec.methods}
        by_name = {m.name: m for m in spec.methods}
        out["methods"] = [by_label.get(w) or by_name.get(w) or MethodConfig(name=w) for w in wanted]
    if o.baseline is not None:
        out["baseline"] = o.baseline
    if o.match_budget is not None:
        out["match_budget"] = o.match_budget
    if o.sequential is not None:
        out["sequential"] = o.sequential
    if o.max_items is not None:
        out["max_items"] = o.max_items
    return out


def read_toml(path: str | Path, what: str, examples: str) -> dict[str, Any]:
    """Read a TOML config, or raise a :class:`ConfigError` that says what is wrong and where to look."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} `{p}` does not exist. Pass an existing TOML file (see {examples}).")
    try:
        return tomllib.loads(read_utf8(p, ConfigError))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} `{p}` is not valid TOML: {exc}.") from None


def parse_role_lms(value: Any) -> dict[str, LMLike]:
    if isinstance(value, Mapping):
        return {str(k): v if isinstance(v, dspy.BaseLM) else str(v) for k, v in value.items()}
    out: dict[str, LMLike] = {}
    for item in value:
        role, sep, lm = str(item).partition("=")
        if not sep or not role.strip() or not lm.strip():
            raise ConfigError(f"`--role-lm` takes ROLE=MODEL (e.g. debater=local/qwen2.5-coder-0.5b), got {item!r}.")
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
