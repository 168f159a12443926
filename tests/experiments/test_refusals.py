"""Every file-system and encoding refusal is exit 2 with one sentence naming the path and the fix, before any LM call
(the test server's request log stays empty), never a traceback: a results folder that is a file, that cannot be
created, or that cannot be written while the run has items to store; an MLflow store that cannot be written; data
that is not UTF-8 (with its line number). A complete store on a read-only disk needs no lock and no write: the table,
``export`` and ``load_results`` read it."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_processes import cli, compare_args, env, read_only_prefix, respond
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import DatasetError, PathError
from dspy_for.experiments import compare
from dspy_for.experiments.core import folders
from dspy_for.experiments.core import store as store_mod
from dspy_for.testing import OpenAICompatibleServer


@pytest.fixture
def server():
    with OpenAICompatibleServer(respond) as s:
        yield s


def _refused(res, server: OpenAICompatibleServer, *words: str) -> str:
    text = "".join(res.output.split())  # the console wraps long paths
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "Error:" not in text.replace("error:", "")
    assert server.requests == []  # before any LM call
    for word in words:
        assert "".join(word.split()) in text, (word, res.output)
    return text


def _invoke(argv: list[str], tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    return CliRunner().invoke(app, argv)


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    i = argv.index(flag)
    return [*argv[: i + 1], value, *argv[i + 2 :]]


def test_a_results_folder_that_is_a_file_is_refused_naming_it(server, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("not a folder")
    argv = _with(compare_args("cot", server, tmp_path), "--results-dir", str(tmp_path / "afile"))
    _refused(_invoke(argv, tmp_path, monkeypatch), server, str(tmp_path / "afile"), "is a file", "--results-dir")


def test_a_results_folder_that_cannot_be_created_is_refused_naming_it(server, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("not a folder")
    argv = _with(compare_args("cot", server, tmp_path), "--results-dir", str(tmp_path / "afile" / "results"))
    _refused(_invoke(argv, tmp_path, monkeypatch), server, str(tmp_path / "afile" / "results"), "--results-dir")


def test_an_mlflow_store_in_a_file_is_refused_naming_it(server, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("not a folder")
    argv = _with(compare_args("cot", server, tmp_path), "--tracking-uri", f"sqlite:///{tmp_path}/afile/mlflow.db")
    _refused(_invoke(argv, tmp_path, monkeypatch), server, str(tmp_path / "afile"), "--tracking-uri")


def test_data_that_is_not_utf8_is_refused_with_its_line_number(server, tmp_path, monkeypatch):
    data = tmp_path / "mine.jsonl"
    data.write_bytes(b'{"question": "2 + 3?", "answer": 5}\n{"question": "4 \xff 4?", "answer": 8}\n')
    argv = [a for a in compare_args("cot", server, tmp_path) if a not in ("gsm8k", "sample")]
    argv = [a for a in argv if a not in ("--dataset", "--split")] + ["--data", str(data)]
    _refused(_invoke(argv, tmp_path, monkeypatch), server, str(data), "line 2", "UTF-8")
    advise = ["advise", *(a for a in argv[argv.index("--lm") :] if a != "--no-match-budget")]
    _refused(_invoke(advise, tmp_path, monkeypatch), server, str(data), "line 2", "UTF-8")


def test_a_benchmark_file_that_is_not_utf8_is_refused_with_its_line_number(server, tmp_path, monkeypatch):
    folder = tmp_path / "data" / "gsm8k"
    folder.mkdir(parents=True)
    rows = [json.dumps({"question": f"{i} + {i}?", "answer": f"#### {2 * i}"}).encode() for i in range(1, 4)]
    rows[2] = rows[2].replace(b"?", b"\xe9?")  # Latin-1, not UTF-8
    (folder / "test.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    argv = [*_with(compare_args("cot,for", server, tmp_path), "--split", "test"), "--data-dir", str(tmp_path / "data")]
    _refused(_invoke(argv, tmp_path, monkeypatch), server, str(folder / "test.jsonl"), "line 3", "UTF-8")


def test_a_config_that_is_not_utf8_is_refused_with_its_line_number(server, tmp_path, monkeypatch):
    config = tmp_path / "c.toml"
    config.write_bytes(b'experiment = "x"\n# caf\xe9\n')
    _refused(_invoke(["compare", str(config)], tmp_path, monkeypatch), server, str(config), "line 2", "UTF-8")


def test_a_reader_names_the_line_of_bytes_that_are_not_utf8(tmp_path):
    from dspy_for.datasets.user import read_user_rows

    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"question": "a?", "answer": 1}\n\n{"question": "b\xc3?", "answer": 2}\n')
    with pytest.raises(DatasetError, match=r"line 3: .*not UTF-8.*save it as UTF-8"):
        read_user_rows(path)


# ------------------------------------------------------------------------------------------ read-only disks


@pytest.mark.parametrize(
    ("folder", "says"),
    [("results", ["--results-dir", "3 item(s) to store"]), ("mlruns", ["--tracking-uri"])],
    ids=["results-folder", "mlflow-store"],
)
def test_a_folder_on_a_read_only_disk_with_something_to_write_is_refused(server, tmp_path, folder, says):
    read_only = tmp_path / folder
    read_only.mkdir()
    code, out = cli(compare_args("cot", server, tmp_path), tmp_path, read_only_prefix(read_only, tmp_path))
    text = " ".join(out.split())
    assert code == 2, out
    assert "Traceback" not in out and str(read_only) in text and all(s in text for s in says), out
    assert server.requests == []


def test_a_complete_store_on_a_read_only_disk_is_read_without_a_lock(server, tmp_path):
    argv = compare_args("cot,for", server, tmp_path)
    code, out = cli(argv, tmp_path)
    assert code == 0, out
    ran = len(server.requests)
    results = tmp_path / "results"
    for lock in results.rglob("*.lock"):
        lock.unlink()  # a disk made read-only after the run: no lock file to open
    before = {p: p.read_bytes() for p in results.rglob("*") if p.is_file()}
    prefix = read_only_prefix(results, tmp_path)

    code, out = cli(argv, tmp_path, prefix)  # the table: every item stored, nothing to run or write
    assert code == 0, out
    assert "Traceback" not in out and "cot" in out and "for" in out
    assert len(server.requests) == ran

    export = ["export", "--to", str(tmp_path / "items.csv"), *argv[1:]]
    code, out = cli(export, tmp_path, prefix)
    assert code == 0, out
    assert (tmp_path / "items.csv").read_text().count("\n") == 7  # a header, 3 items × 2 methods

    script = (
        "from dspy_for.experiments import load_results, ExperimentSpec, DatasetConfig, MethodConfig\n"
        f"spec = ExperimentSpec(lm='openai/test-model', lm_options={{'api_base': {server.base_url!r}, "
        "'num_retries': 0}, datasets=[DatasetConfig('gsm8k', 'sample', first=3)], "
        "methods=[MethodConfig('cot'), MethodConfig('for')], match_budget=False)\n"
        f"r = load_results(spec, {str(results)!r})\n"
        "print('loaded', sum(c.n for c in r.results['gsm8k'].values()))\n"
    )
    done = subprocess.run(
        [*prefix, sys.executable, "-c", script], cwd=tmp_path, env=env(tmp_path), text=True, capture_output=True
    )
    assert done.returncode == 0 and "loaded 6" in done.stdout, done.stdout + done.stderr
    assert {p: p.read_bytes() for p in results.rglob("*") if p.is_file()} == before  # nothing written


def test_a_store_whose_lock_cannot_be_made_is_read_when_nothing_is_left_to_run(
    install_scripted_lm, tmp_path, monkeypatch
):
    """The same in one process, the disk's refusals simulated: the lock file and the folder probe fail with EROFS."""
    from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig
    from dspy_for.testing import for_responder

    lm = install_scripted_lm(for_responder())

    def spec() -> ExperimentSpec:
        return ExperimentSpec(
            lm="openai/fake-model",
            datasets=[DatasetConfig("gsm8k", "sample", first=3)],
            methods=[MethodConfig("cot"), MethodConfig("for", "for_n1", {"rounds": 1})],
            tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
            results_dir=str(tmp_path / "results"),
        )

    first = compare(spec())
    calls = len(lm.calls)

    def read_only(path, *args, **kwargs):
        if "results" in str(path):
            raise OSError(errno.EROFS, "Read-only file system")
        return probe(path)

    probe = folders.probe_write
    monkeypatch.setattr(folders, "probe_write", read_only)
    monkeypatch.setattr(store_mod, "open_lock", read_only)
    again = compare(spec())
    assert len(lm.calls) == calls
    assert [r["accuracy"] for r in again.rows] == [r["accuracy"] for r in first.rows]

    bigger = spec()
    bigger.datasets = [DatasetConfig("gsm8k", "sample", first=4)]
    with pytest.raises(PathError, match=r"2 item\(s\) to store"):  # the fourth item of each method
        compare(bigger)
    assert len(lm.calls) == calls
