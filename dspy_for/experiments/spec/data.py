"""The data side of a run specification: a dataset (:class:`DatasetConfig`) and the items it gives
(:func:`load_examples`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import dspy

from dspy_for.datasets import dataset_info, load_dataset
from dspy_for.errors import ConfigError, DatasetError

__all__ = ["DatasetConfig", "load_examples", "positive_int"]


def positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")


@dataclass
class DatasetConfig:
    """One dataset of a run. ``split`` left empty is the dataset's default split
    (:attr:`~dspy_for.datasets.DatasetInfo.default_split`: ``val`` for every benchmark, so nothing is chosen on test
    data), the split ``--dataset NAME`` and ``advise`` take too."""

    name: str
    split: str = ""
    limit: int | None = None
    first: int | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.split:
            with contextlib.suppress(DatasetError):  # an unknown dataset: `validate` says so
                self.split = dataset_info(self.name).default_split

    def validate(self) -> None:
        info = dataset_info(self.name)
        if self.split not in info.splits:
            raise ConfigError(
                f"Unknown split `{self.split}` for dataset `{self.name}`. Choose one of: {', '.join(info.splits)}."
            )
        for key in ("limit", "first"):
            value = getattr(self, key)
            if value is not None:
                positive_int(value, f"{key}` of dataset `{self.name}")


def load_examples(
    dataset: DatasetConfig, split: str | None = None, *, limit: int | None = None, first: int | None = None
) -> list[dspy.Example]:
    """The items of ``dataset`` (or of another ``split`` of it): a seeded ``limit`` sample, then the ``first`` N."""
    d = dataset
    examples = load_dataset(
        d.name, split or d.split, data_dir=d.data_dir, limit=limit if split else d.limit, seed=d.seed
    )
    n = first if split else d.first
    return examples[:n] if n else examples
