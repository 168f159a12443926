"""The results store: one method's finished records on one dataset split, a JSONL file kept for resume.

Each finished record is appended as it lands (secrets masked) and matched back to its item by content
(question and gold), so a killed run resumes without redoing finished work and an edited data file re-runs
exactly the changed items. A crash can tear the last line mid-write: :meth:`ResultStore.load` cuts a torn
last line off the file before anything is appended, so that item is simply run again, once. A store is held
under a file lock while a run uses it: two runs of the same method at once never run an item twice (the
second waits, then reuses what the first finished).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from filelock import FileLock, Timeout

from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.sinks import Landed, RunStatus

__all__ = ["ResultStore"]

logger = logging.getLogger("dspy_for.experiments")


class ResultStore:
    """Finished records of one method on one dataset, in a JSONL file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._write_lock = threading.Lock()
        self._file: BinaryIO | None = None  # kept open while records land (opening it per record costs ms)

    @classmethod
    def in_dir(cls, results_dir: str | Path, dataset: str, split: str, label: str, key: str) -> ResultStore:
        """The store of one method (``label``, run key ``key``) on one dataset split in a results directory:
        ``<results_dir>/<dataset>/<split>/<label>.<key>.jsonl``, the layout compare and the measurement
        scripts share, so each reuses what the other stored."""
        return cls(Path(results_dir) / dataset / split / f"{label}.{key}.jsonl")

    def load(self, *, repair: bool = True) -> dict[str, ItemResult]:
        """Records of earlier (possibly killed) runs by content key; failed ones are left out (re-run), and a
        later record of an item replaces an earlier one. A torn last line is cut off the file first (``repair``;
        ``repair=False`` reads without writing anything, and a torn line is skipped as not a record)."""
        done: dict[str, ItemResult] = {}
        if not self.path.is_file():
            return done
        if repair:
            self.repair()
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                item = ItemResult.from_json(line)
            except (json.JSONDecodeError, TypeError):
                logger.warning("%s: skipping a line that is not a record", self.path.name)
                continue
            if item.failed:
                done.pop(item.key, None)
            else:
                done[item.key] = item
        return done

    def repair(self) -> bool:
        """Cut a torn last line (a write a crash interrupted: no final newline) off the file, so the next record
        starts on a line of its own. Returns whether anything was cut."""
        with self._write_lock, self.path.open("rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return False
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return False
            f.seek(0)
            data = f.read()
            keep = data.rfind(b"\n") + 1
            f.truncate(keep)
        logger.warning("%s: cut a torn last line (%d bytes) left by an interrupted write", self.path.name, size - keep)
        return True

    def append(self, item: ItemResult) -> None:
        """Write one record, whole, and hand it to the OS at once (a killed process loses none)."""
        line = (item.to_json() + "\n").encode("utf-8")
        with self._write_lock:
            if self._file is None or self._file.closed:
                self._file = self.path.open("ab")
            self._file.write(line)
            self._file.flush()

    def add(self, landed: Landed) -> None:
        """As a sink of the run core: keep every new record (and every new verdict on a stored one)."""
        if landed.changed:
            self.append(landed.item)

    def close(self, result: MethodResult | None = None, status: RunStatus | None = None) -> None:
        """Close the file (every record was written, whole, as it landed)."""
        with self._write_lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @contextmanager
    def exclusive(self) -> Iterator[ResultStore]:
        """Hold the store for one run; another process running the same method waits here."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.warning(
                "another run is evaluating %s: waiting for it, then reusing what it finished", self.path.name
            )
            lock.acquire()
        try:
            yield self
        finally:
            lock.release()
