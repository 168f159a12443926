"""``docs/tutorial.ipynb`` runs, top to bottom, on the scripted LM it starts with — on a Jupyter kernel of the
Python running this test (registered in a temporary directory, so it works in any fresh ``.venv``) — and shows what it
says it shows: FOR-Prompting scored by ``dspy.Evaluate`` above chain of thought, compiled by BootstrapFewShot, the
comparison on the user's JSONL as an HTML table with a Δ, the frames and a paired analysis that agrees with the pair
frame, a plot, the results exported and loaded back with the same run, and the run and traces in MLflow."""

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

    def shown(marker: str, mime: str = "text/plain") -> str:
        cell = next(c for c in code if marker in c.source)
        return _outputs(cell, mime) + "".join(str(o.get("text", "")) for o in cell.get("outputs", []))

    assert "{'FOR-Prompting': 100.0, 'chain of thought': 75.0}" in shown("evaluate(Solver()).score")
    assert "'solve.defender': 2" in shown("compiler.compile(") and "100.0" in shown("compiler.compile(")
    table = shown("result = compare(spec", "text/html")
    assert "<caption>jsonl_tasks — baseline: cot</caption>" in table and "+33.3 (p=0.12)" in table
    assert "for_n1" in shown("items = result.to_pandas()", "text/html")
    assert "'mcnemar p': 0.125, 'pair frame p': np.float64(0.125)" in shown("mcnemar_exact(")
    assert _outputs(next(c for c in code if "errorbar" in c.source), "image/png"), "the plot cell shows no figure"
    assert "'same run': True, 'same traces': True" in shown("again = load_results")
    assert (tmp_path / "cells.csv").is_file() and "for_n1" in (tmp_path / "cells.csv").read_text()
    assert (tmp_path / "items.jsonl").is_file()
    spans = shown("client.get_trace(")
    assert "{'for_n1': 1.0, 'cot': 0.667}" in spans and "FORPrompting.debater r1" in spans
