"""One typed run specification: a TOML config, CLI flags or a Python object all become a validated spec
before anything runs, so ``compare``, every sweep trial, ``--final-test`` and the measurement scripts take
one path (:mod:`dspy_for.experiments.run`).

:class:`RunSpec` is the core every run shares (LMs per role and their options, sampling, threads,
tracking, results); :class:`ExperimentSpec` adds datasets × methods for ``compare``;
:class:`~dspy_for.experiments.sweep_spec.SweepSpec` adds a search space, objectives and storage.

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
import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import dspy

from dspy_for.datasets import dataset_info
from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import get_method
from dspy_for.lm import check_lm_options, check_lm_spec, describe_lm
from dspy_for.metrics import RUBRICS
from dspy_for.secrets import is_secret_key

__all__ = [
    "DatasetConfig",
    "ExperimentSpec",
    "JudgeConfig",
    "MethodConfig",
    "RunSpec",
    "apply_overrides",
    "load_spec",
    "parse_lm_options",
    "parse_role_lm_options",
    "parse_role_lms",
    "prompts_fingerprint",
    "read_toml",
]

DEFAULT_LM = "local/qwen2.5-coder-1.5b"
LMSpec = str | dspy.BaseLM
# options that change how a request travels, never what it returns: not part of any result key
_TRANSPORT_OPTIONS = ("timeout", "num_retries")


def _check_keys(section: str, data: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"Unknown key `{unknown[0]}` in {section}. Allowed keys: {', '.join(sorted(allowed))}.")


def _positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")


@dataclass
class DatasetConfig:
    name: str
    split: str = "test"
    limit: int | None = None
    first: int | None = None
    data_dir: str | None = None
    seed: int = 0

    def validate(self) -> None:
        info = dataset_info(self.name)
        if self.split not in info.splits:
            raise ConfigError(
                f"Unknown split `{self.split}` for dataset `{self.name}`. Choose one of: {', '.join(info.splits)}."
            )
        for key in ("limit", "first"):
            value = getattr(self, key)
            if value is not None:
                _positive_int(value, f"{key}` of dataset `{self.name}")


@dataclass
class MethodConfig:
    """One method of a run: a registry name, a label, its options, per-role LMs and an optional compile step
    (``{kind, trainset, valset, train_limit, val_limit, optimizer_lm, <optimizer options>}``)."""

    name: str
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    role_lms: dict[str, LMSpec] = field(default_factory=dict)
    compile: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.name


@dataclass
class JudgeConfig:
    """``[judge]``: an LM that grades every scored item — judged accuracy (``verify``) and the ``rubrics``
    scores (default all three: reasoning, coherence, holistic) — under its own role ``judge``."""

    lm: LMSpec
    rubrics: list[str] = field(default_factory=list)
    verify: bool = True

    def validate(self) -> None:
        unknown = sorted(set(self.rubrics) - set(RUBRICS))
        if unknown:
            raise ConfigError(f"Unknown rubric `{unknown[0]}` in [judge]. Choose from: {', '.join(RUBRICS)}.")
        if isinstance(self.lm, str):
            check_lm_spec(self.lm)

    @property
    def scores(self) -> tuple[str, ...]:
        """The per-item scores this judge gives: ``judged_accuracy`` (if ``verify``) and ``quality.<rubric>``."""
        return (*(("judged_accuracy",) if self.verify else ()), *(f"quality.{r}" for r in self.rubrics or RUBRICS))


@dataclass(kw_only=True)
class RunSpec:
    """What every run shares: the LM of every role and its options, sampling, threads, tracking, results.

    ``lm`` and ``role_lms`` values are litellm model strings, ``local/<name>``, or (Python API) any
    ``dspy.BaseLM`` object, used as is. ``lm_options`` apply to every role built from a string
    (``api_base``, ``timeout``, ``num_retries``, ``temperature``, ...); ``role_lm_options`` per role on top.
    """

    lm: LMSpec = DEFAULT_LM
    role_lms: dict[str, LMSpec] = field(default_factory=dict)
    lm_options: dict[str, Any] = field(default_factory=dict)
    role_lm_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_tokens: int | None = 1024
    seed: int = 0
    num_threads: int = 1
    experiment: str = "dspy-for"
    tracking_uri: str | None = None
    cache: bool = True
    results_dir: str | None = None
    autolog: bool = False
    judge: JudgeConfig | None = None

    #: fields that change no result (left out of fingerprints and result keys)
    NOT_RESULTS: ClassVar[tuple[str, ...]] = (
        "tracking_uri", "num_threads", "autolog", "experiment", "results_dir",
    )

    # ------------------------------------------------------------------------------------- datasets

    def dataset_configs(self) -> list[DatasetConfig]:
        raise NotImplementedError

    def method_roles(self) -> set[str]:
        """Every role of every method this run may build (for checking per-role settings)."""
        raise NotImplementedError

    # -------------------------------------------------------------------------------- LMs per role

    def lm_for(self, role: str, method_role_lms: Mapping[str, LMSpec] | None = None) -> LMSpec:
        """The LM spec (or object) of ``role``: the method's own, else the run's per-role, else ``lm``."""
        return (method_role_lms or {}).get(role) or self.role_lms.get(role) or self.lm

    def lm_options_for(self, role: str) -> dict[str, Any]:
        return {**self.lm_options, **self.role_lm_options.get(role, {})}

    def role_settings(self, roles: Iterable[str], method_role_lms: Mapping[str, LMSpec] | None = None
                      ) -> dict[str, Any]:
        """What decides each role's answers (for result keys): its LM and the options that change results."""
        out: dict[str, Any] = {}
        for r in roles:
            lm = self.lm_for(r, method_role_lms)
            options = {k: v for k, v in self.lm_options_for(r).items() if k not in _TRANSPORT_OPTIONS}
            out[r] = {"lm": lm if isinstance(lm, str) else describe_lm(lm), **({"options": options} if options else {})}
        return out

    # ----------------------------------------------------------------------------------- validation

    def validate(self: _S) -> _S:
        datasets = self.dataset_configs()
        for d in datasets:
            d.validate()
        if self.judge is not None:
            self.judge.validate()
        roles = self.method_roles() | ({"judge"} if self.judge is not None else set())
        for where, mapping in (("role_lms", self.role_lms), ("role_lm_options", self.role_lm_options)):
            unknown = sorted(set(mapping) - roles)
            if unknown:
                raise ConfigError(
                    f"`{where}`: this run has no role `{unknown[0]}` (no method of it does). Its roles: "
                    f"{', '.join(sorted(roles))}. Fix the ROLE in `{where}` (`--role-lm ROLE=SPEC`)."
                )
        for spec in [self.lm, *self.role_lms.values()]:
            if isinstance(spec, str):
                check_lm_spec(spec)
        check_lm_options(self.lm_options)
        for options in self.role_lm_options.values():
            check_lm_options(options)
        _positive_int(self.num_threads, "num_threads")
        if self.max_tokens is not None:
            _positive_int(self.max_tokens, "max_tokens")
        return self

    # ------------------------------------------------------------------------------------ identity

    def fingerprint(self) -> str:
        """Hash of everything that changes results (not tracking or threading), naming the run's directory."""
        d = self.to_dict()
        for k in self.NOT_RESULTS:
            d.pop(k, None)
        for k in ("lm_options", "role_lm_options"):
            if not d.get(k):
                d.pop(k, None)
        return _hash(d)

    def item_key(self, dataset: DatasetConfig, method: MethodConfig, options: Mapping[str, Any],
                 roles: Iterable[str], prompts: str = "") -> str:
        """Hash of what decides one item's result for ``method`` on ``dataset``: each role's LM and the
        options that change its answers, the options and compile settings, the prompts (``prompts``:
        :func:`prompts_fingerprint` of the built program), the dataset's name and split — but not how many
        items run (``limit``/``first``), where the data was read from, nor the other methods. Per-item
        results are stored under it and matched by each item's content, so a run grown from 10 to 50
        items only runs what is new, an edited data file re-runs exactly the changed items, and a role
        prompt edited in the library starts a fresh set of results instead of reusing stale ones."""
        return _hash({
            "roles": self.role_settings(roles, method.role_lms), "max_tokens": self.max_tokens, "seed": self.seed,
            "cache": self.cache, "dataset": {"name": dataset.name, "split": dataset.split},
            "method": {"name": method.name, "options": dict(options), "compile": method.compile, "prompts": prompts},
        })

    def to_dict(self) -> dict[str, Any]:
        """Plain data (LM objects described by :func:`describe_lm`, never copied)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def copy(self: _S) -> _S:
        """A copy whose config parts can be changed freely (LM objects are shared, not copied)."""
        memo: dict[int, Any] = {id(lm): lm for lm in _lms_in(self)}
        return copy.deepcopy(self, memo)


_S = TypeVar("_S", bound=RunSpec)


def _plain(value: Any) -> Any:
    if isinstance(value, dspy.BaseLM):
        return describe_lm(value)
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _lms_in(value: Any) -> Iterable[dspy.BaseLM]:
    if isinstance(value, dspy.BaseLM):
        yield value
    elif hasattr(value, "__dataclass_fields__"):
        for f in fields(value):
            yield from _lms_in(getattr(value, f.name))
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _lms_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _lms_in(v)


@dataclass(kw_only=True)
class ExperimentSpec(RunSpec):
    """A comparison: every method on every dataset (``dspy-for compare``)."""

    datasets: list[DatasetConfig]
    methods: list[MethodConfig]
    baseline: str | None = None
    match_budget: bool = False

    NOT_RESULTS: ClassVar[tuple[str, ...]] = (*RunSpec.NOT_RESULTS, "baseline")

    def dataset_configs(self) -> list[DatasetConfig]:
        return self.datasets

    def method_roles(self) -> set[str]:
        return {r for m in self.methods for r in get_method(m.name).roles}

    def validate(self) -> ExperimentSpec:
        if not self.datasets:
            raise ConfigError("No dataset: add a `[[datasets]]` section or pass `--dataset NAME`.")
        if not self.methods:
            raise ConfigError("No method: add `[[methods]]` sections or pass `--methods a,b,c`.")
        labels = [m.label for m in self.methods]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ConfigError(f"Method label `{dupes[0]}` is used twice: give each `[[methods]]` a unique `label`.")
        for m in self.methods:
            spec = get_method(m.name)
            spec.validate_options(m.options)
            spec.validate_roles(m.role_lms)
            for s in m.role_lms.values():
                if isinstance(s, str):
                    check_lm_spec(s)
        super().validate()
        if self.baseline is not None and self.baseline not in labels:
            raise ConfigError(f"`baseline` `{self.baseline}` is not a method label. Labels: {', '.join(labels)}.")
        return self


def prompts_fingerprint(program: Any) -> str:
    """Hash of what a program's predictors tell the LM: per named predictor its instruction, its fields
    (name, type, description) and its demos. Two programs with the same fingerprint send the same prompts."""
    parts = []
    for name, predictor in program.named_predictors():
        sig = predictor.signature
        fields_ = [(k, str(f.annotation), str((f.json_schema_extra or {}).get("desc", "")))
                   for k, f in sig.fields.items()]
        parts.append({"name": name, "instructions": sig.instructions, "fields": fields_,
                      "demos": [dict(d) for d in getattr(predictor, "demos", [])]})
    return _hash({"predictors": parts})


def _hash(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------- parsing


def parse_dataset(data: Mapping[str, Any], where: str, defaults: Mapping[str, Any] | None = None) -> DatasetConfig:
    _check_keys(where, data, [f.name for f in fields(DatasetConfig)])
    if "name" not in data:
        raise ConfigError(f"{where} needs a `name` (e.g. name = \"gsm8k\").")
    return DatasetConfig(**{**(defaults or {}), **data})


def parse_judge(data: Mapping[str, Any] | None, where: str) -> JudgeConfig | None:
    if data is None:
        return None
    _check_keys(f"{where} [judge]", data, [f.name for f in fields(JudgeConfig)])
    return JudgeConfig(**data)


def _parse(data: dict[str, Any], where: str) -> ExperimentSpec:
    _check_keys(where, data, [f.name for f in fields(ExperimentSpec)])
    data = copy.deepcopy(data)
    datasets = [parse_dataset(d, f"{where} [[datasets]] #{i + 1}") for i, d in enumerate(data.pop("datasets", []))]
    methods = []
    for i, m in enumerate(data.pop("methods", [])):
        _check_keys(f"{where} [[methods]] #{i + 1}", m, [f.name for f in fields(MethodConfig)])
        if "name" not in m:
            raise ConfigError(f"{where} [[methods]] #{i + 1} needs a `name` (e.g. name = \"cot\").")
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
            spec.judge = JudgeConfig(lm=value, rubrics=spec.judge.rubrics if spec.judge else [],
                                     verify=spec.judge.verify if spec.judge else True)
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
        raise ConfigError(f"`{secret[0]}` cannot be set in a config or on the command line: API keys come from "
                          "the environment only (e.g. OPENAI_API_KEY), so they never reach results or tracking.")
    return out


def parse_role_lm_options(value: Any) -> dict[str, dict[str, Any]]:
    if isinstance(value, Mapping):
        return {str(r): parse_lm_options(o, "role_lm_options") for r, o in value.items()}
    out: dict[str, dict[str, Any]] = {}
    for item in value:
        role, sep, rest = str(item).partition(":")
        if not sep or not role.strip() or "=" not in rest:
            raise ConfigError("`--role-lm-option` takes ROLE:KEY=VALUE (e.g. --role-lm-option "
                              f"debater:api_base=http://127.0.0.1:8000/v1), got {item!r}.")
        out.setdefault(role.strip(), {}).update(parse_lm_options([rest], "--role-lm-option"))
    return out
