"""A results-file line that is not a record — bytes that are not UTF-8, JSON that is not an object, an object that is
not a record — never stops a store: ``compare`` sets it aside, byte for byte, into ``<file>.unreadable`` beside the
store (the warning names it) and runs its item again; every other record and cell is untouched; ``load_results`` and
``export`` read around it the same way, writing nothing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cli_processes import compare_args, respond
from cot_and_for import config
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments import compare, load_results
from dspy_for.experiments.core import ResultStore
from dspy_for.experiments.results import read_records
from dspy_for.testing import OpenAICompatibleServer, for_responder

BINARY = b"\xff\xfe\x00\x9cnot a record\x80"
JSON_LIST = b'[{"id": "x"}, 2]'
OTHER_SHAPE = b'{"id": "gsm8k-0", "question": "What?", "gold": 1, "prediction": "36", "score": "high"}'
NOT_A_RECORD = b'{"name": "a line some other tool wrote"}'
BAD = [BINARY, JSON_LIST, OTHER_SHAPE, NOT_A_RECORD]


@pytest.fixture
def scripted(install_scripted_lm):
    lm = install_scripted_lm(for_responder())
    lm.model = "openai/fake-model"
    return lm


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'tracking_uri = "sqlite:///{tmp_path}/mlruns/mlflow.db"\n' + config("lines"), encoding="utf-8")
    return path


def _stores(tmp_path: Path) -> dict[str, Path]:
    return {p.name.split(".")[0]: p for p in (tmp_path / "mlruns").rglob("*.jsonl") if p.parent.name == "sample"}


def _spoil(store: Path) -> tuple[bytes, bytes]:
    """The store with its second record replaced by binary bytes and three other bad lines inserted; (the record
    taken out, the store's bytes as spoiled)."""
    lines = store.read_bytes().splitlines(keepends=True)
    taken = lines[1]
    spoiled = [lines[0], BINARY + b"\n", JSON_LIST + b"\n", lines[2], OTHER_SHAPE + b"\n", NOT_A_RECORD + b"\n"]
    data = b"".join(spoiled + lines[3:])
    store.write_bytes(data)
    return taken, data


def test_bad_lines_are_set_aside_byte_for_byte_and_their_item_runs_again(scripted, tmp_path, caplog):
    cfg = _config(tmp_path)
    first = compare(cfg)
    stores = _stores(tmp_path)
    cot, other = stores["cot"], stores["for_n1"]
    other_bytes = other.read_bytes()
    taken, _ = _spoil(cot)

    with caplog.at_level(logging.WARNING, logger="dspy_for"):
        again = compare(cfg)

    aside = cot.with_name(cot.name + ".unreadable")
    assert aside.read_bytes() == b"".join(line + b"\n" for line in BAD)  # kept whole, in order
    assert str(aside.name) in caplog.text and "4 line(s)" in caplog.text
    lines = cot.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4 and all(json.loads(line)["question"] for line in lines)
    assert json.loads(lines[-1])["question"] == json.loads(taken)["question"]  # its item ran again, appended
    assert other.read_bytes() == other_bytes  # the other cell's store is untouched
    assert again.results["gsm8k"]["cot"].n_scored == 4
    assert [r["accuracy"] for r in again.rows] == [r["accuracy"] for r in first.rows]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dspy_for"):
        compare(cfg)  # nothing left to set aside: the side file is not written twice
    assert aside.read_bytes() == b"".join(line + b"\n" for line in BAD)
    assert "unreadable" not in caplog.text


def test_load_results_and_export_read_around_bad_lines_and_write_nothing(scripted, tmp_path, caplog):
    cfg = _config(tmp_path)
    compare(cfg)
    cot = _stores(tmp_path)["cot"]
    _, spoiled = _spoil(cot)

    with caplog.at_level(logging.WARNING, logger="dspy_for"):
        loaded = load_results(cfg)
    assert loaded.results["gsm8k"]["cot"].n == 3 and loaded.missing["gsm8k"]["cot"] == 1
    assert "line 2" in caplog.text and cot.name in caplog.text
    assert len(read_records(cot)) == 3

    out = tmp_path / "items.csv"
    res = CliRunner().invoke(app, ["export", str(cfg), "--to", str(out)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and out.is_file()
    assert cot.read_bytes() == spoiled  # a reader sets nothing aside
    assert not cot.with_name(cot.name + ".unreadable").exists()


def test_a_store_reader_without_repair_reads_around_a_binary_line(tmp_path):
    store = ResultStore(tmp_path / "s.jsonl")
    record = {"id": "1", "question": "q", "gold": 1.0, "prediction": {"answer": "1"}, "score": 1.0}
    store.path.write_bytes(BINARY + b"\n" + json.dumps(record).encode() + b"\n")
    assert list(store.load(repair=False)) and store.path.read_bytes().startswith(BINARY)


def test_the_cli_runs_a_store_with_a_binary_line_without_a_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    with OpenAICompatibleServer(respond) as server:
        args = compare_args("cot", server, tmp_path)
        assert CliRunner().invoke(app, args).exit_code == 0
        store = next((tmp_path / "results").rglob("*.jsonl"))
        store.write_bytes(store.read_bytes() + BINARY + b"\n" + JSON_LIST + b"\n")
        before = len(server.requests)
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and "UnicodeDecodeError" not in res.output
    assert len(server.requests) == before  # every item was stored: nothing runs again
