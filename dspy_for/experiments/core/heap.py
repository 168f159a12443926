"""The garbage collector around a run: what was alive when its threads started is left out of the collector's passes
while they run.

A run's heap is mostly what exists before its first item: the modules of DSPy, MLflow and their dependencies, the
program, the data (300,000–450,000 objects for a CoT run). CPython's collector walks all of it on every full pass,
and each pass holds the interpreter lock that the item threads need: at 64 threads and 1,319 items, nine full passes
took 1.3–1.6 s of a 20 s run. :func:`frozen_heap` moves those objects out of the collector's reach for the run
(:func:`gc.freeze`) and back after (:func:`gc.unfreeze`), so the collector walks only what the run itself makes; what
became garbage meanwhile is collected once they are back. :func:`skip_final_collection` does the same for good just
before a command-line process exits, so the interpreter does not walk the whole heap once more on its way out.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_heap", "skip_final_collection"]


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Inside the block, the objects alive at its start are not walked by the garbage collector; after it, they are
    again. A process whose collector is off, or that froze objects itself (or an enclosing run did), is left as it
    is."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def skip_final_collection() -> None:
    """For a process about to exit (the command line's last step): every object alive is left out of the
    interpreter's last collections at shutdown, which walk the whole heap (1.5 s after a 1,319-item run). Exit
    handlers still run and files opened by the run are already closed; what is skipped is freeing, one by one, what
    the operating system frees at once."""
    gc.freeze()
