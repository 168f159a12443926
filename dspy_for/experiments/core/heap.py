"""The garbage collector around a run: what was alive when its threads started is left out of the collector's passes
while they run.

A run's heap is mostly what exists before its first item: the modules of DSPy, MLflow and their dependencies, the
program, the data (300,000–450,000 objects for a CoT run). CPython's collector walks all of it on every full pass,
and each pass holds the interpreter lock that the item threads need: at 64 threads and 1,319 items, nine full passes
took 1.3–1.6 s of a 20 s run. :func:`frozen_heap` moves those objects out of the collector's reach for the run
(:func:`gc.freeze`) and back after (:func:`gc.unfreeze`), so the collector walks only what the run itself makes; what
became garbage meanwhile is collected once they are back. A :class:`HeapHold` keeps them out longer: a tracked run's
hold lasts from its first threaded feed to its end, so closing its cells and drawing its report do not walk them either
(one full pass there took 0.28 s). :func:`freeze_imports` does the same for what the command line imported, until a
run's hold takes it over, and :func:`importing` for what a large import adds to it; :func:`skip_final_collection` does
it for good just before a command-line process exits, so the interpreter does not walk the whole heap once more on its
way out.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "HeapHold", "freeze_imports", "frozen_heap", "importing", "skip_final_collection"]

#: the heap is frozen by :func:`freeze_imports` (this module's, so a run's hold may take it over), not by the process
_imports_frozen = False


#: while a run holds the heap, the youngest generation is collected after this many new objects (Python's default:
#: 700): at 64 threads and 1,319 items the collector's time fell from 0.35–0.45 s to 0.20–0.29 s during the items, and
#: from 0.14 s to 0.03 s while the cells closed and the report was drawn
YOUNG_THRESHOLD = 10_000


class HeapHold:
    """The heap as it was at the first :meth:`freeze` out of the collector's passes until :meth:`release` (what is made
    after, garbage of a compile between two feeds included, stays in their reach: a later :meth:`freeze` adds nothing).
    Meanwhile the youngest generation is collected less often (:data:`YOUNG_THRESHOLD`). A process whose collector is
    off, or that froze objects itself (or whose enclosing run holds the heap), is left as it is: this hold then holds
    nothing and releases nothing."""

    def __init__(self) -> None:
        self.held = False
        self._thresholds = gc.get_threshold()

    def freeze(self) -> None:
        global _imports_frozen
        if not self.held and gc.isenabled() and (_imports_frozen or not gc.get_freeze_count()):
            gc.freeze()
            self.held, _imports_frozen = True, False  # what the imports froze is this hold's to release now
            self._thresholds = gc.get_threshold()
            gc.set_threshold(max(self._thresholds[0], YOUNG_THRESHOLD), *self._thresholds[1:])

    def release(self) -> None:
        if self.held:
            self.held = False
            gc.set_threshold(*self._thresholds)
            gc.unfreeze()


@contextmanager
def frozen_heap(hold: HeapHold | None = None) -> Iterator[None]:
    """Inside the block, the objects alive at its start are not walked by the garbage collector; after it, they are
    again, or — given ``hold`` — when ``hold`` is released. A process whose collector is off, or that froze objects
    itself (or an enclosing run did), is left as it is."""
    own = hold if hold is not None else HeapHold()
    own.freeze()
    try:
        yield
    finally:
        if hold is None:
            own.release()


def freeze_imports() -> None:
    """For a command-line process, first thing: what its imports made (most of its heap) is left out of the
    collector's passes while the command sets up (0.5 s of full passes before a tracked run's first call). The first
    run that freezes the heap takes it over and gives it back when it ends."""
    global _imports_frozen
    if gc.isenabled() and not gc.get_freeze_count():
        gc.freeze()
        _imports_frozen = True


@contextmanager
def importing() -> Iterator[None]:
    """Around a large import (MLflow and its SQL store: about a million objects, and four full passes of the
    collector while they load): the collector is off meanwhile; what it made joins the command line's frozen imports
    when there are such, else the collector's youngest generation."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        if _imports_frozen:
            gc.freeze()


def skip_final_collection() -> None:
    """For a process about to exit (the command line's last step): every object alive is left out of the
    interpreter's last collections at shutdown, which walk the whole heap (1.5 s after a 1,319-item run). Exit
    handlers still run and files opened by the run are already closed; what is skipped is freeing, one by one, what
    the operating system frees at once."""
    global _imports_frozen
    gc.freeze()
    _imports_frozen = False  # frozen for good: no run takes it over
