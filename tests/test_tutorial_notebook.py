"""``docs/tutorial.ipynb`` runs, top to bottom, on the scripted LM it starts with — on a Jupyter kernel of the
Python running this test (registered in a temporary directory, so it works in any fresh ``.venv``) — and shows what it
says it shows: the comparison's table as HTML, the frames, a plot, the results loaded back."""

from __future__ import annotations

from pathlib import Path

import nbformat
from ipykernel.kernelspec import install
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"
KERNEL = "dspy-for-tutorial-test"


def _outputs(cell: nbformat.NotebookNode, mime: str) -> str:
    return "".join(str(o.get("data", {}).get(mime, "")) for o in cell.get("outputs", []))


def test_the_tutorial_runs_on_the_scripted_lm(tmp_path, monkeypatch):
    install(kernel_name=KERNEL, prefix=str(tmp_path / "jupyter"))  # this Python, whatever the machine's kernels
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter" / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # connection files: nothing in $HOME
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    assert 'USE = "scripted"' in nb.cells[1].source  # it starts on the scripted LM
    client = NotebookClient(
        nb, kernel_name=KERNEL, timeout=240, resources={"metadata": {"path": str(tmp_path)}}, allow_errors=False
    )
    client.execute()  # a failing cell raises CellExecutionError, naming it
    code = [c for c in nb.cells if c.cell_type == "code"]
    table = next(c for c in code if "result = compare(spec)" in c.source)
    assert "<caption>gsm8k — baseline: cot</caption>" in _outputs(table, "text/html")
    items = next(c for c in code if "items = result.to_pandas()" in c.source)
    assert "for_n1" in _outputs(items, "text/html") and "tokens" in _outputs(items, "text/html")
    plot = next(c for c in code if "errorbar" in c.source)
    assert _outputs(plot, "image/png"), "the plot cell shows no figure"
    assert (tmp_path / "cells.csv").is_file() and "for_n1" in (tmp_path / "cells.csv").read_text()
