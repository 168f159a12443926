"""A figure as plain data: the calls that draw it on a matplotlib ``Figure``'s axes, recorded where it is made, with
no matplotlib there, and replayed by :func:`draw` where it is drawn. The command line draws its plots in its
tracking process (:mod:`~dspy_for.experiments.tracking.runs`), which imports matplotlib while the run's items run, so
a comparison's own process never waits for matplotlib.

A recorded call returns nothing: code that makes a sketch keeps what it needs to know (whether it drew a curve) itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["DPI", "Sketch", "SketchAxes", "draw", "save", "warm"]

#: the resolution every plot is saved at
DPI = 120


@dataclass
class Sketch:
    """A figure of ``figsize`` inches (matplotlib's ``layout``) on a grid of ``shape`` axes, and the calls made on
    them in order: (axes index, method name, args, kwargs)."""

    figsize: tuple[float, float]
    layout: Literal["constrained", "compressed", "tight"] | None = None
    shape: tuple[int, int] = (1, 1)
    calls: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def subplots(self, nrows: int = 1, ncols: int = 1) -> Any:
        """The figure's axes, as ``Figure.subplots`` gives them: one, or a tuple of ``nrows * ncols``."""
        self.shape = (nrows, ncols)
        return self.axes[0] if nrows * ncols == 1 else tuple(self.axes)

    @property
    def axes(self) -> list[SketchAxes]:
        return [SketchAxes(self, i) for i in range(self.shape[0] * self.shape[1])]


class SketchAxes:
    """One axes of a :class:`Sketch`: any public method of matplotlib's ``Axes`` called on it is recorded."""

    def __init__(self, sketch: Sketch, index: int) -> None:
        self._sketch, self._index = sketch, index

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self._sketch.calls.append((self._index, name, args, kwargs))

        return record


def draw(sketch: Sketch) -> Any:
    """The matplotlib ``Figure`` the sketch records, made without pyplot (none is kept open after its caller drops it:
    a script or notebook may make many)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=sketch.figsize, layout=sketch.layout)
    axes = fig.subplots(*sketch.shape, squeeze=False).ravel()
    for index, name, args, kwargs in sketch.calls:
        getattr(axes[index], name)(*args, **kwargs)
    return fig


def save(sketch: Sketch, path: str | Path) -> None:
    """Draw ``sketch`` and write it to ``path`` (PNG at :data:`DPI`, cropped to what it shows)."""
    draw(sketch).savefig(path, dpi=DPI, bbox_inches="tight")


def warm() -> None:
    """Import what :func:`save` needs: matplotlib's figure and its PNG renderer."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure  # noqa: F401
