"""The results store: one method's finished records on one dataset split, a JSONL file kept for resume.

Each finished record is appended as it lands (secrets masked) and matched back to its item by content
(question and gold), so a killed run resumes without redoing finished work and an edited data file re-runs
exactly the changed items. A crash can tear the last line mid-write: the run holding the store cuts a torn last
line off the file before anything is appended, so that item is simply run again, once.

A line that is not a record (bytes that are not UTF-8, JSON that is not an object, an object that is not a record)
never stops a store: the run holding it sets the line aside — appended, byte for byte, to ``<file>.unreadable``
beside it, which the warning names — and runs its item again; every other record is kept as it was. A reader
(``load_results``, ``export``, a dry run) reads around such lines the same way and writes nothing.

Locks: a run holds the lock of each store it uses (``<file>.lock``) from opening its cell to closing it, so two
runs of the same method at once never run an item twice (the second waits, then reuses what the first finished).
No runs ever wait on each other in a circle, whatever their number and the order of their methods
(:class:`StoreLocks`): a run that finds a lock taken lets go of every lock it holds, then takes them all, the taken
one with them, in one order (by path), waiting its turn; a waiting run so holds only locks that come before the one
it waits for. The stores it let go of are read again once held (another run may have finished items in them).
A store whose lock file cannot be made (a read-only disk) is read without a lock; nothing is written to it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from filelock import FileLock, Timeout

from dspy_for.errors import PathError
from dspy_for.experiments.core.folders import READ_ONLY
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.sinks import Landed, RunStatus

__all__ = ["ResultStore", "StoreLocks", "open_lock", "read_lines"]

logger = logging.getLogger("dspy_for.experiments")

#: a line that is not a record: (its line number, its bytes, why it is not one)
Unreadable = tuple[int, bytes, str]


class ResultStore:
    """Finished records of one method on one dataset, in a JSONL file (see the module docstring). ``read_only``: the
    store is read without its lock and never written (its folder cannot be written)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.read_only = False
        self._write_lock = threading.Lock()
        self._file: BinaryIO | None = None  # kept open while records land (opening it per record costs ms)

    @classmethod
    def in_dir(cls, results_dir: str | Path, dataset: str, split: str, label: str, key: str) -> ResultStore:
        """The store of one method (``label``, run key ``key``) on one dataset split in a results directory:
        ``<results_dir>/<dataset>/<split>/<label>.<key>.jsonl``, the layout compare and the measurement
        scripts share, so each reuses what the other stored."""
        return cls(Path(results_dir) / dataset / split / f"{label}.{key}.jsonl")

    @property
    def aside(self) -> Path:
        """Where the lines that are not records are set aside: ``<file>.unreadable``."""
        return self.path.with_name(self.path.name + ".unreadable")

    def load(self, *, repair: bool = True) -> dict[str, ItemResult]:
        """Records of earlier (possibly killed) runs by content key; failed ones are left out (re-run), and a
        later record of an item replaces an earlier one (see :meth:`records` for ``repair``)."""
        return {k: r for k, r in self.records(repair=repair).items() if not r.failed}

    def records(self, *, repair: bool = True) -> dict[str, ItemResult]:
        """Every record by content key, the last one of a key counting (failed ones too). ``repair`` (the run holding
        the store): a torn last line is cut and lines that are not records are set aside (module docstring);
        ``repair=False`` (a reader) reads around them, writing nothing, as a read-only store is read."""
        if not self.path.is_file():
            return {}
        writes = repair and not self.read_only
        if writes:
            self.repair()
        data = self.path.read_bytes()
        records, unreadable = read_lines(data)
        if unreadable and writes:
            self._set_aside(data, unreadable)
        elif unreadable:
            logger.warning(
                "%s: skipping %d line(s) that are not records (%s); the next run that uses the store sets them "
                "aside into %s and runs their items again",
                self.path,
                len(unreadable),
                _which(unreadable),
                self.aside.name,
            )
        return records

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

    def _set_aside(self, data: bytes, unreadable: list[Unreadable]) -> None:
        """Move the ``unreadable`` lines of ``data`` (the file, whole lines only) to :attr:`aside`: appended there
        first, then the file replaced, at once, by its other lines as they were."""
        out = {n for n, _, _ in unreadable}
        lines = data.split(b"\n")[:-1]
        kept = b"".join(line + b"\n" for n, line in enumerate(lines, 1) if n not in out)
        with self._write_lock:
            if self._file is not None:  # the next record goes to the new file
                self._file.close()
                self._file = None
            with self.aside.open("ab") as f:
                f.write(b"".join(line + b"\n" for _, line, _ in unreadable))
                f.flush()
                os.fsync(f.fileno())
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(kept)
            os.replace(tmp, self.path)
        logger.warning(
            "%s: set aside %d line(s) that are not records (%s) into %s, kept as they were; their items run again",
            self.path.name,
            len(unreadable),
            _which(unreadable),
            self.aside,
        )

    def append(self, item: ItemResult) -> None:
        """Write one record, whole, and hand it to the OS at once (a killed process loses none)."""
        self._write(item.to_json())

    def add(self, landed: Landed) -> None:
        """As a sink of the run core: keep every new record (and every new verdict on a stored one), as its line
        (:attr:`~.sinks.Landed.line`, made once for every sink)."""
        if landed.changed:
            self._write(landed.line)

    def _write(self, line: str) -> None:
        if self.read_only:
            raise PathError(f"{self.path} cannot be written (its folder is read-only): run on a folder you can write.")
        data = (line + "\n").encode("utf-8")
        with self._write_lock:
            if self._file is None or self._file.closed:
                self._file = self.path.open("ab")
            self._file.write(data)
            self._file.flush()

    def close(self, result: MethodResult | None = None, status: RunStatus | None = None) -> None:
        """Close the file (every record was written, whole, as it landed)."""
        with self._write_lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @contextmanager
    def exclusive(self) -> Iterator[ResultStore]:
        """Hold this store alone (one lock: see :class:`StoreLocks` for a run holding several)."""
        locks = StoreLocks()
        locks.take(self)
        try:
            yield self
        finally:
            locks.release_all()


def read_lines(data: bytes) -> tuple[dict[str, ItemResult], list[Unreadable]]:
    """The records of a results file's bytes by content key (the last one of a key counting), and its lines that are
    not records. A last line without its newline (torn by a crash, or being written by another run) and blank lines
    are neither."""
    records: dict[str, ItemResult] = {}
    unreadable: list[Unreadable] = []
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            item = ItemResult.from_json(line.decode("utf-8"))
        except UnicodeDecodeError:
            unreadable.append((n, line, "not UTF-8"))
        except ValueError as exc:
            unreadable.append((n, line, str(exc)))
        else:
            records[item.key] = item
    return records, unreadable


def _which(unreadable: list[Unreadable], shown: int = 3) -> str:
    lines = "; ".join(f"line {n}: {why}" for n, _, why in unreadable[:shown])
    return lines + (f"; {len(unreadable) - shown} more" if len(unreadable) > shown else "")


# ----------------------------------------------------------------------------------------------------- locks


def open_lock(path: Path, *, wait: bool) -> FileLock:
    """The lock of the store at ``path``, taken: at once (``wait=False``: :class:`filelock.Timeout` when another
    process holds it) or when its holder lets go. An ``OSError`` when its file cannot be made (a read-only disk)."""
    lock = FileLock(str(path) + ".lock")
    lock.acquire(timeout=-1 if wait else 0)
    return lock


class StoreLocks:
    """The store locks one run holds (see the module docstring): taken as its cells open, let go as they close."""

    def __init__(self) -> None:
        self._held: dict[Path, FileLock] = {}
        self._users: dict[Path, list[ResultStore]] = {}  # the open stores of each held file

    def take(self, store: ResultStore) -> list[ResultStore]:
        """Hold ``store``; returns the stores this run let go of and took again while it waited for it (read
        them again). A store whose lock file cannot be made is marked :attr:`ResultStore.read_only`, unlocked."""
        path = store.path
        if store.read_only:
            return []
        if path in self._held:
            self._users[path].append(store)
            return []
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._held[path] = open_lock(path, wait=False)
        except Timeout:
            logger.warning("another run is evaluating %s: waiting for it, then reusing what it finished", path.name)
            users = self._users
            self.release_all()
            for p in sorted([path, *users]):  # one order for every run: none waits on another in a circle
                self._held[p] = open_lock(p, wait=True)
            self._users = {**users, path: [store]}
            again = [s for stores in users.values() for s in stores]
            for s in again:  # its file is opened again at its next record (another run may have replaced it)
                s.close()
            return again
        except OSError as exc:
            if exc.errno not in READ_ONLY:
                raise
            store.read_only = True
            logger.info("%s: its folder is read-only (%s): read without a lock", path.name, exc.strerror)
            return []
        self._users[path] = [store]
        return []

    def release(self, store: ResultStore) -> None:
        """Let go of ``store`` (its cell is closed: nothing more is written to it); its file's lock once no open
        store of this run uses the file."""
        users = self._users.get(store.path, [])
        if store in users:
            users.remove(store)
        if not users and (lock := self._held.pop(store.path, None)) is not None:
            self._users.pop(store.path, None)
            lock.release()

    def release_all(self) -> None:
        for lock in self._held.values():
            lock.release()
        self._held.clear()
        self._users = {}
