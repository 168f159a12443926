"""A plot as plain data (:mod:`dspy_for.experiments.reports.sketch`): the calls recorded where it is made are the ones
matplotlib makes where it is drawn."""

from __future__ import annotations

import pickle

import pytest

from dspy_for.experiments.reports.sketch import Sketch, draw, save


def _frontier() -> Sketch:
    fig = Sketch(figsize=(6, 4))
    ax = fig.subplots()
    ax.errorbar([300.0], [0.5], yerr=[[0.1], [0.2]], fmt="o", capsize=4, label="cot")
    ax.set_xlabel("tokens per item")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    return fig


def test_a_drawn_sketch_is_the_figure_its_calls_make():
    fig = draw(_frontier())
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == (6.0, 4.0)
    assert ax.get_xlabel() == "tokens per item" and ax.get_ylim() == (-0.05, 1.05)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["cot"]
    (bars,) = ax.containers
    assert list(bars.lines[0].get_xdata()) == [300.0] and list(bars.lines[0].get_ydata()) == [0.5]


def test_a_sketch_of_several_axes_draws_each_in_its_place():
    fig = Sketch(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    right.set_title("right")
    left.set_xscale("log")
    drawn = draw(fig)
    assert [a.get_title() for a in drawn.axes] == ["", "right"]
    assert [a.get_xscale() for a in drawn.axes] == ["log", "linear"]
    assert drawn.get_layout_engine() is not None


def test_a_sketch_is_plain_data_that_crosses_a_process_and_saves_as_png(tmp_path):
    sketch = _frontier()
    again = pickle.loads(pickle.dumps(sketch))
    assert again == sketch
    save(again, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_call_matplotlib_does_not_know_fails_where_the_sketch_is_drawn():
    sketch = Sketch(figsize=(2, 2))
    sketch.subplots().no_such_method(1)
    with pytest.raises(AttributeError, match="no_such_method"):
        draw(sketch)
    with pytest.raises(AttributeError):
        _ = sketch.axes[0]._hidden  # private names are not recorded
