"""The upstream file formats of the five benchmarks: reading and checking a data directory's files (jsonl,
BBH and SVAMP json), parsing each benchmark's rows into ``question`` / ``answer`` (GSM8K, BBH, SVAMP, AQuA)
with the papers' splits, and the GSM8K sample bundled with dspy-for.

:data:`LOCAL_READERS` maps a dataset name to the reader of its files in a data directory. Which source is
used is decided in :mod:`dspy_for.datasets.loaders`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from dspy_for.errors import DatasetError, DspyForError

__all__ = [
    "LOCAL_READERS",
    "aqua_row",
    "bbh_rows",
    "gsm8k_parse",
    "gsm8k_rows",
    "read_bundled_sample",
    "read_utf8",
    "svamp_rows",
]


# --------------------------------------------------------------------------------------------- files


def read_bundled_sample() -> list[dict]:
    text = resources.files("dspy_for.datasets").joinpath("data/gsm8k_sample.jsonl").read_text()
    return gsm8k_parse(_parse_jsonl_text(text, "gsm8k_sample.jsonl (bundled)"), "gsm8k_sample.jsonl (bundled)")


def read_utf8(path: Path, error: type[DspyForError] = DatasetError) -> str:
    """The text of a data (or config) file, a UTF-8 byte-order mark allowed; bytes that are not UTF-8 are an ``error``
    naming their line and the fix."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(
            f"{path}, line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); save it as UTF-8 "
            f"(e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed.jsonl`, if it is Latin-1)."
        ) from None


def _read_jsonl(path: Path) -> list[dict]:
    _check_file(path)
    return _parse_jsonl_text(read_utf8(path), str(path))


def _parse_jsonl_text(text: str, where: str) -> list[dict]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}, line {lineno}: not valid JSON ({exc.msg}).") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{where}, line {lineno}: expected a JSON object, got {type(row).__name__}.")
        row["_line"] = lineno
        rows.append(row)
    if not rows:
        raise DatasetError(f"{where} is empty: expected one JSON object per line.")
    return rows


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise DatasetError(f"Missing file `{path}`. Put the upstream file there or fix `data_dir`.")
    if path.stat().st_size == 0:
        raise DatasetError(f"File `{path}` is empty. Re-download the upstream file.")


def _field(row: dict, key: str, where: str, line: int | str) -> Any:
    if key not in row or row[key] in (None, ""):
        raise DatasetError(f"{where}, line {line}: missing field `{key}`.")
    return row[key]


# -------------------------------------------------------------------------------------------- GSM8K

_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)


def gsm8k_parse(rows: list[dict], where: str) -> list[dict]:
    out = []
    for i, row in enumerate(rows):
        line = row.get("_line", i + 1)
        question = _field(row, "question", where, line)
        solution = str(_field(row, "answer", where, line))
        m = _GSM8K_ANSWER.search(solution.strip())
        if not m:
            raise DatasetError(f"{where}, line {line}: field `answer` has no `#### N` final answer.")
        raw = m.group(1).replace(",", "").strip()
        try:
            value = float(raw)
        except ValueError:
            raise DatasetError(
                f"{where}, line {line}: field `answer` ends with `#### {m.group(1)}`, which is not a number."
            ) from None
        out.append({"question": question, "answer": value, "gold_solution": solution.strip()})
    return out


def gsm8k_rows(rows: list[dict], split: str) -> list[dict]:
    """DSPy's ``dspy.datasets.gsm8k.GSM8K`` split logic (also TextGrad's ``GSM8K_DSPy``)."""
    if split == "sample":
        return rows
    rows = list(rows)
    random.Random(0).shuffle(rows)
    if split == "train":
        return rows[:200]
    if split == "val":
        return rows[200:500]
    return rows  # test: the official test file, shuffled with Random(0) as DSPy does


def _gsm8k_local(directory: Path, split: str) -> list[dict]:
    path = directory / "gsm8k" / ("test.jsonl" if split == "test" else "train.jsonl")
    if not path.is_file() and (directory / path.name).is_file():
        path = directory / path.name
    return gsm8k_rows(gsm8k_parse(_read_jsonl(path), str(path)), split)


# ---------------------------------------------------------------------------------------------- BBH


def bbh_rows(name: str, examples: list[dict], split: str) -> list[dict]:
    part = {"train": examples[:50], "val": examples[50:150], "test": examples[150:]}[split]
    out = []
    for ex in part:
        target = str(ex["target"]).strip()
        answer: Any = target
        if name == "bbh_object_counting":
            try:
                answer = int(target)
            except ValueError:
                raise DatasetError(f"BBH object counting target `{target}` is not an integer.") from None
        out.append({"question": ex["input"], "answer": answer})
    return out


def _bbh_local(name: str) -> Callable[[Path, str], list[dict]]:
    task = name.removeprefix("bbh_")

    def load(directory: Path, split: str) -> list[dict]:
        path = directory / "bbh" / f"{task}.json"
        _check_file(path)
        try:
            data = json.loads(read_utf8(path))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg}).") from None
        examples = data.get("examples") if isinstance(data, dict) else None
        if not examples:
            raise DatasetError(f"{path}: missing or empty field `examples`.")
        for i, ex in enumerate(examples):
            for key in ("input", "target"):
                if key not in ex:
                    raise DatasetError(f"{path}, example {i}: missing field `{key}`.")
        return bbh_rows(name, examples, split)

    return load


# -------------------------------------------------------------------------------------------- SVAMP


def svamp_rows(rows: list[dict], split: str, where: str) -> list[dict]:
    out = []
    for i, row in enumerate(rows):
        body = _field(row, "Body", where, i + 1)
        question = _field(row, "Question", where, i + 1)
        try:
            answer = float(_field(row, "Answer", where, i + 1))
        except (TypeError, ValueError):
            raise DatasetError(f"{where}, item {i + 1}: field `Answer` is not a number.") from None
        out.append(
            {
                "question": f"{str(body).strip()} {str(question).strip()}",
                "answer": answer,
                "gold_solution": str(row.get("Equation", "")),
            }
        )
    if split == "test":
        return out
    shuffled = list(out)
    random.Random(0).shuffle(shuffled)
    return shuffled[:200] if split == "train" else shuffled[200:500]


def _svamp_local(directory: Path, split: str) -> list[dict]:
    candidates = [directory / "svamp" / "SVAMP.json", directory / "svamp" / "svamp.json", directory / "SVAMP.json"]
    path = next((p for p in candidates if p.is_file()), candidates[0])
    _check_file(path)
    try:
        data = json.loads(read_utf8(path))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg}).") from None
    if not isinstance(data, list) or not data:
        raise DatasetError(f"{path}: expected a non-empty JSON list of problems.")
    return svamp_rows(data, split, str(path))


# -------------------------------------------------------------------------------------------- AQuA

_LETTERS = ("A", "B", "C", "D", "E")


def aqua_row(row: dict, where: str, line: int | str) -> dict:
    question = _field(row, "question", where, line)
    options = _field(row, "options", where, line)
    correct = str(_field(row, "correct", where, line)).strip().upper()
    if correct not in _LETTERS:
        raise DatasetError(f"{where}, line {line}: field `correct` must be one of A-E, got {correct!r}.")
    if not isinstance(options, list) or len(options) < 2:
        raise DatasetError(f"{where}, line {line}: field `options` must be a list of choices like 'A)12'.")
    text = f"{str(question).strip()}\nOptions: " + " ".join(str(o) for o in options)
    return {
        "question": text,
        "answer": correct,
        "options": list(options),
        "gold_solution": str(row.get("rationale", "")),
    }


def _aqua_local(directory: Path, split: str) -> list[dict]:
    fname = {"train": "train.json", "val": "dev.json", "test": "test.json"}[split]
    path = directory / "aqua" / fname
    _check_file(path)
    return [aqua_row(r, str(path), r["_line"]) for r in _read_jsonl(path)]


LOCAL_READERS: dict[str, Callable[[Path, str], list[dict]]] = {
    "gsm8k": _gsm8k_local,
    "bbh_object_counting": _bbh_local("bbh_object_counting"),
    "bbh_word_sorting": _bbh_local("bbh_word_sorting"),
    "svamp": _svamp_local,
    "aqua": _aqua_local,
}
