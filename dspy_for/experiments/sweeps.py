"""``dspy-for sweep``: Optuna search over a method's options on validation data, tracked in MLflow.

* The objective evaluates the validation items in chunks and reports the running accuracy, so a pruner
  stops hopeless trials early (single-objective studies); multi-objective studies optimise accuracy
  (max) and tokens/item (min) and keep the Pareto front.
* Storage: by default a journal file in ``mlruns/optuna/`` (Optuna's recommendation for several local
  processes); any SQLAlchemy URL otherwise (PostgreSQL for workers on many machines).
* ``workers=N`` runs N local worker processes on the same study. Workers take trials under a lock and
  stop when ``n_trials`` trials are COMPLETE, PRUNED or RUNNING on a live worker, so no trial is counted
  twice. A RUNNING trial whose worker died (its pid is gone on this host, or — for RDB storages — its
  Optuna heartbeat stopped) is marked FAIL and re-enqueued with the same parameters: no trial is lost.
* With the DSPy cache on, a trial that repeats a configuration, or is a prefix of one already run (FOR
  with a smaller N, ProRefine with a smaller n), costs only the calls that differ.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dspy_for.errors import ConfigError
from dspy_for.experiments.search_space import MethodChoice, SearchSpace, parse_method_choice, parse_search_space
from dspy_for.experiments.spec import DatasetConfig, parse_role_lms, read_toml

__all__ = ["SweepResult", "SweepSpec", "load_sweep_spec", "make_storage", "run_study", "sweep"]

logger = logging.getLogger("dspy_for.sweep")
_HOST = socket.gethostname()


@dataclass
class SweepSpec:
    method: str | list[str]  # a list: the method is searched too (e.g. FOR vs ProRefine on one Pareto front)
    dataset: DatasetConfig
    search: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)
    lm: str = "local/qwen2.5-coder-1.5b"
    role_lms: dict[str, str] = field(default_factory=dict)
    max_tokens: int | None = 1024
    objectives: list[str] = field(default_factory=lambda: ["accuracy"])
    sampler: str = "tpe"
    pruner: str = "median"
    n_trials: int = 10
    chunk_size: int = 4
    seed: int = 0
    study: str = "dspy-for-sweep"
    storage: str | None = None
    experiment: str = "sweeps"
    tracking_uri: str | None = None
    num_threads: int = 1
    test_split: str = "test"
    enqueue: list[dict[str, Any]] = field(default_factory=list)
    # compile each trial's program before evaluating it: {kind, trainset, valset, train_limit, val_limit,
    # optimizer_lm, <optimizer options>}; searched optimizer options live under [search.compile.<option>]
    compile: dict[str, Any] | None = None

    @property
    def space(self) -> SearchSpace | MethodChoice:
        if isinstance(self.method, str):
            return parse_search_space(self.method, self.search, (self.compile or {}).get("kind"))
        return parse_method_choice(list(self.method), self.search)

    @property
    def methods(self) -> list[str]:
        return [self.method] if isinstance(self.method, str) else list(self.method)

    def fixed_for(self, method: str) -> dict[str, Any]:
        """Options held constant: ``[fixed]`` (one method) or ``[fixed.<method>]`` (several)."""
        return dict(self.fixed) if isinstance(self.method, str) else dict(self.fixed.get(method, {}))

    def role_lms_for(self, method: str) -> dict[str, str]:
        from dspy_for.experiments.methods import get_method

        roles = get_method(method).roles
        return {r: lm for r, lm in self.role_lms.items() if r in roles}

    def suggest(self, trial: Any) -> tuple[str, dict[str, Any]]:
        space = self.space
        if isinstance(space, MethodChoice):
            return space.suggest(trial)
        return str(self.method), space.suggest(trial)

    def decode(self, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A trial's parameters → (method, its options)."""
        space = self.space
        if isinstance(space, MethodChoice):
            return space.decode(params)
        return str(self.method), dict(params)

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1

    def validate(self) -> SweepSpec:
        from dspy_for.datasets import dataset_info
        from dspy_for.experiments.methods import get_method

        if not isinstance(self.method, str) and not (
                isinstance(self.method, list) and all(isinstance(m, str) for m in self.method)):
            raise ConfigError(f"`method` must be a method name or a list of them, got {self.method!r}.")
        if self.compile is not None:
            from dspy_for.optimizers import COMPILERS

            if not isinstance(self.method, str):
                raise ConfigError("`compile` works with one `method`; sweep several methods without it.")
            kind = self.compile.get("kind") if isinstance(self.compile, dict) else self.compile
            if kind not in COMPILERS:
                raise ConfigError(f"`compile` needs `kind` = one of {', '.join(COMPILERS)}, got {kind!r}.")
        space = self.space  # parses and validates the search space (and the method names)
        if not isinstance(self.method, str):
            extra = sorted(set(self.fixed) - set(self.methods))
            if extra or not all(isinstance(v, dict) for v in self.fixed.values()):
                raise ConfigError("With several methods, `[fixed]` has one table per method, e.g. "
                                  f"[fixed.{self.methods[0]}]; got `{extra[0] if extra else self.fixed}`.")
        for m in self.methods:
            get_method(m).validate_options(self.fixed_for(m))
        all_roles = {r for m in self.methods for r in get_method(m).roles}
        unknown_roles = sorted(set(self.role_lms) - all_roles)
        if unknown_roles:
            get_method(self.methods[0]).validate_roles({unknown_roles[0]: None})
        for point in self.enqueue:
            space.validate_point(point)
        if self.dataset.split not in dataset_info(self.dataset.name).splits:
            raise ConfigError(f"Unknown split `{self.dataset.split}` for dataset `{self.dataset.name}`.")
        if self.objectives not in (["accuracy"], ["accuracy", "tokens_per_item"]):
            raise ConfigError('`objectives` must be ["accuracy"] or ["accuracy", "tokens_per_item"], '
                              f"got {self.objectives!r}.")
        if self.sampler not in ("tpe", "nsga2", "random"):
            raise ConfigError(f"`sampler` must be 'tpe', 'nsga2' or 'random', got {self.sampler!r}.")
        if self.pruner not in ("median", "none"):
            raise ConfigError(f"`pruner` must be 'median' or 'none', got {self.pruner!r}.")
        for name in ("n_trials", "chunk_size", "num_threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")
        return self


_KEYS = {f for f in SweepSpec.__dataclass_fields__}


def load_sweep_spec(path: str | Path | None = None, **overrides: Any) -> SweepSpec:
    """A sweep config (TOML) plus CLI-style overrides → a validated :class:`SweepSpec`."""
    data = read_toml(path, "Sweep config", "experiments/sweep_*.toml") if path is not None else {}
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ConfigError(f"Unknown key `{unknown[0]}` in the sweep config. Allowed: {', '.join(sorted(_KEYS))}.")
    if "method" not in data or "dataset" not in data:
        raise ConfigError("A sweep config needs `method` and a `[dataset]` table (name, split, first/limit).")
    ds = dict(data.pop("dataset"))
    extra = set(ds) - set(DatasetConfig.__dataclass_fields__)
    if extra:
        raise ConfigError(f"Unknown key `{sorted(extra)[0]}` in [dataset].")
    dataset = DatasetConfig(**{"split": "val", **ds})
    o = {k: v for k, v in overrides.items() if v is not None}
    for key in ("limit", "first", "data_dir", "split"):
        if key in o:
            setattr(dataset, key, o.pop(key))
    if "role_lms" in o:
        data["role_lms"] = {**data.get("role_lms", {}), **parse_role_lms(o.pop("role_lms"))}
    for key in o:
        if key not in _KEYS:
            raise ConfigError(f"Unknown override `{key}`.")
    return SweepSpec(dataset=dataset, **{**data, **o}).validate()


# ------------------------------------------------------------------------------------------ storage


def _default_dir() -> Path:
    d = Path("mlruns") / "optuna"
    d.mkdir(parents=True, exist_ok=True)
    return d


def make_storage(url: str | None) -> Any:
    """None → a journal file in mlruns/optuna/; an SQLAlchemy URL → RDBStorage with heartbeats."""
    import optuna
    from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    if url is None or url.startswith("journal:"):
        path = url[len("journal:"):] if url else str(_default_dir() / "journal.log")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # a worker killed while holding the journal lock must not stall the others for long
        return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path, grace_period=5)))
    try:
        return RDBStorage(url, heartbeat_interval=5, grace_period=20,
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
                          engine_kwargs={"pool_pre_ping": True})
    except (ImportError, ModuleNotFoundError) as exc:
        raise ConfigError(f"Storage `{url}` needs a database driver: {exc}. For PostgreSQL install "
                          "`pip install 'dspy-for[postgres]'`.") from None
    except optuna.exceptions.StorageInternalError as exc:  # pragma: no cover - depends on the server
        raise ConfigError(f"Cannot open storage `{url}`: {exc}") from None


def _lock_path(study_name: str, storage_url: str | None) -> Path:
    import hashlib

    key = hashlib.sha256(f"{storage_url}|{study_name}".encode()).hexdigest()[:12]
    return _default_dir() / f"{key}.lock"


def _worker_alive(trial: Any) -> bool:
    worker = trial.user_attrs.get("worker", "")
    host, _, pid = worker.rpartition(":")
    if host != _HOST or not pid.isdigit():
        return True  # another machine: RDB heartbeats handle it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _recover_stale(study: Any) -> None:
    """FAIL and re-enqueue RUNNING trials whose worker died (pid gone here, or heartbeat stale)."""
    import optuna
    from optuna.trial import TrialState

    storage = study._storage
    if isinstance(storage, optuna.storages.RDBStorage):
        optuna.storages.fail_stale_trials(study)  # heartbeat; its callback re-enqueues
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _worker_alive(t):
            try:
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
                continue
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
            logger.warning("trial %d was left RUNNING by a dead worker: re-enqueued", t.number)


def _counted(study: Any) -> int:
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (t.state == TrialState.RUNNING and _worker_alive(t)):
            n += 1
    return n


def _sampler(spec: SweepSpec) -> Any:
    import optuna

    if spec.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=spec.seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed, multivariate=spec.multi)


def _pruner(spec: SweepSpec) -> Any:
    import optuna

    if spec.pruner == "none" or spec.multi:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


def open_study(spec: SweepSpec) -> Any:
    import optuna

    directions = ["maximize"] if not spec.multi else ["maximize", "minimize"]
    return optuna.create_study(study_name=spec.study, storage=make_storage(spec.storage), directions=directions,
                               sampler=_sampler(spec), pruner=_pruner(spec), load_if_exists=True)


# ---------------------------------------------------------------------------------------- objective

Objective = Callable[[Any], Any]


def default_objective(spec: SweepSpec, parent_run_id: str | None = None) -> Objective:
    """The real objective: build the method with the trial's options and evaluate chunk by chunk."""
    import optuna

    from dspy_for.datasets import load_dataset
    from dspy_for.experiments.comparison import signature_for
    from dspy_for.experiments.methods import build_method
    from dspy_for.experiments.runner import evaluate_method
    from dspy_for.lm import Usage, make_lm
    from dspy_for.metrics import metric_for

    d = spec.dataset
    examples = load_dataset(d.name, d.split, data_dir=d.data_dir, limit=d.limit, seed=d.seed)
    if d.first:
        examples = examples[: d.first]
    metric = metric_for(d.name)
    sig = signature_for(d.name)

    def objective(trial: Any) -> Any:
        method, params = spec.suggest(trial)
        compile_opts = {k[len("compile."):]: v for k, v in params.items() if k.startswith("compile.")}
        options = {**spec.fixed_for(method), **{k: v for k, v in params.items() if not k.startswith("compile.")}}
        temperature = _lm_temperature(method, options)
        lm_opts = {"max_tokens": spec.max_tokens, "temperature": temperature}
        lm = make_lm(spec.lm, **lm_opts)
        role_lms = {r: make_lm(s, **lm_opts) for r, s in spec.role_lms_for(method).items()}
        program = build_method(method, sig, lm=lm, role_lms=role_lms, **options)
        if spec.compile is not None:
            program, compile_total = _compile_trial(spec, program, metric, compile_opts)
            trial.set_user_attr("compile_tokens", compile_total["tokens"])
            trial.set_user_attr("compile_calls", compile_total["calls"])
        scores: list[float] = []
        usage = Usage()
        failed = 0
        for step, start in enumerate(range(0, len(examples), spec.chunk_size)):
            chunk = examples[start:start + spec.chunk_size]
            res = evaluate_method(program, chunk, metric=metric, num_threads=spec.num_threads, progress=False,
                                  pass_labels=bool(getattr(program, "uses_labels", False)))
            scores.extend(res.scores)
            usage.merge(res.usage)
            failed += res.n_failed
            trial.set_user_attr("n_failed", failed)  # items whose call raised (scored 0), not wrong answers
            accuracy = sum(scores) / len(scores)
            trial.set_user_attr("intermediate", [*trial.user_attrs.get("intermediate", []), accuracy])
            logger.info("trial %d %s: %d/%d items, accuracy %.3f", trial.number, params, len(scores),
                        len(examples), accuracy)
            if not spec.multi:
                trial.report(accuracy, step)
                if trial.should_prune():
                    _record_usage(trial, usage, len(scores))
                    raise optuna.TrialPruned()
        _record_usage(trial, usage, len(scores))
        accuracy = sum(scores) / max(1, len(scores))
        tokens = usage.total.served_tokens / max(1, len(scores))
        return accuracy if not spec.multi else (accuracy, tokens)

    return objective


def _compile_trial(
    spec: SweepSpec, program: Any, metric: Any, searched: dict[str, Any]
) -> tuple[Any, dict[str, float]]:
    """Compile a trial's program on the train split (validation decisions on the last ``val_limit`` items
    of ``valset``, away from the first items the sweep scores). Returns the program and the compile
    phase's totals, which go to the trial's ``compile_tokens`` attribute, not to its tokens/item objective."""
    from dspy_for.datasets import load_dataset
    from dspy_for.lm import make_lm
    from dspy_for.optimizers import compile_program

    cfg = {**dict(spec.compile or {}), **searched}
    kind = cfg.pop("kind")
    d = spec.dataset
    trainset = load_dataset(d.name, cfg.pop("trainset", "train"), data_dir=d.data_dir,
                            limit=cfg.pop("train_limit", None), seed=d.seed)
    valset = load_dataset(d.name, cfg.pop("valset", "val"), data_dir=d.data_dir, seed=d.seed)
    val_limit = cfg.pop("val_limit", None)
    if val_limit:
        valset = valset[-int(val_limit):]  # the end of the split: the sweep scores its first items
    optimizer_lm = make_lm(cfg.pop("optimizer_lm", spec.lm), max_tokens=spec.max_tokens)
    result = compile_program(kind, program, trainset=trainset, valset=valset, metric=metric, seed=spec.seed,
                             optimizer_lm=optimizer_lm, **cfg)
    total = result.usage.get("total", {})
    return result.program, {"tokens": float(total.get("tokens", 0) + total.get("cached_tokens", 0)),
                            "calls": float(total.get("calls", 0))}


def _lm_temperature(method: str, options: dict[str, Any]) -> float:
    """``temperature`` is the LMs' unless the method has an option of that name (self-consistency)."""
    from dspy_for.experiments.methods import get_method

    if "temperature" in get_method(method).defaults:
        return 0.0
    return float(options.pop("temperature", 0.0))


def _record_usage(trial: Any, usage: Any, n: int) -> None:
    total = usage.total
    trial.set_user_attr("n_items", n)
    trial.set_user_attr("tokens_per_item", total.served_tokens / max(1, n))
    trial.set_user_attr("spent_tokens", total.tokens)
    trial.set_user_attr("cached_tokens", total.cached_tokens)
    trial.set_user_attr("calls", total.calls)


def _load_objective(spec: SweepSpec, objective_path: str | None, parent_run_id: str | None) -> Objective:
    if objective_path is None:
        return default_objective(spec, parent_run_id)
    module, _, name = objective_path.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return factory(spec)


# ------------------------------------------------------------------------------------------ workers


def _work(spec: SweepSpec, objective: Objective, parent_run_id: str | None) -> None:
    """One worker: take trials under the study lock until n_trials are accounted for."""
    import optuna
    from filelock import FileLock
    from optuna.storages._heartbeat import get_heartbeat_thread

    from dspy_for.experiments import sweep_tracking

    study = open_study(spec)
    lock = FileLock(str(_lock_path(spec.study, spec.storage)))
    me = f"{_HOST}:{os.getpid()}"
    while True:
        with lock:
            _recover_stale(study)
            if _counted(study) >= spec.n_trials:
                return
            trial = study.ask()
            trial.set_user_attr("worker", me)
        state, values, error = optuna.trial.TrialState.COMPLETE, None, None
        try:
            # RDB storages: a heartbeat lets workers on other machines detect this trial if we die
            with get_heartbeat_thread(trial._trial_id, study._storage):
                values = objective(trial)
        except optuna.TrialPruned:
            state = optuna.trial.TrialState.PRUNED
        except Exception as exc:  # a failing trial is recorded, the sweep goes on
            state, error = optuna.trial.TrialState.FAIL, f"{type(exc).__name__}: {exc}"
            logger.error("trial %d failed: %s", trial.number, error)
        if state == optuna.trial.TrialState.COMPLETE:
            study.tell(trial, values)
        else:
            study.tell(trial, state=state)
        sweep_tracking.log_trial(spec, study, trial.number, parent_run_id, error=error)
        logger.info("trial %d %s: %s, values %s, %.0f tokens/item", trial.number, trial.params, state.name,
                    values, trial.user_attrs.get("tokens_per_item", 0.0))


def _worker_entry(spec_dict: dict[str, Any], objective_path: str | None, parent_run_id: str | None,
                  cwd: str) -> None:
    os.chdir(cwd)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if not logger.handlers:  # a spawned worker: its progress lines go to stderr like the parent's
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"[worker {os.getpid()}] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    spec = _spec_from_dict(spec_dict)
    _work(spec, _load_objective(spec, objective_path, parent_run_id), parent_run_id)


def _spec_from_dict(d: dict[str, Any]) -> SweepSpec:
    d = dict(d)
    d["dataset"] = DatasetConfig(**d["dataset"])
    return SweepSpec(**d)


def run_study(spec: SweepSpec, *, workers: int = 1, objective_path: str | None = None,
              parent_run_id: str | None = None, timeout: float | None = None) -> Any:
    """Run the study with ``workers`` local processes (1: in this process). Returns the study."""
    import multiprocessing as mp

    if workers < 1:
        raise ConfigError(f"`workers` must be a positive integer, got {workers!r}.")
    if workers == 1:
        _work(spec, _load_objective(spec, objective_path, parent_run_id), parent_run_id)
        return open_study(spec)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker_entry, args=(asdict(spec), objective_path, parent_run_id, os.getcwd()))
             for _ in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    return open_study(spec)


@dataclass
class SweepResult:
    spec: SweepSpec
    study: Any
    parent_run_id: str | None
    final_test: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        from collections import Counter

        return dict(Counter(t.state.name for t in self.study.get_trials(deepcopy=False)))


def sweep(config: SweepSpec | str | Path | None = None, *, workers: int = 1, final_test: bool = False,
          objective_path: str | None = None, timeout: float | None = None, **overrides: Any) -> SweepResult:
    """Run (or resume) a sweep; see the module docstring. ``overrides`` are the CLI flags' names."""
    from dspy_for.experiments import sweep_tracking

    spec = config if isinstance(config, SweepSpec) else load_sweep_spec(config, **overrides)
    study = open_study(spec)  # create it before workers race to
    if spec.enqueue and not study.get_trials(deepcopy=False):  # a resumed study has them already
        space = spec.space
        for point in spec.enqueue:
            study.enqueue_trial(space.validate_point(point), user_attrs={"enqueued": True})
    parent = sweep_tracking.start_parent(spec)
    study = run_study(spec, workers=workers, objective_path=objective_path, parent_run_id=parent, timeout=timeout)
    result = SweepResult(spec=spec, study=study, parent_run_id=parent)
    if final_test and not spec.multi and objective_path is None:
        result.final_test = _final_test(spec, study)
    sweep_tracking.finish_parent(spec, study, parent, result.final_test)
    return result


def _final_test(spec: SweepSpec, study: Any) -> dict[str, Any]:
    """Evaluate the best configuration once on the test split."""
    from dspy_for.datasets import load_dataset
    from dspy_for.experiments.comparison import signature_for
    from dspy_for.experiments.methods import build_method
    from dspy_for.experiments.runner import evaluate_method
    from dspy_for.lm import make_lm
    from dspy_for.metrics import metric_for

    best = study.best_trial
    method, params = spec.decode(best.params)
    compile_opts = {k[len("compile."):]: v for k, v in params.items() if k.startswith("compile.")}
    options = {**spec.fixed_for(method), **{k: v for k, v in params.items() if not k.startswith("compile.")}}
    temperature = _lm_temperature(method, options)
    lm = make_lm(spec.lm, max_tokens=spec.max_tokens, temperature=temperature)
    role_lms = {r: make_lm(s, max_tokens=spec.max_tokens, temperature=temperature)
                for r, s in spec.role_lms_for(method).items()}
    d = spec.dataset
    examples = load_dataset(d.name, spec.test_split, data_dir=d.data_dir, limit=d.limit, seed=d.seed)
    program = build_method(method, signature_for(d.name), lm=lm, role_lms=role_lms, **options)
    if spec.compile is not None:  # the DSPy cache replays the best trial's compile phase
        program, _ = _compile_trial(spec, program, metric_for(d.name), compile_opts)
    res = evaluate_method(program, examples, metric=metric_for(d.name), num_threads=spec.num_threads)
    lo, hi = res.ci
    return {"method": method, "params": params, "accuracy": res.accuracy, "ci_low": lo, "ci_high": hi,
            "tokens_per_item": res.tokens_per_item, "n": res.n}
