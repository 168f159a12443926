"""One typed run specification for comparisons: a TOML config and CLI flags both become an
:class:`ExperimentSpec` before anything runs, so the CLI, the Python API and sweeps take one path.

Config layout (see ``experiments/*.toml``)::

    experiment = "quickstart"          # MLflow experiment name
    lm = "local/qwen2.5-coder-1.5b"    # default LM for every role
    max_tokens = 1024
    seed = 0
    num_threads = 1
    baseline = "cot"                   # label the table's Δ and paired p-values refer to
    match_budget = false
    role_lms = { host = "local/qwen2.5-coder-1.5b" }
    results_dir = "experiments/results/my_run"   # per-item results (resume); default mlruns/compare/

    [[datasets]]
    name = "gsm8k"
    split = "sample"
    limit = 5                          # seeded uniform subsample; `first = 50` takes the first N

    [[methods]]
    name = "for"
    label = "for_n1"
    options = { rounds = 1 }
    role_lms = { debater = "local/qwen2.5-coder-0.5b" }
"""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dspy_for.errors import ConfigError

__all__ = [
    "DatasetConfig", "ExperimentSpec", "JudgeConfig", "MethodConfig", "load_spec", "parse_role_lms",
    "prompts_fingerprint", "read_toml",
]


def _check_keys(section: str, data: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(
            f"Unknown key `{unknown[0]}` in {section}. Allowed keys: {', '.join(sorted(allowed))}."
        )


@dataclass
class DatasetConfig:
    name: str
    split: str = "test"
    limit: int | None = None
    first: int | None = None
    data_dir: str | None = None
    seed: int = 0


@dataclass
class MethodConfig:
    name: str
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    role_lms: dict[str, str] = field(default_factory=dict)
    compile: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.name


@dataclass
class JudgeConfig:
    lm: str
    rubrics: list[str] = field(default_factory=list)
    verify: bool = True


@dataclass
class ExperimentSpec:
    datasets: list[DatasetConfig]
    methods: list[MethodConfig]
    experiment: str = "dspy-for"
    lm: str = "local/qwen2.5-coder-1.5b"
    role_lms: dict[str, str] = field(default_factory=dict)
    max_tokens: int | None = 1024
    seed: int = 0
    num_threads: int = 1
    baseline: str | None = None
    match_budget: bool = False
    judge: JudgeConfig | None = None
    autolog: bool = False
    tracking_uri: str | None = None
    cache: bool = True
    results_dir: str | None = None

    def validate(self) -> ExperimentSpec:
        from dspy_for.datasets import dataset_info
        from dspy_for.experiments.methods import get_method

        if not self.datasets:
            raise ConfigError("No dataset: add a `[[datasets]]` section or pass `--dataset NAME`.")
        if not self.methods:
            raise ConfigError("No method: add `[[methods]]` sections or pass `--methods a,b,c`.")
        for d in self.datasets:
            info = dataset_info(d.name)
            if d.split not in info.splits:
                raise ConfigError(
                    f"Unknown split `{d.split}` for dataset `{d.name}`. Choose one of: {', '.join(info.splits)}."
                )
            for key in ("limit", "first"):
                value = getattr(d, key)
                if value is not None and (not isinstance(value, int) or value < 1):
                    raise ConfigError(f"`{key}` of dataset `{d.name}` must be a positive integer, got {value!r}.")
        labels = [m.label for m in self.methods]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ConfigError(f"Method label `{dupes[0]}` is used twice: give each `[[methods]]` a unique `label`.")
        for m in self.methods:
            spec = get_method(m.name)
            spec.validate_options(m.options)
            spec.validate_roles(m.role_lms)
        if self.baseline is not None and self.baseline not in labels:
            raise ConfigError(f"`baseline` `{self.baseline}` is not a method label. Labels: {', '.join(labels)}.")
        if not isinstance(self.num_threads, int) or self.num_threads < 1:
            raise ConfigError(f"`num_threads` must be a positive integer, got {self.num_threads!r}.")
        return self

    def fingerprint(self) -> str:
        """Hash of everything that changes results (not tracking or threading), naming the resume dir."""
        d = asdict(self)
        for k in ("tracking_uri", "num_threads", "autolog", "experiment", "baseline", "results_dir"):
            d.pop(k, None)
        return _hash(d)

    def item_key(self, dataset: DatasetConfig, method: MethodConfig, options: dict[str, Any], roles: list[str],
                 prompts: str = "") -> str:
        """Hash of what decides one item's result for ``method`` on ``dataset``: its LMs, options and compile
        settings, its prompts (``prompts``: :func:`prompts_fingerprint` of the built program), the split and
        the data, but not how many items run (``limit``/``first``) nor the other methods. Per-item results are
        stored under it, so a run grown from 10 to 50 items, or given one more method, only runs what is new,
        and a role prompt edited in the library starts a fresh set of results instead of reusing stale ones."""
        lms = {r: s for r, s in {**self.role_lms, **method.role_lms}.items() if r in roles}
        return _hash({
            "lm": self.lm, "role_lms": lms, "max_tokens": self.max_tokens, "seed": self.seed, "cache": self.cache,
            "dataset": {"name": dataset.name, "split": dataset.split, "data_dir": dataset.data_dir,
                        "seed": dataset.seed},
            "method": {"name": method.name, "options": options, "compile": method.compile, "prompts": prompts},
        })

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_TOP = {f.name for f in fields(ExperimentSpec)}


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


def _hash(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _parse(data: dict[str, Any], where: str) -> ExperimentSpec:
    _check_keys(where, data, _TOP)
    data = copy.deepcopy(data)
    datasets = []
    for i, d in enumerate(data.pop("datasets", [])):
        _check_keys(f"{where} [[datasets]] #{i + 1}", d, {f.name for f in fields(DatasetConfig)})
        if "name" not in d:
            raise ConfigError(f"{where} [[datasets]] #{i + 1} needs a `name` (e.g. name = \"gsm8k\").")
        datasets.append(DatasetConfig(**d))
    methods = []
    for i, m in enumerate(data.pop("methods", [])):
        _check_keys(f"{where} [[methods]] #{i + 1}", m, {f.name for f in fields(MethodConfig)})
        if "name" not in m:
            raise ConfigError(f"{where} [[methods]] #{i + 1} needs a `name` (e.g. name = \"cot\").")
        methods.append(MethodConfig(**m))
    judge = data.pop("judge", None)
    if judge is not None:
        _check_keys(f"{where} [judge]", judge, {f.name for f in fields(JudgeConfig)})
        judge = JudgeConfig(**judge)
    return ExperimentSpec(datasets=datasets, methods=methods, judge=judge, **data)


def load_spec(path: str | Path | None = None, **overrides: Any) -> ExperimentSpec:
    """Read a TOML config (or start empty) and apply flag-style overrides, then validate.

    Overrides: ``dataset``, ``split``, ``limit``, ``first``, ``data_dir`` (applied to every dataset; a
    ``dataset`` replaces the list), ``methods`` (list or "a,b,c" of labels or method names), ``lm``,
    ``role_lms`` (dict or ["ROLE=SPEC", ...]), ``tracking_uri``, ``match_budget``, ``num_threads``,
    ``seed``, ``experiment``, ``autolog``, ``max_tokens``, ``baseline``, ``results_dir``.
    """
    data = read_toml(path, "Config file", "experiments/*.toml") if path is not None else {}
    where = f"`{path}`" if path is not None else "the config"
    spec = _parse(data, where)
    o = {k: v for k, v in overrides.items() if v is not None}
    if "dataset" in o:
        spec.datasets = [DatasetConfig(name=o.pop("dataset"), split=o.get("split", "test"))]
    for key in ("split", "limit", "first", "data_dir"):
        if key in o:
            value = o.pop(key)
            for d in spec.datasets:
                setattr(d, key, value)
    if "methods" in o:
        wanted = o.pop("methods")
        wanted = [w.strip() for w in wanted.split(",") if w.strip()] if isinstance(wanted, str) else list(wanted)
        by_label = {m.label: m for m in spec.methods}
        by_name = {m.name: m for m in spec.methods}
        spec.methods = [by_label.get(w) or by_name.get(w) or MethodConfig(name=w) for w in wanted]
    if "role_lms" in o:
        spec.role_lms = {**spec.role_lms, **parse_role_lms(o.pop("role_lms"))}
    for key, value in o.items():
        if key not in _TOP:
            raise ConfigError(f"Unknown override `{key}`. Allowed: {', '.join(sorted(_TOP))}.")
        setattr(spec, key, value)
    if spec.baseline is None and spec.methods:
        labels = [m.label for m in spec.methods]
        spec.baseline = "cot" if "cot" in labels else labels[0]
    return spec.validate()


def read_toml(path: str | Path, what: str, examples: str) -> dict[str, Any]:
    """Read a TOML config, or raise a :class:`ConfigError` that says what is wrong and where to look."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} `{p}` does not exist. Pass an existing TOML file (see {examples}).")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} `{p}` is not valid TOML: {exc}.") from None


def parse_role_lms(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for item in value:
        role, sep, lm = str(item).partition("=")
        if not sep or not role.strip() or not lm.strip():
            raise ConfigError(f"`--role-lm` takes ROLE=SPEC (e.g. debater=local/qwen2.5-coder-0.5b), got {item!r}.")
        out[role.strip()] = lm.strip()
    return out
