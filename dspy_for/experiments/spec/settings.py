"""Run settings, each declared once.

A run setting says how a run runs, never what it answers (so none enters a result's key): how many items run at
once, what it may spend, how often each item is asked, where it is tracked. Each is one :class:`Setting` in
:data:`SETTINGS`: its name (the config key, the Python keyword argument and the spec's field, all one word), type,
default, meaning, the commands that take it and its flag. From the declarations come

* the options of ``dspy-for compare`` / ``sweep`` / ``advise`` (:func:`dspy_for.cli_common.run_command`),
* the check of every value, whether a config, a flag or a Python keyword gave it (:meth:`Setting.check`),
* the rows of ``docs/reference.md`` (:func:`reference_rows`),

and the value travels as the spec's typed field of the same name
(:class:`~dspy_for.experiments.spec.model.RunSpec`) to the one place that uses it, so a search for a setting's
name finds its whole path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dspy_for.errors import ConfigError
from dspy_for.experiments.spec.data import positive_int
from dspy_for.lm.options import DEFAULT_SLOTS
from dspy_for.stats import check_reducer

__all__ = [
    "FINDS_RECORDS",
    "RUN_COMMANDS",
    "SETTINGS",
    "Setting",
    "check_settings",
    "declare",
    "reference_rows",
    "settings_for",
    "value_kind",
]

#: the commands that take run settings, in the order help and messages name them: those that run items, and
#: ``export``, which finds a comparison's records by the settings that decide them
_ORDER = ("compare", "sweep", "advise", "export")
RUN_COMMANDS = frozenset(_ORDER[:3])
#: the run commands and ``export``: a setting that decides which records a comparison keeps, or where
FINDS_RECORDS = RUN_COMMANDS | {"export"}


@dataclass(frozen=True)
class Setting:
    """One run setting (see the module docstring). ``type`` is ``int``, ``float``, ``str`` or ``bool``; a setting
    whose default is None may also be None (not set). ``check(value, name)`` refuses a value of the right type that
    is still wrong, with a :class:`~dspy_for.errors.ConfigError` naming the setting and the fix. ``old_flags`` are
    spellings still accepted, with a deprecation warning."""

    name: str
    type: type
    default: Any
    meaning: str
    commands: frozenset[str] = RUN_COMMANDS
    metavar: str = ""
    check: Callable[[Any, str], None] | None = None
    old_flags: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """``--num-threads``; a boolean's two flags ``--traces/--no-traces``."""
        word = self.name.replace("_", "-")
        return f"--{word}/--no-{word}" if self.type is bool else f"--{word}"

    def checked(self, value: Any) -> Any:
        """``value`` if this setting takes it (a float's integer as a float); else a ConfigError."""
        if value is None and self.default is None:
            return None
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is not bool and isinstance(value, bool)):
            if self.check is not None:
                self.check(value, self.name)  # its own message says what it takes
            raise ConfigError(f"`{self.name}` must be {_KINDS[self.type]}, got {value!r}.")
        if self.check is not None:
            self.check(value, self.name)
        return value


_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}

#: every declared run setting, by name, in the order the help and the reference list them
SETTINGS: dict[str, Setting] = {}


def declare(setting: Setting) -> Setting:
    """Add ``setting`` to :data:`SETTINGS` (its name must be new)."""
    if setting.name in SETTINGS:
        raise ValueError(f"run setting `{setting.name}` is declared twice")
    SETTINGS[setting.name] = setting
    return setting


def settings_for(command: str) -> list[Setting]:
    """The settings ``command`` takes, in declaration order."""
    return [s for s in SETTINGS.values() if command in s.commands]


def check_settings(values: Mapping[str, Any], command: str, where: str = "") -> dict[str, Any]:
    """``values`` (name -> value; None: not given, dropped) checked against ``command``'s declared settings: an
    unknown name, a setting the command does not take or a wrong value is a ConfigError naming it."""
    taken = {s.name: s for s in settings_for(command)}
    out: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        if name not in taken:
            known = SETTINGS.get(name)
            if known is not None:
                raise ConfigError(f"`{name}` applies to {_named(known.commands)} only: drop it{where}.")
            raise ConfigError(f"Unknown run setting `{name}`. Allowed: {', '.join(taken)}.")
        out[name] = taken[name].checked(value)
    return out


def _named(commands: Iterable[str]) -> str:
    return ", ".join(c for c in _ORDER if c in commands)


def _max_cost(value: Any, name: str) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and 0 < value < math.inf):
        raise ConfigError(
            f"`{name}` is the USD a run may spend: give a positive number (e.g. --max-cost 5), got {value!r}."
        )


def _reducer(value: Any, name: str) -> None:
    check_reducer(value)


declare(
    Setting(
        "num_threads",
        int,
        None,
        f"Items run at once, over every method and dataset. Default: the local server's `slots` ({DEFAULT_SLOTS} "
        "unless an LM option sets them) when the run uses a local model, else 1; 8-32 suit a remote endpoint.",
        metavar="N",
        check=positive_int,
        old_flags=("--threads",),
    )
)


declare(
    Setting(
        "max_cost",
        float,
        None,
        "USD the run may spend (a sweep's trials in all, every worker's; a new compile's too); then no item or "
        "compile starts, what finished is kept and a re-run resumes. Every LM needs a price.",
        metavar="USD",
        check=_max_cost,
    )
)
declare(
    Setting(
        "epochs",
        int,
        1,
        "Repeats per item (each its own sample; needs a sampling temperature).",
        commands=FINDS_RECORDS,
        metavar="N",
        check=positive_int,
    )
)
declare(
    Setting(
        "reducer",
        str,
        "mean",
        "How an item's epochs make one value: mean (default), majority, pass_at_k.",
        commands=FINDS_RECORDS,
        metavar="NAME",
        check=_reducer,
    )
)
declare(
    Setting(
        "traces",
        bool,
        True,
        "One MLflow trace per item (off for big fast runs: metrics, params and items.jsonl only).",
        commands=frozenset({"compare", "sweep"}),
    )
)
declare(
    Setting(
        "dry_run",
        bool,
        False,
        "Print the plan and stop: per method and dataset the items to run and those stored, and the calls, tokens, "
        "dollars and LM time each will take (with a range and where the estimate comes from), and whether max_cost "
        "would stop it. Builds no LM, makes no LM call.",
    )
)
declare(
    Setting(
        "tracking_uri",
        str,
        None,
        "MLflow tracking URI (default: SQLite in mlruns/).",
        commands=FINDS_RECORDS,
        metavar="URI",
    )
)
declare(
    Setting(
        "results_dir",
        str,
        None,
        "Where per-item results are kept to resume and reuse (default mlruns/compare/items; compare and advise "
        "share it).",
        commands=frozenset({"compare", "advise", "export"}),
        metavar="DIR",
    )
)
declare(
    Setting(
        "recheck",
        int,
        None,
        "After the comparison, re-run the first N stored items of each cell with DSPy's cache off and print how "
        "many answers changed (the serving stack's own noise) beside each Δ; the re-runs go to MLflow, never to "
        "the results.",
        commands=frozenset({"compare"}),
        metavar="N",
        check=positive_int,
    )
)
declare(
    Setting(
        "autolog",
        bool,
        False,
        "Also record mlflow.dspy.autolog() traces (the methods then run one after another).",
        commands=frozenset({"compare"}),
    )
)

declare(
    Setting(
        "rerun_changed",
        bool,
        False,
        "Run again the stored records served by another stack than the one this run talks to (another model "
        "snapshot, system_fingerprint, local server build or slots, or model file), bypassing DSPy's cache; records "
        "without a serving identity are kept. Needs stored records.",
        commands=frozenset({"compare"}),
    )
)


def value_kind(epochs: int, reducer: str) -> Literal["binary", "bounded"]:
    """What one item's value is: 0/1 (``binary``), or any number in [0, 1] (``bounded``) when the ``mean`` reducer
    averages several epochs — which decides the paired tests (exact McNemar or bootstrap; binary or bounded
    sequential tests) and the accuracy interval (Wilson, or Student's t over items as clusters)."""
    return "bounded" if epochs > 1 and reducer == "mean" else "binary"


# ------------------------------------------------------------------------------------------ reference


def _literal(value: Any) -> str:
    """A default as a TOML literal in backticks; ``none`` for None."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"


def reference_rows(settings: Iterable[Setting] | None = None) -> list[str]:
    """The rows of the run settings' table in ``docs/reference.md`` (key, default, flag, commands, meaning)."""
    rows = []
    for s in SETTINGS.values() if settings is None else settings:
        flag = " / ".join(s.flag.split("/")) + (f" {s.metavar}" if s.metavar else "")
        rows.append(f"| `{s.name}` | {_literal(s.default)} | `{flag}` | {_named(s.commands)} | {s.meaning} |")
    return rows
