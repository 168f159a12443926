"""``dspy-for``'s first step: a command that writes to the tracking store (``compare``, ``advise``) starts its tracking
process (:func:`~dspy_for.experiments.tracking.writer.start_tracking_process`) before it imports the rest of the
command line, so that process imports MLflow and opens the store while this one imports DSPy; then the command runs
(:func:`dspy_for.cli.main`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main", "start", "tracks"]

#: the commands that write to the tracking store
TRACKING_COMMANDS = frozenset({"compare", "advise"})
#: options with which those commands write nothing to it
UNTRACKED_FLAGS = frozenset({"--dry-run", "--help", "-h"})


def tracks(argv: Sequence[str]) -> bool:
    """Whether the command line ``argv`` (without the program's name) runs a command that writes to the tracking
    store."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return command in TRACKING_COMMANDS and not UNTRACKED_FLAGS.intersection(argv)


def start(argv: Sequence[str]) -> None:
    """What ``dspy-for`` does first, before it imports the rest of itself: the tracking process of a command that
    :func:`tracks` starts."""
    if tracks(argv):
        from dspy_for.experiments.tracking.writer import start_tracking_process

        start_tracking_process()


def main() -> None:
    start(sys.argv[1:])
    from dspy_for.cli import main as run

    run()
