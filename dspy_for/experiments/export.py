"""``dspy-for export``: a comparison's stored results (:func:`~dspy_for.experiments.results.load_results`) at one
level of its frames, written to a CSV, Parquet or JSONL file whole or not at all; bad input fails before anything is
read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_for.errors import ConfigError
from dspy_for.experiments.core.frames import check_level
from dspy_for.experiments.results import load_results
from dspy_for.experiments.spec import ExperimentSpec
from dspy_for.experiments.spec.config import Overrides

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMATS", "check_export", "export_results", "write_frame"]

#: the file formats ``export`` writes, by suffix
FORMATS = (".csv", ".parquet", ".jsonl")


def check_export(path: str | Path, level: str = "items") -> None:
    """Bad export input fails before anything is read: a suffix other than :data:`FORMATS`, a folder that does not
    exist, a level a comparison does not have."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(
            f"`--to` {path}: unknown file type {path.suffix or '(none)'!r}; end the name in "
            f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]} (e.g. --to results.csv)."
        )
    if not path.parent.is_dir():
        raise ConfigError(f"`--to` {path}: the folder {path.parent} does not exist; create it first.")
    check_level("comparison", level)


def write_frame(frame: pd.DataFrame, path: str | Path) -> None:
    """``frame`` to ``path`` (.csv, .parquet or .jsonl), whole or not at all: written beside it under a temporary
    name, then renamed over it (a failed write leaves no partial file and any earlier file as it was)."""
    path = Path(path)
    check_export(path)
    suffix = path.suffix.lower()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if suffix == ".csv":
            frame.to_csv(tmp, index=False)
        elif suffix == ".jsonl":
            frame.to_json(tmp, orient="records", lines=True, force_ascii=False, date_format="iso")
        else:
            _parquet(frame, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _parquet(frame: pd.DataFrame, path: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ConfigError(
            "Parquet needs pyarrow: pip install 'dspy-for[notebook]' (or pip install pyarrow), or write .csv / .jsonl."
        ) from None
    out = frame.copy()
    for name in out.columns:  # an untyped column of mixed kinds (a number here, a text there) is written as text
        if out[name].dtype != object:
            continue
        if len({type(v) for v in out[name] if not _missing(v)}) > 1:
            out[name] = [None if _missing(v) else str(v) for v in out[name]]
    out.to_parquet(path, index=False)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def export_results(
    config: ExperimentSpec | str | Path | None,
    to: str | Path,
    *,
    level: str = "items",
    results_dir: str | Path | None = None,
    overrides: Overrides | None = None,
    **kwargs: Any,
) -> pd.DataFrame:
    """``dspy-for export``: the comparison ``config`` describes, loaded from its stored records
    (:func:`load_results`), at ``level``, written to ``to`` (:func:`write_frame`); returns the frame written."""
    check_export(to, level)
    frame = load_results(config, results_dir, overrides=overrides, **kwargs).to_pandas(level=level)
    write_frame(frame, to)
    return frame
