"""The folders a run writes in — its results folder (``results_dir``) and the folder beside its MLflow store — checked
before anything runs: a folder is created when missing; one that is a file, cannot be created or cannot be written is
refused (:class:`~dspy_for.errors.PathError`, exit 2) with one sentence naming the path and the fix. A results folder
that cannot be written is used as it is when the run has nothing to write in it (every item stored, every compile
kept: a complete store on a read-only disk is read, without a lock)."""

from __future__ import annotations

import errno
import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from dspy_for.errors import PathError

__all__ = ["READ_ONLY", "check_results_dir", "probe_write", "writable_folder"]

#: what a write into a folder that cannot be written raises (a read-only disk; no permission)
READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})

logger = logging.getLogger("dspy_for.experiments")
_RESULTS_FIX = "pass a folder you can write (`--results-dir DIR`, the config's `results_dir`)"


def probe_write(folder: Path) -> None:
    """Create (and at once remove) a nameless file in ``folder``: raises the ``OSError`` a write there would."""
    with tempfile.TemporaryFile(dir=folder):
        pass


def writable_folder(path: Path, what: str, fix: str) -> OSError | None:
    """``path`` as a folder to write in, created when missing: None when files can be written in it, else the error a
    write raises (it is read-only). A file, a folder that cannot be created, or one whose writes fail otherwise is a
    :class:`~dspy_for.errors.PathError`: ``what`` ``path`` ... : ``fix``."""
    if path.exists() and not path.is_dir():
        raise PathError(f"{what} {path} is a file, not a folder: {fix}.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(f"{what} {path} cannot be created ({exc.strerror}): {fix}.") from None
    try:
        probe_write(path)
    except OSError as exc:
        if exc.errno in READ_ONLY:
            return exc
        raise PathError(f"{what} {path} cannot be written ({exc.strerror}): {fix}.") from None
    return None


class PlannedStep(Protocol):
    """A step of a plan as :func:`check_results_dir` reads it (a :class:`~dspy_for.experiments.core.plan.CellPlan`)."""

    @property
    def step(self) -> str: ...

    @property
    def to_run(self) -> int: ...

    @property
    def error(self) -> str | None: ...


class Planned(Protocol):
    """What :func:`check_results_dir` reads of a run's plan (a :class:`~dspy_for.experiments.core.plan.RunPlan`):
    the items it has to run, and its steps."""

    @property
    def to_run(self) -> int: ...

    @property
    def cells(self) -> Sequence[PlannedStep]: ...


def check_results_dir(items_dir: Path, plan: Callable[[], Planned]) -> None:
    """``items_dir`` ready for a run's records (see the module docstring); ``plan``: what the run will take, worked out
    without an LM, asked only when the folder cannot be written."""
    read_only = writable_folder(items_dir, "`results_dir`", _RESULTS_FIX)
    if read_only is None:
        return
    p = plan()
    items = p.to_run
    compiles = sum(1 for c in p.cells if c.step == "compile" and c.to_run and c.error is None)
    if items or compiles:
        left = f"{items} item(s)" + (f" and {compiles} compile step(s)" if compiles else "")
        raise PathError(
            f"`results_dir` {items_dir} cannot be written ({read_only.strerror}) and this run has {left} to store: "
            f"make it writable, or {_RESULTS_FIX}."
        )
    logger.info(
        "%s cannot be written: every record the run needs is stored there; it is read without a lock", items_dir
    )
