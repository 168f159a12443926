"""A user's own JSONL data: read and checked (the bad line named), registered as a dataset every run can name, its
metric and signature chosen from the answers' type (numbers → the numeric rule and ``answer: float``; otherwise
normalized exact match and ``answer: str``)."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from dspy_for.datasets import DATASETS, dataset_info, load_dataset, register_jsonl, signature_for
from dspy_for.datasets.user import answer_type, is_number
from dspy_for.errors import DatasetError
from dspy_for.metrics import exact_match, metric_for, numeric_match


def _jsonl(tmp_path: Path, name: str, rows: list[object] | str) -> Path:
    path = tmp_path / name
    path.write_text(rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_numeric_answers_get_the_numeric_rule_and_a_float_signature(tmp_path):
    rows = [{"question": "2 + 3?", "answer": 5}, {"question": "Half of 3?", "answer": "1.5"}]
    info = register_jsonl(_jsonl(tmp_path, "My Sums.jsonl", rows))
    assert info.name == "jsonl_my_sums" and info.splits == ("all",) and info.answer_type == "float"
    assert signature_for(info.name) == "question -> answer: float" and metric_for(info.name) is numeric_match
    examples = load_dataset(info.name, "all")
    assert [ex.question for ex in examples] == ["2 + 3?", "Half of 3?"]
    assert examples[1].id == "jsonl_my_sums/all/1" and examples[1].source.startswith("file:")
    assert set(examples[0].inputs().keys()) == {"question"}
    assert metric_for(info.name)(examples[1], dspy.Prediction(answer="1.50"))
    assert info.name not in DATASETS and dataset_info(info.name) is info  # beside the benchmarks, not among them


def test_any_text_answer_makes_it_normalized_exact_match_with_a_str_signature(tmp_path):
    rows = [{"question": "Capital of France?", "answer": "Paris"}, {"question": "2 + 2?", "answer": 4}]
    info = register_jsonl(_jsonl(tmp_path, "mixed.jsonl", rows))
    assert info.answer_type == "str" and info.metric == "exact_match"
    assert signature_for(info.name) == "question -> answer: str" and metric_for(info.name) is exact_match
    paris, four = load_dataset(info.name, "all")
    assert exact_match(paris, dspy.Prediction(answer="The  paris!"))  # case, punctuation, articles, spaces
    assert not exact_match(paris, dspy.Prediction(answer="Paris, France"))
    assert exact_match(four, dspy.Prediction(answer="4")) and not exact_match(four, dspy.Prediction(answer=None))


@pytest.mark.parametrize(
    ("value", "number"),
    [
        *[(5, True), (2.5, True), ("42", True), (" -3.5 ", True), ("1,250", True), (".5", True)],
        *[(True, False), ("$5", False), ("5 apples", False), ("1,25", False), ("", False), (float("nan"), False)],
    ],
)
def test_what_counts_as_a_number(value, number):
    assert is_number(value) is number


def test_one_text_answer_among_numbers_makes_the_type_text():
    assert answer_type([{"answer": 1}, {"answer": "2"}]) == "float"
    assert answer_type([{"answer": 1}, {"answer": "two"}]) == "str"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"question": "a?", "answer": 1}\n{"question": "b?"}\n', r"line 2: no `answer`"),
        ('{"answer": 1}\n', r"line 1: no `question`"),
        ('{"question": "a?", "answer": 1}\nnot json\n', r"line 2: not valid JSON"),
        ('["a?", 1]\n', r"line 1: expected a JSON object"),
        ('{"question": "  ", "answer": 1}\n', r"`question` must be a non-empty string"),
        ('{"question": "a?", "answer": [1, 2]}\n', r"`answer` must be a non-empty string or a number"),
        ('{"question": "a?", "answer": true}\n', r"`answer` must be a non-empty string or a number"),
        ("\n\n", r"has no items"),
    ],
)
def test_a_bad_file_names_the_line_and_the_fix(tmp_path, text, message):
    with pytest.raises(DatasetError, match=message):
        register_jsonl(_jsonl(tmp_path, "bad.jsonl", text))


def test_a_missing_file_says_what_to_pass(tmp_path):
    with pytest.raises(DatasetError, match=r"does not exist. Pass a JSONL file .* `question` and `answer`"):
        register_jsonl(tmp_path / "nope.jsonl")


def test_blank_lines_are_skipped_and_a_re_registered_file_is_read_again(tmp_path):
    path = _jsonl(tmp_path, "grow.jsonl", '{"question": "a?", "answer": 1}\n\n   \n')
    name = register_jsonl(path).name
    assert len(load_dataset(name, "all")) == 1
    path.write_text('{"question": "a?", "answer": 1}\n{"question": "b?", "answer": "x"}\n')
    assert register_jsonl(path).answer_type == "str" and len(load_dataset(name, "all")) == 2
    with pytest.raises(DatasetError, match="Unknown split `test`"):
        load_dataset(name, "test")
