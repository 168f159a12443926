"""Benchmarks of the FOR-Prompting and ProRefine papers, and a user's own JSONL data (:func:`register_jsonl`), as
lists of ``dspy.Example``."""

from __future__ import annotations

from dspy_for.datasets.loaders import (
    DATASETS,
    USER_DATASETS,
    DatasetInfo,
    content_key,
    data_hash,
    dataset_info,
    load_dataset,
    register_jsonl,
    signature_for,
)

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
