from __future__ import annotations

import json
import logging
import time

import dspy
import pytest

from dspy_for.datasets import DATASETS, data_hash, dataset_info, load_dataset
from dspy_for.errors import DatasetError
from dspy_for.metrics import extract_number


def test_bundled_sample_is_offline_and_well_formed():
    examples = load_dataset("gsm8k", "sample")
    assert len(examples) >= 40
    assert len({ex.id for ex in examples}) == len(examples)
    for ex in examples:
        assert set(ex.inputs().keys()) == {"question"}
        assert ex.source == "bundled sample"
        assert isinstance(ex.answer, float)
        # the worked solution's marker agrees with the typed gold answer
        assert extract_number(ex.gold_solution) == ex.answer


def test_source_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="dspy_for.datasets"):
        load_dataset("gsm8k", "sample", limit=3)
    assert "bundled sample" in caplog.text


def test_limit_is_a_seeded_stable_subsample():
    a = load_dataset("gsm8k", "sample", limit=10, seed=1)
    b = load_dataset("gsm8k", "sample", limit=10, seed=1)
    c = load_dataset("gsm8k", "sample", limit=10, seed=2)
    assert [x.id for x in a] == [x.id for x in b]
    assert [x.id for x in a] != [x.id for x in c]
    assert data_hash(a) == data_hash(b) != data_hash(c)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: load_dataset("gsm9k", "val"), "Unknown dataset `gsm9k`"),
        (lambda: load_dataset("gsm8k", "dev"), "Unknown split `dev`"),
        (lambda: load_dataset("gsm8k", "sample", limit=0), "`limit`"),
        (lambda: load_dataset("gsm8k", "val", data_dir="/nonexistent/dir"), "does not exist"),
    ],
)
def test_bad_arguments_are_clear_errors(call, message):
    with pytest.raises(DatasetError, match=message):
        call()


def test_no_source_is_an_error_not_a_silent_fallback(monkeypatch):
    monkeypatch.delenv("DSPY_FOR_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(DatasetError, match="split='sample'"):
        load_dataset("gsm8k", "val")
    assert time.perf_counter() - start < 5


def _write(tmp_path, rel, text):
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_malformed_row_names_file_line_and_field(tmp_path):
    _write(
        tmp_path,
        "gsm8k/train.jsonl",
        json.dumps({"question": "q", "answer": "x\n#### 3"}) + "\n" + json.dumps({"question": "q2"}) + "\n",
    )
    with pytest.raises(DatasetError, match=r"train.jsonl, line 2: missing field `answer`"):
        load_dataset("gsm8k", "train", data_dir=tmp_path)


def test_non_numeric_gsm8k_answer(tmp_path):
    _write(tmp_path, "gsm8k/train.jsonl", json.dumps({"question": "q", "answer": "x\n#### seven"}) + "\n")
    with pytest.raises(DatasetError, match="line 1.*not a number"):
        load_dataset("gsm8k", "train", data_dir=tmp_path)


def test_empty_and_missing_files(tmp_path):
    _write(tmp_path, "gsm8k/train.jsonl", "")
    with pytest.raises(DatasetError, match="empty"):
        load_dataset("gsm8k", "train", data_dir=tmp_path)
    with pytest.raises(DatasetError, match="Missing file"):
        load_dataset("gsm8k", "test", data_dir=tmp_path)
    with pytest.raises(DatasetError, match="Missing file"):
        load_dataset("bbh_object_counting", "val", data_dir=tmp_path)


def test_svamp_and_aqua_formats(tmp_path):
    svamp = [
        {
            "ID": f"c{i}",
            "Body": f"Tom has {i} apples.",
            "Question": "How many apples does he have?",
            "Equation": f"( {i} )",
            "Answer": float(i),
            "Type": "x",
        }
        for i in range(1000)
    ]
    _write(tmp_path, "svamp/SVAMP.json", json.dumps(svamp))
    test = load_dataset("svamp", "test", data_dir=tmp_path)
    assert len(test) == 1000 and test[3].question == "Tom has 3 apples. How many apples does he have?"
    assert len(load_dataset("svamp", "train", data_dir=tmp_path)) == 200
    assert len(load_dataset("svamp", "val", data_dir=tmp_path)) == 300
    row = {"question": "2+2?", "options": ["A)3", "B)4", "C)5", "D)6", "E)7"], "rationale": "r", "correct": "B"}
    _write(tmp_path, "aqua/test.json", json.dumps(row) + "\n" + json.dumps({**row, "correct": "Z"}) + "\n")
    with pytest.raises(DatasetError, match="line 2: field `correct`"):
        load_dataset("aqua", "test", data_dir=tmp_path)


def test_real_gsm8k_split_equals_dspy_own_split_logic(shared_datasets, monkeypatch):
    """Run dspy.datasets.gsm8k.GSM8K's own code on the same raw rows and compare every split."""
    import datasets as hf
    from dspy.datasets.gsm8k import GSM8K

    rows = [json.loads(line) for line in (shared_datasets / "gsm8k" / "train.jsonl").read_text().splitlines()]
    monkeypatch.setattr(hf, "load_dataset", lambda *a, **k: {"train": rows, "test": rows[:50]})
    ref = GSM8K()
    ours = {s: load_dataset("gsm8k", s, data_dir=shared_datasets) for s in ("train", "val")}
    assert len(ours["train"]) == 200 and len(ours["val"]) == 300
    for split, theirs in (("train", ref.train), ("val", ref.dev)):
        assert [e.question for e in ours[split]] == [e.question for e in theirs]
        assert [e.answer for e in ours[split]] == [float(e.answer) for e in theirs]


def test_real_bbh_and_aqua(shared_datasets):
    oc = {s: load_dataset("bbh_object_counting", s, data_dir=shared_datasets) for s in ("train", "val", "test")}
    assert [len(v) for v in oc.values()] == [50, 100, 100]
    assert all(isinstance(e.answer, int) for e in oc["val"])
    ws = load_dataset("bbh_word_sorting", "test", data_dir=shared_datasets)
    assert len(ws) == 100 and isinstance(ws[0].answer, str)
    aqua = load_dataset("aqua", "val", data_dir=shared_datasets)
    assert len(aqua) == 254 and aqua[0].answer in "ABCDE" and "Options:" in aqua[0].question


def test_env_var_data_dir(shared_datasets, monkeypatch):
    monkeypatch.setenv("DSPY_FOR_DATA_DIR", str(shared_datasets))
    ex = load_dataset("gsm8k", "val", limit=3)
    assert ex[0].source.startswith("local:")


def test_registry_describes_every_dataset():
    for name in DATASETS:
        info = dataset_info(name)
        assert info.metric and info.splits and info.files
    assert dataset_info("object_counting").name == "bbh_object_counting"
    assert isinstance(load_dataset("gsm8k", "sample")[0], dspy.Example)
