"""One LM per role, kept wherever DSPy takes a module: each role's LM belongs to its predictor, a
:class:`~dspy_for.modules.role_predict.RolePredict` (how, and which LM a call runs on: see that module), so a module
with roles keeps them at any depth of a user's own program, with no base class asked of it.

:class:`PerRoleLMs` is the base of the modules with roles (FOR-Prompting, ProRefine, the cascade, self-consistency).
What it still adds, for a program derived from it:

* ``get_lm()`` returns a :class:`RoleLMSet` when its predictors run on different LMs (DSPy's raises), every role's
  LM as one value: its ``copy(**changes)`` copies each with the same changes, and ``set_lm(role_set)`` puts each
  copy on its predictor. When every predictor runs on the same LM (or none: the configured one), it returns that,
  as DSPy's does. (Inside a plain ``dspy.Module``, DSPy's ``get_lm`` sees no role LM, and the role predictors vary
  their own LMs the same way: :mod:`.role_predict`.)
* ``set_lm(lm)`` with a plain LM keeps DSPy's meaning: every predictor on ``lm`` (a role's own LM stays in
  ``role_lm`` and is used again once the slot is emptied).
* ``reset_copy()`` and ``save`` / ``load`` keep the LM of every predictor, a plain ``dspy.Predict`` of the program's
  own too (as records under :data:`~.role_lm_state.STATE_KEY`); a state saved before role predictors kept their own
  records is read into them.
* a call first checks that no role's LM is one a loaded program could not carry (a ``ConfigError`` naming the role
  and the fix, before any LM call of the module).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import dspy

from dspy_for.errors import ConfigError
from dspy_for.modules import role_lm_state
from dspy_for.modules.role_lm_state import STATE_KEY
from dspy_for.modules.role_predict import RolePredict, lm_in_use

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
    """The base of the modules with roles (see the module docstring). A program of your own needs no base class to
    keep the roles of the modules it contains on their LMs: plain ``dspy.Module`` does. Derive from this one only to
    keep the LMs of your own plain ``dspy.Predict``s through ``reset_copy`` and save/load too (or make them
    :class:`~dspy_for.modules.role_predict.RolePredict`s).

    ``lm_parameters``: each predictor (by its name in ``named_predictors()``) → the constructor parameter that sets its
    LM, named in the error that asks for an LM a loaded program could not carry.
    """

    lm_parameters: ClassVar[Mapping[str, str]] = {}

    def get_lm(self) -> Any:
        """The one LM of every predictor (None: the configured LM), as DSPy's; else a :class:`RoleLMSet` of every
        role's LM, where a role without one stands on the configured LM. Never raises for different role LMs."""
        lms = {name: lm_in_use(p) for name, p in self.named_predictors()}
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
        for name, predictor in self.named_predictors():  # a state saved before role predictors kept their records
            entry = stripped.get(name)
            if isinstance(predictor, RolePredict) and isinstance(entry, dict) and STATE_KEY not in entry:
                stripped[name] = {**entry, STATE_KEY: {"role_lm": records.get(name), "lm": None}}
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
