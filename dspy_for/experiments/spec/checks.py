"""Checks of a run specification that need more than its own fields: prices (``max_cost``), whether repeated
items can differ (``epochs``) and each compile table against each dataset's splits, all before any LM call; and the
items a run keeps in flight (:func:`run_threads`), which its LMs decide. A spec is read through what they need of it
(:class:`Spec` and its kin), so this module imports none of the spec's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import dspy

from dspy_for.datasets import dataset_info
from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import CompileSpec, get_method
from dspy_for.experiments.spec.data import DatasetConfig
from dspy_for.lm.options import local_slots
from dspy_for.lm.pricing import is_priced

__all__ = [
    "COMPILE_ROLE",
    "LMLike",
    "Method",
    "Repeated",
    "Spec",
    "Threaded",
    "check_compiles",
    "check_epochs_sample",
    "check_priced",
    "compile_lms",
    "compile_roles",
    "run_threads",
]

#: an LM as a run names it: a model string (``openai/gpt-4.1-mini``, ``local/<name>``) or any ``dspy.BaseLM``
LMLike: TypeAlias = str | dspy.BaseLM


class Method(Protocol):
    """What these checks read of a method of a run (a :class:`~dspy_for.experiments.spec.model.MethodConfig`)."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...

    @property
    def role_lms(self) -> Mapping[str, LMLike]: ...

    @property
    def compile(self) -> Mapping[str, Any] | None: ...

    @property
    def compile_step(self) -> CompileSpec | None: ...


class Spec(Protocol):
    """What these checks read of a run's spec (a :class:`~dspy_for.experiments.spec.model.RunSpec`): its LMs."""

    @property
    def role_lms(self) -> Mapping[str, LMLike]: ...

    def lm_for(self, role: str, method_role_lms: Mapping[str, LMLike] | None = None) -> LMLike: ...

    def lm_options_for(self, role: str) -> dict[str, Any]: ...

    def lm_build_options(self, lm: str, role: str | None, temperature: float | None = None) -> dict[str, Any]: ...

    def _method_lms(self, role: str) -> list[LMLike]: ...


class Judged(Protocol):
    @property
    def lm(self) -> LMLike: ...


class Threaded(Spec, Protocol):
    """A spec as :func:`run_threads` reads it: the threads asked for, every role, the judge."""

    @property
    def num_threads(self) -> int | None: ...

    @property
    def judge(self) -> Judged | None: ...

    def method_roles(self) -> set[str]: ...


class Repeated(Spec, Protocol):
    """A comparison's spec as :func:`check_epochs_sample` reads it: its repeats and its methods too."""

    @property
    def epochs(self) -> int: ...

    @property
    def methods(self) -> Sequence[Method]: ...


#: the role a compile step builds its LM for (``optimizer_lm``, default the run's LM; its LM options are this
#: role's): ``max_cost`` needs it priced like every other role
COMPILE_ROLE = "optimizer"


def compile_roles(methods: Sequence[Method]) -> set[str]:
    """:data:`COMPILE_ROLE` when a method compiles (the compile's LM is built for it; its options are that role's)."""
    return {COMPILE_ROLE} if any(m.compile for m in methods) else set()


def compile_lms(methods: Sequence[Method], role: str = COMPILE_ROLE) -> list[Any]:
    """The LMs the methods' compile tables name for ``role`` (``optimizer_lm``, built for :data:`COMPILE_ROLE`)."""
    named = [m.compile_step.optimizer_lm for m in methods if m.compile_step] if role == COMPILE_ROLE else []
    return [lm for lm in named if lm is not None]


def check_compiles(spec: Spec, methods: Sequence[Method], datasets: Sequence[DatasetConfig]) -> None:
    """Each method's compile table against each dataset's splits (``trainset`` and ``valset`` must name one); and a
    ``role_lms`` entry for :data:`COMPILE_ROLE` that no method's own role takes is refused: a compile's LM is its
    table's ``optimizer_lm``."""
    for m in methods:
        if (step := m.compile_step) is not None:
            for d in datasets:
                step.check_splits(dataset_info(d.name).splits, label=m.label)
    own = any(COMPILE_ROLE in get_method(m.name).roles for m in methods)
    if COMPILE_ROLE in spec.role_lms and not own:
        raise ConfigError(
            f"`role_lms`: no method of this run has a role `{COMPILE_ROLE}`; a compile's LM is its table's "
            f'`optimizer_lm` (e.g. compile = {{ kind = "gepa", optimizer_lm = "openai/gpt-4.1-mini" }}): set it '
            f"there (its LM options: `role_lm_options.{COMPILE_ROLE}`)."
        )


def check_priced(spec: Spec, roles: Iterable[str]) -> None:
    """``max_cost`` counts dollars: every LM of the run must have a price (litellm's map, ``price``, local)."""
    for r in sorted(roles):
        for lm in {spec.lm_for(r), *spec._method_lms(r)}:
            if isinstance(lm, str) and not is_priced(lm, spec.lm_options_for(r)):
                raise ConfigError(
                    f"`max_cost` needs a price for every LM, and litellm's cost map has none for `{lm}` (role "
                    f"`{r}`): give it one with `--lm-option price={{input=0.15, output=0.60}}` (USD per million "
                    "tokens; `role_lm_options` for one role), or drop `max_cost`."
                )


def check_epochs_sample(spec: Repeated) -> None:
    """Repeats must be able to differ: with ``epochs > 1`` every method must sample somewhere (an LM at a
    temperature above 0, or a temperature of its own, as self-consistency has)."""
    if spec.epochs == 1:
        return
    for m in spec.methods:
        registered = get_method(m.name)
        own, temperature = registered.split_options(m.options)
        if {**registered.defaults, **own}.get("temperature"):
            continue
        temps = []
        for r in registered.roles:
            lm = spec.lm_for(r, m.role_lms)
            if isinstance(lm, str):
                temps.append(spec.lm_build_options(lm, r, temperature)["temperature"])
            else:
                temps.append(temperature if temperature is not None else (lm.kwargs or {}).get("temperature"))
        if all(t == 0 for t in temps):
            raise ConfigError(
                f"`epochs = {spec.epochs}` repeats each item, but method `{m.label}` answers at temperature 0: its "
                "repeats replay the first from the DSPy cache, or differ only by chance. Set a sampling temperature "
                "(`--lm-option temperature=0.7`, or `temperature` in the method's options) or drop `epochs`."
            )


def run_threads(spec: Threaded) -> int:
    """Items ``spec`` runs at once: its ``num_threads``; by default the slots of the local server its LMs use (the most,
    when several: :func:`~dspy_for.lm.options.local_slots`), else 1."""
    if spec.num_threads is not None:
        return spec.num_threads
    roles = spec.method_roles() | ({"judge"} if spec.judge is not None else set())
    pairs = [(lm, spec.lm_options_for(r)) for r in roles for lm in {spec.lm_for(r), *spec._method_lms(r)}]
    pairs += [(spec.judge.lm, spec.lm_options_for("judge"))] if spec.judge is not None else []
    return max((s for lm, options in pairs if (s := local_slots(lm, options)) is not None), default=1)
