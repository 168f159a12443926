"""Loaders for the five benchmarks of the FOR-Prompting and ProRefine papers.

Sources, in order (never a silent fall-back: the source is logged and stored on every example):

1. an explicit directory (``data_dir=`` or ``$DSPY_FOR_DATA_DIR``) holding the upstream file formats;
2. the Hugging Face hub through ``datasets``, when it is reachable;
3. for GSM8K only, the sample bundled in this package (split ``sample``; also used for the other
   GSM8K splits' offline demo only when asked for explicitly with ``split="sample"``).

A user's own JSONL file joins the catalogue with :func:`register_jsonl` (as ``jsonl_<file stem>``, split ``all``;
its metric and signature follow its answers' type, see :mod:`dspy_for.datasets.user`).

This module holds the catalogue (:data:`DATASETS`), the choice of source and :func:`load_dataset`; the readers
and parsers of each benchmark's upstream files are in :mod:`dspy_for.datasets.formats`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import random
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import dspy

from dspy_for.datasets.formats import (
    LOCAL_READERS,
    aqua_row,
    bbh_rows,
    gsm8k_parse,
    gsm8k_rows,
    read_bundled_sample,
    svamp_rows,
)
from dspy_for.datasets.user import USER_SPLIT, answer_type, read_user_rows
from dspy_for.errors import DatasetError

__all__ = [
    "DATASETS",
    "USER_DATASETS",
    "DatasetInfo",
    "content_key",
    "data_hash",
    "dataset_info",
    "load_dataset",
    "register_jsonl",
    "signature_for",
]

logger = logging.getLogger("dspy_for.datasets")

DATA_DIR_ENV = "DSPY_FOR_DATA_DIR"


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    splits: tuple[str, ...]
    metric: str
    answer_type: str
    files: str
    description: str

    @property
    def signature(self) -> str:
        """The DSPy signature methods answer this dataset with (its gold answer's type)."""
        return _SIGNATURES[self.answer_type]

    @property
    def default_split(self) -> str:
        """The split a run takes when none is named: ``val`` where there is one (so nothing is tuned or chosen on
        test data, and a run stays small), else the first (``all`` for a user's file)."""
        return "val" if "val" in self.splits else self.splits[0]


_SIGNATURES = {
    "float": "question -> answer: float",
    "int": "question -> answer: int",
    "str": "question -> answer: str",
    # multiple choice: the adapters tell the LM the answer must be one of these letters, and a reply that is
    # none of them is unparsed (scored wrong), never read as some other option
    "str (A-E)": "question -> answer: Literal['A', 'B', 'C', 'D', 'E']",
}

DATASETS: dict[str, DatasetInfo] = {
    "gsm8k": DatasetInfo(
        "gsm8k",
        ("train", "val", "test", "sample"),
        "numeric_match",
        "float",
        "gsm8k/train.jsonl, gsm8k/test.jsonl",
        "Grade-school math. DSPy/TextGrad split: official train shuffled with random.Random(0); "
        "train = first 200, val = next 300; test = official 1,319 (shuffled the same way). "
        "`sample`: 45 GSM8K-style problems bundled with dspy-for.",
    ),
    "bbh_object_counting": DatasetInfo(
        "bbh_object_counting",
        ("train", "val", "test"),
        "integer_match",
        "int",
        "bbh/object_counting.json",
        "BIG-Bench Hard object counting; TextGrad split [:50] / [50:150] / [150:].",
    ),
    "bbh_word_sorting": DatasetInfo(
        "bbh_word_sorting",
        ("train", "val", "test"),
        "word_sort_match",
        "str",
        "bbh/word_sorting.json",
        "BIG-Bench Hard word sorting; TextGrad split [:50] / [50:150] / [150:].",
    ),
    "svamp": DatasetInfo(
        "svamp",
        ("train", "val", "test"),
        "numeric_match",
        "float",
        "svamp/SVAMP.json",
        "SVAMP, 1,000 problems, text = Body + ' ' + Question. No official split exists: shuffled with "
        "random.Random(0); train = first 200, val = next 300, test = all 1,000 (the papers report on all).",
    ),
    "aqua": DatasetInfo(
        "aqua",
        ("train", "val", "test"),
        "choice_match",
        "str (A-E)",
        "aqua/train.json, aqua/dev.json, aqua/test.json",
        "AQuA-RAT multiple choice. val = official dev (254), test = official test (254), train = official "
        "train (97,467; hub or a local train.json).",
    ),
}

_ALIASES = {"object_counting": "bbh_object_counting", "word_sorting": "bbh_word_sorting", "aqua_rat": "aqua"}
_HUB_IDS = {
    "gsm8k": ("openai/gsm8k", "main"),
    "bbh_object_counting": ("lukaemon/bbh", "object_counting"),
    "bbh_word_sorting": ("lukaemon/bbh", "word_sorting"),
    "svamp": ("ChilleD/SVAMP", None),
    "aqua": ("deepmind/aqua_rat", "raw"),
}


#: users' data files registered by :func:`register_jsonl`, by dataset name (the benchmarks stay in DATASETS)
USER_DATASETS: dict[str, DatasetInfo] = {}
_USER_FILES: dict[str, Path] = {}


def dataset_info(name: str) -> DatasetInfo:
    key = _ALIASES.get(name, name)
    if key in USER_DATASETS:
        return USER_DATASETS[key]
    if key not in DATASETS:
        raise DatasetError(f"Unknown dataset `{name}`. Choose one of: {', '.join(sorted(DATASETS))}.")
    return DATASETS[key]


def register_jsonl(path: str | os.PathLike[str]) -> DatasetInfo:
    """Make a user's JSONL file (``question`` and ``answer`` per line) a dataset every run can name: read and
    checked now (a bad line fails here, before anything runs), named ``jsonl_<file stem>`` with the one split
    ``all``, scored by the numeric rule when every answer is a number and by normalized exact match otherwise
    (:mod:`dspy_for.datasets.user`). Registering a file of the same stem again points the name at the new file."""
    p = Path(path).expanduser().resolve()
    rows = read_user_rows(p)
    kind = answer_type(rows)
    name = "jsonl_" + (re.sub(r"[^a-z0-9]+", "_", p.stem.lower()).strip("_") or "data")
    metric = "numeric_match" if kind == "float" else "exact_match"
    info = DatasetInfo(
        name,
        (USER_SPLIT,),
        metric,
        kind,
        str(p),
        f"{len(rows)} items of {p.name} (question / answer per line); {metric} on {kind} answers.",
    )
    USER_DATASETS[name], _USER_FILES[name] = info, p
    return info


def signature_for(name: str) -> str:
    """The signature of dataset ``name`` (``question -> answer: float`` for GSM8K, ``int`` for counting, ...)."""
    return dataset_info(name).signature


def content_key(question: object, gold: object) -> str:
    """A short hash of an item's content (its question and gold answer), independent of its position and of
    the directory it was read from: stored per-item results are keyed by it, so an edited data file re-runs
    exactly the items whose text or gold changed."""
    return _content_key(str(question), str(gold))


@functools.lru_cache(maxsize=1 << 16)  # asked for every record at every step of a run; the hash is the cost
def _content_key(question: str, gold: str) -> str:
    return hashlib.sha256(json.dumps([question, gold], ensure_ascii=False).encode()).hexdigest()[:16]


def load_dataset(
    name: str,
    split: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[dspy.Example]:
    """Load ``split`` of benchmark ``name`` as ``dspy.Example``s with input ``question`` and gold ``answer``.

    ``limit`` takes a seeded uniform sample of that many items (``random.Random(seed).sample`` over the
    split's order, then kept in split order), stable across runs and machines.
    """
    info = dataset_info(name)
    if split not in info.splits:
        raise DatasetError(
            f"Unknown split `{split}` for dataset `{info.name}`. Choose one of: {', '.join(info.splits)}."
        )
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"`limit` must be a positive integer or None, got {limit!r}.")
    rows, source = _load_rows(info.name, split, data_dir)
    examples = [
        dspy.Example(**row, id=f"{info.name}/{split}/{i}", split=split, source=source, dataset=info.name).with_inputs(
            "question"
        )
        for i, row in enumerate(rows)
    ]
    if limit is not None and limit < len(examples):
        keep = sorted(random.Random(seed).sample(range(len(examples)), limit))
        examples = [examples[i] for i in keep]
    logger.info("loaded %d examples of %s/%s from %s", len(examples), info.name, split, source)
    return examples


def data_hash(examples: list[dspy.Example]) -> str:
    """A short content hash of examples (ids, inputs and gold answers), for experiment tracking."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([ex.get("id"), ex.get("question"), str(ex.get("answer"))], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------- sources


def _load_rows(name: str, split: str, data_dir: str | os.PathLike[str] | None) -> tuple[list[dict], str]:
    if name in _USER_FILES:
        return read_user_rows(_USER_FILES[name]), f"file:{_USER_FILES[name]}"
    if name == "gsm8k" and split == "sample":
        return gsm8k_rows(read_bundled_sample(), "sample"), "bundled sample"
    directory = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if directory:
        path = Path(directory).expanduser()
        if not path.is_dir():
            raise DatasetError(
                f"Data directory `{path}` does not exist. Pass an existing directory as `data_dir` "
                f"(or ${DATA_DIR_ENV}) holding the upstream files ({dataset_info(name).files})."
            )
        return LOCAL_READERS[name](path, split), f"local:{path}"
    if _hub_reachable():
        rows = _from_hub(name, split)
        return rows, f"hub:{_HUB_IDS[name][0]}"
    hint = " For an offline demo use `split='sample'` of `gsm8k`." if name == "gsm8k" else ""
    raise DatasetError(
        f"No source for dataset `{name}` split `{split}`: no `data_dir` given, ${DATA_DIR_ENV} is not set, "
        f"and the Hugging Face hub is unreachable. Point `data_dir` at a directory with "
        f"{dataset_info(name).files}.{hint}"
    )


def _hub_reachable(timeout: float = 1.5) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def _from_hub(name: str, split: str) -> list[dict]:  # pragma: no cover - needs the hub
    import datasets as hf

    repo, config = _HUB_IDS[name]
    ds = hf.load_dataset(repo, config) if config else hf.load_dataset(repo)
    if name == "gsm8k":
        src = ds["test"] if split == "test" else ds["train"]
        return gsm8k_rows(gsm8k_parse([dict(r) for r in src], f"hub:{repo}"), split)
    if name.startswith("bbh_"):
        return bbh_rows(name, [dict(r) for r in ds["test"]], split)
    if name == "svamp":
        rows = [dict(r) for part in ds.values() for r in part]
        return svamp_rows(rows, split, f"hub:{repo}")
    hub_split = {"train": "train", "val": "validation", "test": "test"}[split]
    return [aqua_row(dict(r), f"hub:{repo}", i + 1) for i, r in enumerate(ds[hub_split])]
