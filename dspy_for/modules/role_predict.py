"""A role's LM belongs to its predictor: :class:`RolePredict`, the ``dspy.Predict`` of every role of every module
(FOR-Prompting's Defender, Debater and Host, ProRefine's task, feedback, optimizer and verifier, ...).

DSPy keeps one LM slot per predictor (``predictor.lm``) and treats it as disposable: ``Predict.reset`` (every
``reset_copy``, so every compiler) empties it, ``Module.set_lm`` overwrites it, ``save`` writes it without its
endpoint. A :class:`RolePredict` keeps the role's own LM beside that slot, in ``role_lm``, so whatever DSPy does to
any program that contains it, at any depth, with no base class asked of the program's own classes:

* ``reset()`` (``reset_copy``, every compiler's copies and teachers) clears demos and traces, as DSPy's does, and
  keeps the role's LM and the slot: routing is configuration, not learned state;
* ``deepcopy`` and pickling copy both with the predictor; an LM :func:`~dspy_for.lm.make_lm` built is built again
  from its spec when unpickled (``save_program=True``, ``dspy.load``, ``mlflow.dspy.load_model``), so a
  ``local/...`` model gets today's server;
* ``dump_state`` / ``load_state`` (``save`` / ``load``, JSON or pickle) save each LM as a record and build it again
  on load (:mod:`.role_lm_state`).

Which LM a call runs on (:meth:`RolePredict.routed_lm`): an LM put in the slot (``program.set_lm(lm)``,
``predictor.lm = lm``) wins, as DSPy's ``set_lm`` means, except the LM in force (``dspy.configure`` /
``dspy.context``) or a copy of it that changes only ``rollout_id`` / ``temperature`` — what ``dspy.BestOfN``,
``dspy.Refine`` and SIMBA hand a program — which applies those changes to the role's own LM instead; else the role's
own LM; else the LM in force. So the wrappers vary each role's own LM, and nothing DSPy does silently moves a role
off it.

Each role predictor's class is named ``<Module>.<role>`` (:func:`role_class`), which is how ``mlflow.dspy.autolog()``
names its span (``FORPrompting.debater.forward``); its source is found as any class's (DSPy's program-aware proposer
reads a program through it). An LM error raised inside a role names it (:func:`naming_errors`): by its label, and by
its attribute path in the program called when it sits deeper (``solver.debate.debater (FORPrompting.debater)``), so
two modules' roles are told apart. After a load that could not give a role its LM, an LM put on it
(``program.set_lm(lm)``, the LM in force too) becomes its own.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import dspy

from dspy_for.compat.dspy import attribute_path
from dspy_for.errors import ConfigError, DspyForError
from dspy_for.lm import resolve_lm
from dspy_for.modules import role_lm_state as saved

__all__ = ["RolePredict", "lm_in_use", "naming_errors", "resample_changes", "role_class", "role_lms"]

#: what a copy of the LM in force may change and still be a resample of it (DSPy's wrappers change these)
SAMPLING_KEYS = ("rollout_id", "temperature")
_LABEL = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_CLASS_PREFIX = "RolePredict__"
_NAMED_ATTR = "dspy_for_role"
_LM_ERROR_MODULES = ("litellm", "openai", "httpx", "httpcore", "dspy_for.lm")


class RolePredict(dspy.Predict):
    """A ``dspy.Predict`` whose role LM (``role_lm``) belongs to it (see the module docstring).

    Args:
        signature: the role's signature.
        module: the name of the module the role belongs to (``"FORPrompting"``); with ``role`` (and ``step``, a
            second predictor of the same role, e.g. ``"revise"``) it names the predictor: ``FORPrompting.debater``.
        role: the role's name.
        lm: the role's own LM (a ``dspy.BaseLM`` or a spec string); None: the LM in force.
        lm_parameter: the constructor parameter of ``module`` that takes this LM, named in the error that asks for
            an LM a loaded program could not carry.
    """

    #: the label a role class (:func:`role_class`) is made for; None on any other class
    role_class_label: ClassVar[str | None] = None

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        *,
        module: str,
        role: str,
        step: str | None = None,
        lm: Any = None,
        lm_parameter: str | None = None,
        **config: Any,
    ) -> None:
        super().__init__(signature, **config)
        self.module_name, self.role, self.step, self.lm_parameter = module, role, step, lm_parameter
        self.role_lm = resolve_lm(lm)
        if type(self) is RolePredict:  # named for MLflow's spans: `<module>.<role>[.<step>]`
            self.__class__ = role_class(self.label)

    @property
    def label(self) -> str:
        """``<module>.<role>``, with ``.<step>`` for a second predictor of a role."""
        return ".".join(p for p in (self.module_name, self.role, self.step) if p)

    # ------------------------------------------------------------------------------------------ routing

    def reset(self) -> None:
        """DSPy's reset (demos, traces, training data), keeping the role's LM and the LM set on the predictor."""
        lms = {k: self.__dict__.get(k) for k in ("lm", "role_lm")}
        super().reset()
        self.__dict__.update({k: v for k, v in lms.items() if k in self.__dict__ or v is not None})

    def routed_lm(self) -> Any:
        """The LM this predictor's calls run on (None: the LM in force); see the module docstring."""
        given, own = self.lm, self.__dict__.get("role_lm")
        if own is None or given is None:
            return own if given is None else given
        changes = resample_changes(given, dspy.settings.lm)
        if changes is None:
            return given
        return own.copy(**changes) if changes else own

    def forward(self, **kwargs: Any) -> Any:
        kwargs = self._routed(kwargs)
        with naming_errors(self, kwargs.get("lm")):
            return super().forward(**kwargs)

    async def aforward(self, **kwargs: Any) -> Any:
        kwargs = self._routed(kwargs)
        with naming_errors(self, kwargs.get("lm")):
            return await super().aforward(**kwargs)

    def _routed(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs.get("lm") is not None:
            return kwargs
        lm = self.routed_lm()
        if isinstance(lm, saved.UnsuppliedLM):  # refused before any LM call, naming where the role sits
            raise ConfigError(lm.message_at(attribute_path(self)))
        return {**kwargs, "lm": lm} if lm is not None else kwargs

    def __setattr__(self, name: str, value: Any) -> None:
        """DSPy's, except that an LM put on a role whose own LM a load could not give back (``program.set_lm(lm)``, as
        the load's error says) becomes the role's own LM, the LM in force too; a wrapper's resample of the LM in force
        (``dspy.BestOfN``) does not stand in for it."""
        unsupplied = isinstance(self.__dict__.get("role_lm"), saved.UnsuppliedLM)
        if name == "lm" and value is not None and unsupplied and not resample_changes(value, dspy.settings.lm):
            self.__dict__["role_lm"] = value
        super().__setattr__(name, value)

    # ---------------------------------------------------------------------------------- state and copies

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        state: dict[str, Any] = super().dump_state(json_mode=json_mode)
        state["lm"] = None
        state[saved.STATE_KEY] = {"role_lm": saved.lm_record(self.role_lm), "lm": saved.lm_record(self.lm)}
        return state

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> RolePredict:
        """DSPy's ``load_state`` for everything but the LMs; each LM as :func:`.role_lm_state.restore_lm` says."""
        state = dict(state)
        records = state.pop(saved.STATE_KEY, None)
        if records is None:  # saved by DSPy itself: its LM read as the role's, an object the file cannot carry
            legacy = state.get("lm")
            records = {"role_lm": None if not legacy else {"object": str(legacy.get("model", "an LM"))}}
        before = {"role_lm": self.role_lm, "lm": self.lm}
        super().load_state({**state, "lm": None}, allow_unsafe_lm_state=allow_unsafe_lm_state)
        for slot in ("role_lm", "lm"):
            restored = (
                saved.restore_lm(records[slot], before[slot], self, allow_unsafe=allow_unsafe_lm_state)
                if slot in records
                else before[slot]
            )
            self.__dict__[slot] = restored
        return self

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled: every LM built from a spec is built again in this process (a pickled endpoint is dead)."""
        super().__setstate__(state)
        for slot in ("role_lm", "lm"):
            self.__dict__[slot] = saved.rebuilt(self.__dict__.get(slot))

    def __deepcopy__(self, memo: dict[int, Any]) -> RolePredict:
        """DSPy's deep copy (each LM copied with its predictor), without building spec LMs again as unpickling does."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        dspy.Module.__setstate__(new, copy.deepcopy(self.__getstate__(), memo))
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        """A role class is made at run time (:func:`role_class`): its instance pickles as its label and state."""
        label = type(self).role_class_label
        if label is None:
            return super().__reduce_ex__(protocol)
        return _role_predictor, (label,), self.__getstate__()

    def __repr__(self) -> str:
        own = f", role_lm={getattr(self.role_lm, 'model', None)}" if self.__dict__.get("role_lm") is not None else ""
        return f"{self.label}({self.signature}{own})"


def lm_in_use(predictor: Any) -> Any:
    """The LM ``predictor``'s calls run on (None: the LM in force): a role's routed LM, else DSPy's slot."""
    return predictor.routed_lm() if isinstance(predictor, RolePredict) else getattr(predictor, "lm", None)


def resample_changes(given: Any, base: Any) -> dict[str, Any] | None:
    """What ``given`` changes of ``base`` when it is ``base`` or a copy of it that changes only ``rollout_id`` /
    ``temperature`` (a resample: ``{}`` for ``base`` itself); None when it is another LM."""
    if base is None:
        return None
    if given is base:
        return {}
    if type(given) is not type(base) or getattr(given, "model", None) != getattr(base, "model", None):
        return None
    mine, theirs = dict(getattr(given, "kwargs", None) or {}), dict(getattr(base, "kwargs", None) or {})
    if {k: v for k, v in mine.items() if k not in SAMPLING_KEYS} != {
        k: v for k, v in theirs.items() if k not in SAMPLING_KEYS
    }:
        return None
    return {k: mine.get(k) for k in SAMPLING_KEYS if mine.get(k) != theirs.get(k)}


# ------------------------------------------------------------------------------------ one class per role


def role_class(label: str) -> type[RolePredict]:
    """The :class:`RolePredict` subclass named ``label`` (``FORPrompting.debater``): MLflow names a module's span after
    its class. Made once per label, by the class statement below, so ``inspect`` finds its source (DSPy's
    ``get_dspy_source_code``, MIPROv2's program-aware proposer); an instance pickles as its label
    (:meth:`RolePredict.__reduce_ex__`)."""
    if not _LABEL.match(label):
        raise ConfigError(f"A role predictor's name must be dotted identifiers (`Module.role`), got {label!r}.")
    cls = _ROLE_CLASSES.get(label)
    if cls is None:

        class Role(RolePredict):
            """One role of a module: a ``dspy.Predict`` on the role's own LM, its class named for the role."""

        Role.__name__, Role.role_class_label = label, label
        cls = _ROLE_CLASSES.setdefault(label, Role)
    return cls


_ROLE_CLASSES: dict[str, type[RolePredict]] = {}


def _role_predictor(label: str) -> RolePredict:
    """An empty predictor of the role class ``label``, its state to come (how a pickled role predictor is rebuilt)."""
    cls = role_class(label)
    return cls.__new__(cls)


def __getattr__(name: str) -> Any:
    """A role class by the name pickles written before kept it under (PEP 562)."""
    if name.startswith(_CLASS_PREFIX) and name != _CLASS_PREFIX:
        return role_class(name.removeprefix(_CLASS_PREFIX).replace("__", "."))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------ named errors


@contextmanager
def naming_errors(predictor: RolePredict, lm: Any = None) -> Iterator[None]:
    """An LM error raised inside the block names the predictor's module and role and the model it called, in its
    message (``FORPrompting.debater: [openai/m-debater] ...``): the same error object, class and attributes."""
    try:
        yield
    except Exception as exc:
        if _is_lm_error(exc) and getattr(exc, _NAMED_ATTR, None) is None:
            _name(exc, predictor, lm if lm is not None else predictor.routed_lm() or dspy.settings.lm)
        raise


def _is_lm_error(exc: BaseException) -> bool:
    from dspy.utils.exceptions import LMError

    if isinstance(exc, ConfigError):
        return False
    if isinstance(exc, LMError | DspyForError):
        return True
    return type(exc).__module__.split(".")[0] in {m.split(".")[0] for m in _LM_ERROR_MODULES}


def _where(predictor: RolePredict) -> str:
    """``predictor`` as an error names it: its label (``FORPrompting.debater``), and its attribute path in the program
    called when that is deeper than its module's own attribute (``solver.second.debater (FORPrompting.debater)``)."""
    path = attribute_path(predictor)
    return f"{path} ({predictor.label})" if path is not None and "." in path else predictor.label


def _name(exc: Exception, predictor: RolePredict, lm: Any) -> None:
    model = str(getattr(lm, "model", None) or type(lm).__name__)
    text = str(exc)
    where = _where(predictor)
    prefix = f"{where}: " if f"[{model}]" in text else f"{where} ({model}): "
    try:
        setattr(exc, _NAMED_ATTR, predictor.label)
        message = getattr(exc, "message", None)
        if isinstance(message, str) and not isinstance(exc, _dspy_error()):
            exc.message = prefix + message  # type: ignore[attr-defined]  # litellm prints its `message`
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (prefix + exc.args[0], *exc.args[1:])
    except (AttributeError, TypeError):  # an exception that takes no new attributes keeps its message
        return
    if where not in str(exc):
        exc.add_note(f"raised in {where} ({model})")


def _dspy_error() -> type[Exception]:
    from dspy.utils.exceptions import DSPyError

    return DSPyError


def role_lms(program: dspy.Module) -> Mapping[str, Any]:
    """Each role predictor of ``program`` (by its name in ``named_predictors()``) → its own LM."""
    return {name: p.role_lm for name, p in program.named_predictors() if isinstance(p, RolePredict)}
