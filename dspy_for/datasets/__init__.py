"""Benchmarks of the FOR-Prompting and ProRefine papers as lists of ``dspy.Example``."""

from __future__ import annotations

from dspy_for.datasets.loaders import (
    DATASETS,
    DatasetInfo,
    content_key,
    data_hash,
    dataset_info,
    load_dataset,
    signature_for,
)

__all__ = ["DATASETS", "DatasetInfo", "content_key", "data_hash", "dataset_info", "load_dataset", "signature_for"]
