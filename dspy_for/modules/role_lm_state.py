"""What a saved program keeps of each role's LM, and how a loaded program gets it back (:class:`.PerRoleLMs`).

DSPy saves a predictor's LM as the LM's own state: without its endpoint (``api_base``), loaded only for LM classes
DSPy knows unless told to trust the file, and a local model's endpoint is a port that changes every run. So a role
predictor's entry keeps, under :data:`STATE_KEY`, a record of its own LM (``role_lm``) and of the LM set on it
(``lm``) instead, and no LM state of DSPy's (:meth:`.RolePredict.dump_state`); a :class:`.PerRoleLMs` program keeps
the same records of its plain predictors under :data:`STATE_KEY` at its top. A record is:

* ``None``: the predictor ran on the configured LM; loaded, it does again;
* ``{"spec", "options", "changes"}``: an LM built by ``make_lm`` / a spec string (or a copy of one, ``changes`` what
  the copy changed): built again on load (a ``local/...`` model gets today's server). The program's own LM is kept
  when it was built from the same. A record naming an endpoint (``api_base``) is built again only from a trusted file
  (``allow_unsafe_lm_state=True``, DSPy's flag); an LM whose options hold a secret is saved as an object;
* ``{"object": model}``: an LM given as an object, which a file cannot carry. Loaded, the predictor keeps the LM the
  program already has for it (you built the program with it again); without one it is reported: a warning at load
  and, at the first call, a :class:`~dspy_for.errors.ConfigError` naming the role and the fix, before any LM call.

A state saved without these records (by DSPy, or before them) is read as if every LM in it were an object.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Mapping
from typing import Any

import dspy

from dspy_for.compat.dspy import attribute_path
from dspy_for.errors import ConfigError
from dspy_for.jsonwalk import walk
from dspy_for.lm import make_lm
from dspy_for.lm.origin import made_from
from dspy_for.secrets import is_secret_key, needs_redaction

__all__ = [
    "STATE_KEY",
    "UnsuppliedLM",
    "check_supplied",
    "dump",
    "lm_record",
    "rebuild_unpickled",
    "rebuilt",
    "restore",
    "restore_lm",
    "split",
]

#: the key of the role LM records in a saved state (beside the predictors' own entries)
STATE_KEY = "dspy_for.role_lms"
_ENDPOINT_KEYS = frozenset({"api_base", "base_url", "model_list"})  # DSPy's unsafe LM state keys
_NOT_CHANGES = _ENDPOINT_KEYS | {"api_key"}  # a copy re-pointed by dspy-for (a revived local server) changed nothing

logger = logging.getLogger("dspy_for.modules")


class UnsuppliedLM(dspy.BaseLM):
    """Stands in for a role's LM that a loaded program could not carry: a call raises a ConfigError naming the fix.
    ``role``: a role predictor's (its role, label, constructor parameter and saved record), so the message can name
    where the predictor sits in the program called (:meth:`message_at`)."""

    def __init__(self, model: str, message: str, role: dict[str, Any] | None = None) -> None:
        super().__init__(model=model, cache=False)
        self.message, self.role = message, role

    def message_at(self, path: str | None) -> str:
        """The message, naming the predictor by its attribute path ``path`` (``solver.debate.debater``) if known."""
        return self.message if self.role is None or path is None else _role_message(**self.role, path=path)

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        raise ConfigError(self.message)

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        raise ConfigError(self.message)


def lm_record(lm: Any) -> dict[str, Any] | None:
    """What a saved state keeps of ``lm`` (see the module docstring)."""
    if lm is None:
        return None
    origin = made_from(lm)
    if origin is not None and not isinstance(lm, UnsuppliedLM):
        kwargs = getattr(lm, "kwargs", None) or {}
        changes = {k: v for k, v in kwargs.items() if k not in _NOT_CHANGES and origin.kwargs.get(k) != v}
        changes |= {k: None for k in origin.kwargs if k not in kwargs and k not in _NOT_CHANGES}
        record = {"spec": origin.spec, "options": _plain(origin.options), "changes": _plain(changes)}
        if record["options"] is not None and record["changes"] is not None and not _holds_secret(record):
            return record
    return {"object": str(getattr(lm, "model", None) or type(lm).__name__)}


def dump(program: dspy.Module, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (DSPy's) with every predictor's LM as its record under :data:`STATE_KEY`, none in its own entry."""
    records = {}
    for name, predictor in program.named_predictors():
        if _keeps_own(predictor):
            continue
        records[name] = lm_record(predictor.lm)
        if isinstance(state.get(name), dict):
            state[name]["lm"] = None
    state[STATE_KEY] = records
    return state


def split(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The role LM records of a saved state (read from the predictors' LM states when it has none), and the state
    with no LM in any predictor's entry, for DSPy's ``load_state``."""
    stripped = {k: v for k, v in state.items() if k != STATE_KEY}
    records = dict(state.get(STATE_KEY) or {})
    for name, entry in state.items():
        if isinstance(entry, dict) and "lm" in entry:
            if STATE_KEY not in state and STATE_KEY not in entry:  # (a role predictor's entry keeps its own)
                saved = entry["lm"]
                records[name] = None if saved is None else {"object": str(saved.get("model", "an LM"))}
            stripped[name] = {**entry, "lm": None}
    return records, stripped


def restore(program: dspy.Module, records: Mapping[str, Any], before: Mapping[str, Any], *, allow_unsafe: bool) -> None:
    """Each predictor's LM after a load: as its record says (see the module docstring); ``before``: each predictor's
    LM before the load."""
    built: dict[str, Any] = {}
    for name, predictor in program.named_predictors():
        if _keeps_own(predictor):
            continue
        record, current = records.get(name), before.get(name)
        if name not in records:
            predictor.lm = current
        elif record is None:
            predictor.lm = None
        elif "spec" in record and (allow_unsafe or not _ENDPOINT_KEYS & {*record["options"], *record["changes"]}):
            key = json.dumps(record, sort_keys=True)
            if key not in built:  # the program's own LM when it was built from the same, else built again
                built[key] = current if current is not None and lm_record(current) == record else _build(record)
            predictor.lm = built[key]
        elif current is not None and not isinstance(current, UnsuppliedLM):
            predictor.lm = current
        else:
            predictor.lm = _unsupplied(program, name, record)


def check_supplied(program: dspy.Module) -> None:
    """Raise the :class:`UnsuppliedLM`'s ConfigError of the first role whose LM a loaded program could not carry."""
    for name, predictor in program.named_predictors():
        routed = getattr(predictor, "routed_lm", None)
        lm = routed() if callable(routed) else predictor.lm
        if isinstance(lm, UnsuppliedLM):
            where = attribute_path(program)  # where the program sits in the one being called
            raise ConfigError(lm.message_at(f"{where}.{name}" if where else name))


def _keeps_own(predictor: Any) -> bool:
    """A role predictor (:class:`~dspy_for.modules.role_predict.RolePredict`) saves and rebuilds its own LMs."""
    return callable(getattr(predictor, "routed_lm", None))


def restore_lm(record: Mapping[str, Any] | None, current: Any, predictor: Any, *, allow_unsafe: bool) -> Any:
    """One LM of a role predictor after a load (see the module docstring): ``record`` is what the file keeps of it,
    ``current`` the LM the predictor had before the load (kept when it was built from the same record)."""
    if record is None:
        return None
    if "spec" in record and (allow_unsafe or not _ENDPOINT_KEYS & {*record["options"], *record["changes"]}):
        return current if current is not None and lm_record(current) == record else _build(record)
    if current is not None and not isinstance(current, UnsuppliedLM):
        return current
    return _unsupplied_role(predictor, record)


def rebuilt(lm: Any) -> Any:
    """``lm`` after unpickling: built again from its spec in this process when :func:`~dspy_for.lm.make_lm` built it
    (once per pickled LM, however many predictors share it); else ``lm`` as pickled."""
    if lm is None or lm in _FRESH or made_from(lm) is None or isinstance(lm, UnsuppliedLM):
        return lm
    if lm not in _REPLACED:
        record = lm_record(lm)
        fresh = _build(record) if record is not None and "spec" in record else lm
        _FRESH.add(fresh)
        _REPLACED[lm] = fresh
    return _REPLACED[lm]


# LMs this process built again from their specs on unpickling, and the unpickled LM each replaced
_FRESH: weakref.WeakSet[Any] = weakref.WeakSet()
_REPLACED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def rebuild_unpickled(program: dspy.Module) -> None:
    """After unpickling (``save_program=True`` / ``dspy.load``): every LM built from a spec is built again from it in
    this process (a pickled local model's endpoint is a dead port); LM objects stay as pickled. An LM shared by
    several predictors is built once (nested modules are unpickled first: their LMs are not built twice)."""
    for _, predictor in program.named_predictors():
        if not _keeps_own(predictor):
            predictor.lm = rebuilt(predictor.lm)


def _build(record: Mapping[str, Any]) -> Any:
    lm = make_lm(record["spec"], **record["options"])
    return lm.copy(**record["changes"]) if record["changes"] else lm


def _unsupplied(program: dspy.Module, name: str, record: Mapping[str, Any]) -> UnsuppliedLM:
    param = getattr(program, "lm_parameters", {}).get(name)
    give = f"`{param}=<LM>` when you build the program you load into, or " if param else ""
    fix = f"give it again: {give}`program.{name}.lm = <LM>` (`program.set_lm(lm)` puts every role on one LM)"
    model, why = _why_unsupplied(record, fix)
    message = f"The LM of `{name}` in this loaded `{type(program).__name__}` (`{model}`) {why}."
    logger.warning(message)
    return UnsuppliedLM(str(model), message)


def _unsupplied_role(predictor: Any, record: Mapping[str, Any]) -> UnsuppliedLM:
    role: dict[str, Any] = {
        "role": getattr(predictor, "role", "?"),
        "label": getattr(predictor, "label", "a role"),
        "param": getattr(predictor, "lm_parameter", None),
        "record": dict(record),
    }
    message = _role_message(**role)
    logger.warning(message)
    return UnsuppliedLM(_why_unsupplied(record, "")[0], message, role)


def _role_message(role: str, label: str, param: str | None, record: Mapping[str, Any], path: str | None = None) -> str:
    """Why a loaded role predictor has no LM and how to give it one; ``path``: where it sits in the program called."""
    give = f"`{param}=<LM>` when you build the program you load into, or " if param else ""
    where = (
        f"`program.{path}.role_lm = <LM>`"
        if path
        else f"`<predictor>.role_lm = <LM>` on the loaded program's `{label}` predictor"
    )
    fix = f"give it again: {give}{where} (`program.set_lm(lm)` puts every predictor on one LM)"
    model, why = _why_unsupplied(record, fix)
    at = f" at `{path}` (`{label}`)" if path else f" (`{label}`)"
    return f"The LM of the `{role}` role{at} in this loaded program (`{model}`) {why}."


def _why_unsupplied(record: Mapping[str, Any], fix: str) -> tuple[str, str]:
    """The saved LM's name and why a load could not give it back (then ``fix``: how to give it)."""
    if "spec" in record:
        model = str(record["spec"])
        return model, (
            f"was built from `{model}` with an endpoint (`api_base`), which is restored only from a trusted file: "
            f"load it with `allow_unsafe_lm_state=True` if you trust it, or {fix}"
        )
    model = str(record.get("object", "an LM"))
    return model, (
        f"was an LM object when the program was saved, and a saved program carries only LMs built from specs: {fix}"
    )


def _plain(value: Any) -> Any:
    """``value`` as JSON (dataclasses such as a ``price`` as mappings), or None when it is not JSON."""
    plain = walk(value, lambda v: v, with_dataclasses=True)
    try:
        return plain if json.loads(json.dumps(plain)) == plain else None
    except (TypeError, ValueError):
        return None


def _holds_secret(value: Any) -> bool:
    """A secret-looking key at any depth (``extra_headers={"Authorization": ...}``), or a secret-looking value."""
    if isinstance(value, Mapping):
        return any(is_secret_key(str(k)) or _holds_secret(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_secret(v) for v in value)
    return isinstance(value, str) and needs_redaction(value)
