"""One LM per role, kept wherever DSPy takes a module: :class:`PerRoleLMs`, the base of every module with roles
(FOR-Prompting, ProRefine, the cascade, self-consistency), and of your own program that contains one.

DSPy knows one LM per program. ``dspy.BestOfN`` / ``dspy.Refine`` and SIMBA ask a program for it (``get_lm``), vary
it (``lm.copy(rollout_id=r, temperature=1.0)``) and hand the copy back (``set_lm``); compilers start from a
``reset_copy``, which forgets every predictor's LM; ``save`` / ``load`` carry an LM as DSPy rebuilds it (no endpoint,
known classes only). A module whose predictors each have their own LM overrides each of these:

* ``get_lm()`` returns a :class:`RoleLMSet`, every role's LM (the configured LM for a role without one) as one value:
  its ``copy(**changes)`` copies every role's LM with the same changes, and ``set_lm(role_set)`` puts each copy on
  its role. So every layout — no role LM, one, several, all, all the same object — varies each role's own LM the way
  DSPy varies a single LM. When every predictor has the same LM (or none), ``get_lm()`` returns it, as DSPy does.
* ``set_lm(lm)`` with a plain LM keeps DSPy's meaning: every role on ``lm``.
* ``reset_copy()`` resets demos and traces, as DSPy's does, and keeps each predictor's LM: routing is configuration,
  not learned state. ``deepcopy()`` copies each LM with its predictor, as DSPy's does.
* ``dump_state`` / ``load_state`` (``save`` / ``load`` as JSON or pickle) save each role's LM as the spec string it
  was built from and build it again on load (:mod:`.role_lm_state`); a program saved whole (``save_program=True``,
  ``dspy.load``) builds such LMs again when it is unpickled, so a ``local/...`` model gets today's server.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import dspy

from dspy_for.errors import ConfigError
from dspy_for.modules import role_lm_state

__all__ = ["PerRoleLMs", "RoleLMSet"]


class RoleLMSet(dspy.BaseLM):
    """Every role's LM of one module (``lms``: predictor name → LM), as the one LM DSPy's wrappers ask a module for.

    ``kwargs`` are the first role's (what ``dspy.Refine`` reads its starting rollout id from); a change made to them in
    place (SIMBA sets ``kwargs["rollout_id"]``) applies to every role, like one passed to :meth:`copy`. A set is not an
    LM: calling it raises :class:`~dspy_for.errors.ConfigError`.
    """

    def __init__(self, lms: Mapping[str, Any]) -> None:
        members = dict(lms)
        first = next((lm for lm in members.values() if lm is not None), None)
        named = ", ".join(f"{name}={getattr(lm, 'model', None)}" for name, lm in members.items())
        super().__init__(model=f"roles({named})", cache=False)
        self.lms = members
        self.kwargs = dict(getattr(first, "kwargs", None) or {})
        self._made_with = dict(self.kwargs)

    def copy(self, **changes: Any) -> RoleLMSet:
        """Every role's LM copied with ``changes`` (an LM shared by several roles is copied once, and stays shared)."""
        return RoleLMSet(_copied(self.lms, {**self._changed(), **changes}))

    def resolved(self) -> dict[str, Any]:
        """Each role's LM, with what was changed in ``kwargs`` in place applied."""
        changed = self._changed()
        return _copied(self.lms, changed) if changed else dict(self.lms)

    def _changed(self) -> dict[str, Any]:
        return {k: v for k, v in self.kwargs.items() if k not in self._made_with or self._made_with[k] != v}

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        raise ConfigError(
            f"`{self.model}` stands for the LMs of every role of one module (what its `get_lm()` returns, for "
            "dspy.BestOfN / dspy.Refine to vary): it cannot answer a call. Hand it back with `module.set_lm(...)`, "
            "or use one role's LM: `lm_set.lms['<predictor>']`."
        )

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        return self(prompt, messages=messages, **kwargs)

    def forward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        return self(prompt, messages=messages, **kwargs)

    async def aforward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        return self(prompt, messages=messages, **kwargs)


class PerRoleLMs(dspy.Module):
    """A ``dspy.Module`` whose predictors may each have their own LM, kept by every DSPy wrapper, compiler and
    save/load (see the module docstring). Derive your own program from it instead of ``dspy.Module`` when it contains
    a module with role LMs, so its roles keep their LMs inside ``dspy.BestOfN``, ``dspy.Refine`` and compilers too.

    ``lm_parameters``: each predictor (by its name in ``named_predictors()``) → the constructor parameter that sets its
    LM, named in the error that asks for an LM a loaded program could not carry.
    """

    lm_parameters: ClassVar[Mapping[str, str]] = {}

    def get_lm(self) -> Any:
        """The one LM of every predictor (None: the configured LM), as DSPy's; else a :class:`RoleLMSet` of every
        role's LM, where a role without one stands on the configured LM. Never raises for different role LMs."""
        lms = {name: p.lm for name, p in self.named_predictors()}
        if len({id(lm) for lm in lms.values()}) <= 1:
            return next(iter(lms.values()), None)
        configured = dspy.settings.lm
        return RoleLMSet({name: configured if lm is None else lm for name, lm in lms.items()})

    def set_lm(self, lm: Any) -> None:
        """Each role on its own LM of ``lm`` when it is a :class:`RoleLMSet` of this module's roles (what ``get_lm``
        gave, or a copy); any other LM on every role, as ``dspy.Module.set_lm`` does."""
        if not isinstance(lm, RoleLMSet):
            super().set_lm(lm)
            return
        lms, named = lm.resolved(), self.named_predictors()
        if {name for name, _ in named} != set(lms):
            raise ConfigError(
                f"This `RoleLMSet` holds the LMs of predictors {sorted(lms)}, but `{type(self).__name__}` has "
                f"{sorted(name for name, _ in named)}: hand a module only the `get_lm()` of a module of the same shape."
            )
        for name, predictor in named:
            predictor.lm = lms[name]

    def reset_copy(self) -> Any:
        """A deep copy with every predictor reset (demos, traces), as DSPy's, each keeping its own LM."""
        new = self.deepcopy()
        kept = {id(p): p.lm for p in new.predictors()}
        for param in new.parameters():
            param.reset()
        for p in new.predictors():
            p.lm = kept[id(p)]
        return new

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        state: dict[str, Any] = super().dump_state(json_mode=json_mode)
        return role_lm_state.dump(self, state)

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> None:
        """DSPy's ``load_state`` for everything but the LMs; each role's LM as :func:`.role_lm_state.restore` says."""
        before = {name: p.lm for name, p in self.named_predictors()}
        records, stripped = role_lm_state.split(state)
        super().load_state(stripped, allow_unsafe_lm_state=allow_unsafe_lm_state)
        role_lm_state.restore(self, records, before, allow_unsafe=allow_unsafe_lm_state)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        role_lm_state.check_supplied(self)
        return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        role_lm_state.check_supplied(self)
        return await super().acall(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """DSPy's deep copy (each LM copied with its predictor), without building spec LMs again as unpickling does."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        dspy.Module.__setstate__(new, copy.deepcopy(self.__getstate__(), memo))
        return new

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        role_lm_state.rebuild_unpickled(self)


def _copied(lms: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    copies: dict[int, Any] = {}
    for lm in lms.values():
        if lm is not None and id(lm) not in copies:
            copies[id(lm)] = lm.copy(**changes)
    return {name: None if lm is None else copies[id(lm)] for name, lm in lms.items()}
