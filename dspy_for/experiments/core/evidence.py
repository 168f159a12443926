"""What a results directory already knows of a run's cells, read without writing anything and without building an
LM: each cell's stored records (found under the key :func:`~dspy_for.experiments.core.prepare.result_key` computes
from the method built without LMs), the same method's records on another dataset or split, the method's records
without its compile step, the LMs' measured calls in the run's other cells, and stored compile costs. A dry run
estimates from them (:mod:`.plan`); ``exclude`` hides cells (dataset, split, label), so a cell can be estimated from
the other cells' records only (the replay of estimates against measured runs)."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from dspy_for.errors import DspyForError
from dspy_for.experiments.core.estimates import ItemCost, PerCall, RoleCost, item_costs, per_call, usage_cost
from dspy_for.experiments.core.prepare import result_key
from dspy_for.experiments.core.records import ItemResult
from dspy_for.experiments.core.store import ResultStore
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.spec.checks import COMPILE_ROLE
from dspy_for.experiments.spec.model import DatasetConfig, LMLike, MethodConfig, RunSpec
from dspy_for.lm.pricing import PRICE_ATTR, Price, model_price

__all__ = ["Evidence", "Found", "found_in", "lm_name", "optimizer_lm_of", "price_of", "role_lm_of", "role_prices"]

#: the roles of a compile's own LM calls (GEPA's reflections, MIPROv2's proposals, TextGrad's gradients and steps)
OPTIMIZER_ROLES = frozenset({COMPILE_ROLE, "gradient"})


def lm_name(lm: LMLike) -> str:
    """An LM as the plan names it: its spec string, or an LM object's model."""
    return lm if isinstance(lm, str) else str(getattr(lm, "model", None) or type(lm).__name__)


def optimizer_lm_of(spec: RunSpec, method: MethodConfig) -> LMLike:
    """The LM of ``method``'s compile step's own calls: its table's ``optimizer_lm``, default the run's ``lm``."""
    return (method.compile or {}).get("optimizer_lm") or spec.lm


def role_lm_of(spec: RunSpec, method: MethodConfig, role: str) -> LMLike:
    """The LM a role of ``method`` runs on; a compile's own roles run on its ``optimizer_lm`` (default the run's)."""
    if role in OPTIMIZER_ROLES and role not in get_method(method.name).roles:
        return optimizer_lm_of(spec, method)
    return spec.lm_for(role, method.role_lms)


def price_of(spec: RunSpec, lm: LMLike, role: str) -> Price | None:
    """``lm``'s price as the run gives it to ``role`` (its LM options' ``price``, $0 local, litellm's map)."""
    if isinstance(lm, str):
        return model_price(lm, spec.lm_options_for(role))
    given = getattr(lm, PRICE_ATTR, None)
    model = getattr(lm, "model", None)
    return given if isinstance(given, Price) else model_price(model, {}) if isinstance(model, str) else None


def role_prices(spec: RunSpec, method: MethodConfig, roles: Iterable[str]) -> dict[str, Price | None]:
    """Each role's price as the run prices its LM (the given ``price``, $0 local, litellm's map; None: unpriced)."""
    return {r: price_of(spec, role_lm_of(spec, method, r), r) for r in roles}


@dataclass(frozen=True)
class Found:
    """Stored measurements and what they are (``source``, as the plan prints it)."""

    costs: list[ItemCost]
    source: str
    accuracy: float | None = None  # the share of scored items answered right, when they are records
    #: ``own`` (the cell's records), ``elsewhere`` (another dataset or split), ``uncompiled`` (without its compile)
    kind: str = "own"


class Evidence:
    """What ``items_dir`` (None: nothing is stored, e.g. a sweep) holds for ``spec``'s cells (module docstring)."""

    def __init__(self, spec: RunSpec, items_dir: Path | None, exclude: Collection[tuple[str, str, str]] = ()) -> None:
        self.spec, self.items_dir, self.exclude = spec, items_dir, set(exclude)
        self._keys: dict[str, str | None] = {}

    def key(self, dataset: str, split: str, method: MethodConfig) -> str | None:
        """``method``'s result key on ``dataset``/``split`` (None: a dataset this process does not know)."""
        roles = {r: lm_name(lm) for r, lm in method.role_lms.items()}
        memo = json.dumps([dataset, split, method.name, method.options, method.compile, roles], default=str)
        if memo not in self._keys:
            try:
                self._keys[memo] = result_key(self.spec, DatasetConfig(name=dataset, split=split), method)
            except DspyForError:  # a directory of a dataset this process does not know (e.g. a user's file)
                self._keys[memo] = None
        return self._keys[memo]

    def _hidden(self, d: DatasetConfig, label: str) -> bool:
        return (d.name, d.split, label) in self.exclude

    def store(self, d: DatasetConfig, m: MethodConfig) -> ResultStore | None:
        key = self.key(d.name, d.split, m)
        if self.items_dir is None or key is None:
            return None
        return ResultStore.in_dir(self.items_dir, d.name, d.split, m.label, key)

    def stored(self, d: DatasetConfig, m: MethodConfig) -> dict[str, ItemResult]:
        """The cell's stored records (scored or unparsed; failed ones are run again), by record key."""
        s = self.store(d, m)
        return {} if s is None or self._hidden(d, m.label) else s.load(repair=False)

    def shared(self, d: DatasetConfig, m: MethodConfig) -> dict[str, ItemResult]:
        """The cell's stored records, else those another label keeps under the same result key (as ``advise`` reuses
        them: the same method, options, LMs, prompts and data give the same records)."""
        own = self.stored(d, m)
        for path in [] if own else self._files(d.name, d.split, m, ".jsonl"):
            if not self._hidden(d, path.name.split(".")[0]):
                return ResultStore(path).load(repair=False)
        return own

    def cached_compile(self, d: DatasetConfig, m: MethodConfig) -> Path | None:
        """The cell's compiled program kept by an earlier run (the run reuses it: nothing is spent), if any."""
        s = self.store(d, m)
        if s is None or self._hidden(d, m.label):
            return None
        path = s.path.with_name(s.path.name.removesuffix(".jsonl") + ".compiled.json")
        return path if path.is_file() else None

    def _others(self, d: DatasetConfig) -> list[tuple[str, str]]:
        """The (dataset, split) directories of ``items_dir`` other than ``d``'s."""
        if self.items_dir is None or not self.items_dir.is_dir():
            return []
        return sorted(
            (ds.name, sp.name)
            for ds in self.items_dir.iterdir()
            if ds.is_dir()
            for sp in ds.iterdir()
            if sp.is_dir() and (ds.name, sp.name) != (d.name, d.split)
        )

    def _files(self, dataset: str, split: str, m: MethodConfig, suffix: str) -> list[Path]:
        key = self.key(dataset, split, m)
        if self.items_dir is None or key is None:
            return []
        found = sorted((self.items_dir / dataset / split).glob(f"*.{key}{suffix}"))
        return [p for p in found if p.name.split(".")[0] != m.label or (dataset, split, m.label) not in self.exclude]

    def elsewhere(self, d: DatasetConfig, m: MethodConfig) -> Found | None:
        """The same method, options, prompts and LMs on another dataset or split (the most records of any)."""
        best: Found | None = None
        for ds, sp in self._others(d):
            for path in self._files(ds, sp, m, ".jsonl"):
                records = ResultStore(path).load(repair=False).values()
                found = found_in(records, f"{path.name.split('.')[0]} on {ds}/{sp}", "elsewhere")
                if found is not None and (best is None or len(found.costs) > len(best.costs)):
                    best = found
        return best

    def uncompiled(self, d: DatasetConfig, m: MethodConfig) -> Found | None:
        """The same method and options without its compile step, on ``d`` (what a compile starts from)."""
        plain = replace(m, compile=None)
        for path in self._files(d.name, d.split, plain, ".jsonl"):
            label = path.name.split(".")[0]
            if self._hidden(d, label):
                continue
            records = ResultStore(path).load(repair=False).values()
            found = found_in(records, f"{label} uncompiled on {d.name}/{d.split}", "uncompiled")
            if found is not None:
                return found
        return None

    def compile_elsewhere(self, d: DatasetConfig, m: MethodConfig) -> tuple[ItemCost, float | None, str] | None:
        """A stored compile of the same method and compile table on another dataset or split: its usage, its calls'
        seconds and where it is."""
        for ds, sp in self._others(d):
            for path in self._files(ds, sp, m, ".compiled.usage.json"):
                usage = json.loads(path.read_text(encoding="utf-8"))
                seconds = (usage.get("total") or {}).get("wall_time")  # its calls' seconds, cache hits included
                return usage_cost(usage), seconds, f"{path.name.split('.')[0]}'s compile on {ds}/{sp}"
        return None

    def role_calls(
        self, d: DatasetConfig, methods: Iterable[MethodConfig], m: MethodConfig, role: str
    ) -> PerCall | None:
        """The average call of ``role``'s LM (as ``m`` gives it) in ``methods``' records on ``d``: that role's calls
        when some are stored, else any role's on that LM (and their seconds when the cache answered every one of the
        role's)."""
        lm, methods = lm_name(role_lm_of(self.spec, m, role)), list(methods)
        own = self.lm_calls(d, methods, lm, optimizer=False, role=role)
        if own is not None and own.seconds is not None:
            return own
        any_role = self.lm_calls(d, methods, lm, optimizer=False)
        if own is None or any_role is None:
            return own or any_role
        return replace(own, seconds=any_role.seconds)

    def lm_calls(
        self, d: DatasetConfig, methods: Iterable[MethodConfig], lm: str, *, optimizer: bool, role: str | None = None
    ) -> PerCall | None:
        """``lm``'s average call in ``methods``' stored records on ``d`` (``optimizer``: in their stored compiles'
        own calls instead; ``role``: only that role's calls), the cells of ``exclude`` left out."""
        roles: list[RoleCost] = []
        labels: list[str] = []
        for m in methods:
            if self._hidden(d, m.label):
                continue
            before = len(roles)
            if optimizer:
                roles += self._compile_roles(d, m, lm)
            else:
                for cost in item_costs(self.stored(d, m).values()):
                    roles += [
                        c for r, c in cost.items() if role in (None, r) and lm_name(role_lm_of(self.spec, m, r)) == lm
                    ]
            if len(roles) > before:
                labels.append(m.label)
        what = "compile calls" if optimizer else f"{role} calls" if role else "calls"
        cells = ", ".join(labels) if len(labels) <= 3 else f"{len(labels)} cells"
        return per_call(roles, f"{lm.split('/')[-1]}'s {what} in {cells} on {d.name}/{d.split}", labels)

    def _compile_roles(self, d: DatasetConfig, m: MethodConfig, lm: str) -> list[RoleCost]:
        path = self.cached_compile(d, m) if m.compile else None
        if path is None:
            return []
        usage = json.loads(path.with_suffix(".usage.json").read_text(encoding="utf-8"))
        cost = usage_cost(usage)
        mine = lm_name(optimizer_lm_of(self.spec, m)) == lm
        return [c for r, c in cost.items() if r in OPTIMIZER_ROLES and mine]


def found_in(records: Iterable[ItemResult], source: str, kind: str) -> Found | None:
    """Stored ``records`` as measurements (None when none is a scored record with usage)."""
    records = list(records)
    costs = item_costs(records)
    if not costs:
        return None
    scored = [r for r in records if not r.failed]
    accuracy = sum(r.score for r in scored) / len(scored) if scored else None
    return Found(costs, f"{source} ({len(costs)} items)", accuracy, kind)
