"""Measures, each declared once.

A measure is a number (or a label beside the numbers) that a result reports: accuracy, tokens per item, the paired
test's p. As a run setting is one :class:`~dspy_for.experiments.spec.settings.Setting`, a measure is one
:class:`Measure`, written in the annotation of the typed field that holds it::

    tokens_per_item: Annotated[float | None, Measure("prompt + completion tokens ...", unit="tokens", header="tok/item",
                                                     shown="tokens", metric="tokens_per_item")]

The field gives its name and type; the declaration its meaning, unit, how it is aggregated from the records, how it
is shown, its column in the comparison table with its legend line, its data frame column and its MLflow metric.
From the declarations come

* the comparison table's columns and legend (:mod:`dspy_for.experiments.reports.table`),
* the MLflow metrics (:func:`metrics_of`),
* the data frames' columns and their types (:mod:`dspy_for.experiments.core.frames`),
* the column rows of ``docs/reference.md`` (:func:`reference_rows`),

so adding a measure touches its declaration and the code that computes it, nothing else.

**The rules.** A value that was not measured is None: no metric, a missing frame value, ``-`` in the table — never
0. A measure that holds a value per key (per role, per LM, per stat) is a mapping: its frame columns are
``<frame>.<key>`` and its metric is a pattern with ``{key}``. A measure whose value is itself a declared dataclass (the
judge's) is flattened the same way, its own measures under ``<frame>.``; one whose value is a plain dataclass (the
spread of repeats) is one column per field.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal, get_args, get_origin

__all__ = [
    "REFERENCE_DETAIL_HEADER",
    "REFERENCE_HEADER",
    "Measure",
    "column_dtype",
    "keyed_columns",
    "measures_of",
    "metrics_of",
    "plain",
    "reference_rows",
]

#: how a value is shown in the comparison table (the formats: :mod:`dspy_for.experiments.reports.table`)
Shown = Literal["number", "count", "items", "interval", "paired", "tokens", "usd", "seconds", "compile", "text", "flag"]
#: what a declared value is
Kind = Literal["int", "float", "bool", "str", "mapping", "nested", "list", "time"]


@dataclass(frozen=True)
class Measure:
    """One measure (see the module docstring).

    ``meaning``: what it is, in a line (the reference's); ``unit``: ``items``, ``tokens``, ``USD``, ``seconds``,
    ``proportion`` (0.55 is 55%), ...; ``aggregated``: how it is made from the records (``per scored answer``,
    ``count``, ``mean over scored items``). ``header``: its column in the comparison table (None: not a column),
    shown when ``column_when`` is ``always`` or, for ``any``, when some cell has a value that is not 0 or empty;
    ``shown``: how its value is written there. ``legend``: its line in the legend under the table, when its column
    is shown (``legend_when="column"``) or when some cell has a value (``any``); ``{baseline}`` and ``{reducers}``
    are filled in. ``metric``: its MLflow metric (None: none; ``{key}`` for each key of a mapping). ``frame``: its
    data frame column (None: its name; '' on a mapping of declared values: their columns sit directly under the
    enclosing one); ``in_frame`` False keeps it out of the frames. ``key``: what a mapping's keys are (``role``,
    ``lm``, ``stat``). ``name``, ``kind`` (int, float, bool, str, mapping, nested, list, time), ``optional``,
    ``nested`` (the dataclass a nested value, or a mapping's values, are) and ``values`` (the kind of a mapping's
    values) come from the annotated field, or are given for a column declared on its own."""

    meaning: str
    unit: str = ""
    aggregated: str = ""
    shown: Shown = "number"
    header: str | None = None
    column_when: Literal["always", "any"] = "always"
    legend: str = ""
    legend_when: Literal["column", "any"] = "column"
    metric: str | None = None
    frame: str | None = None
    in_frame: bool = True
    key: str = "key"
    name: str = ""
    kind: Kind = "float"
    optional: bool = False
    nested: type | None = None
    values: Kind | None = None

    @property
    def column(self) -> str:
        """Its data frame column (or, for a mapping, the column the keys go under)."""
        return self.name if self.frame is None else self.frame

    @property
    def keyed(self) -> bool:
        """It holds a value per key (a mapping), or per field (a dataclass)."""
        return self.kind in ("mapping", "nested")

    @property
    def type_text(self) -> str:
        """Its type as the reference writes it."""
        if self.keyed:
            return f"{_TYPE_TEXT.get(self.values or '', 'value')} per {self.key}"
        return _TYPE_TEXT.get(self.kind, self.kind) + (", or missing" if self.optional else "")


_TYPE_TEXT = {"int": "integer", "float": "number", "bool": "true/false", "str": "text", "list": "text", "time": "time"}
_SCALARS: dict[type, Kind] = {bool: "bool", int: "int", float: "float", str: "str"}


@functools.cache
def measures_of(cls: type) -> tuple[Measure, ...]:
    """The measures ``cls`` (a dataclass) declares, in field order, each with its name and kind from its field."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if get_origin(hint) is not Annotated:
            continue
        base, *extra = get_args(hint)
        declared = next((x for x in extra if isinstance(x, Measure)), None)
        if declared is not None:
            kind, optional, nested, values = _kind(base)
            values = declared.values or values
            out.append(replace(declared, name=f.name, kind=kind, optional=optional, nested=nested, values=values))
    return tuple(out)


def _kind(hint: Any) -> tuple[Kind, bool, type | None, Kind | None]:
    """What a field's type is: its kind, whether it may be None, the dataclass it (or a mapping's values) is, and the
    kind of a mapping's values."""
    args = get_args(hint)
    optional = get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
    origin = get_origin(hint) or hint
    if origin in _SCALARS:
        return _SCALARS[origin], optional, None, None
    if origin in (dict, Mapping):
        value = get_args(hint)[-1] if get_args(hint) else None
        nested = value if isinstance(value, type) and dataclasses.is_dataclass(value) else None
        return "mapping", optional, nested, _SCALARS.get(value) if isinstance(value, type) else None
    if origin in (list, tuple):
        return "list", optional, None, None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "nested", optional, hint, None
    raise TypeError(f"a measure must be a number, flag, text, mapping or dataclass, got {hint!r}")


def plain(value: object) -> object:
    """``value`` as plain data: a dataclass as its ``row()`` when it has one, else its fields; mappings and lists
    item by item."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        row = getattr(value, "row", None)
        if callable(row):
            return row()
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def metrics_of(obj: object, key: str = "") -> dict[str, float]:
    """The MLflow metrics of ``obj`` (a dataclass with declared measures): each declared ``metric`` whose value was
    measured (None: absent, never 0), a mapping's per key, a nested value's by its own declarations (``key``: the
    key of the mapping ``obj`` is a value of)."""
    out: dict[str, float] = {}
    cls: type = type(obj)
    for m in measures_of(cls):
        value = getattr(obj, m.name)
        if value is None:
            continue
        if m.kind == "mapping" and m.nested is not None:
            for k, v in value.items():
                out.update(metrics_of(v, str(k)))
        elif m.kind == "nested" and m.nested is not None and measures_of(m.nested):
            out.update(metrics_of(value, key))
        elif m.metric is None:
            continue
        elif m.kind == "nested":
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            out.update({m.metric.format(key=k): float(v) for k, v in fields.items() if _number(v)})
        elif m.kind == "mapping":
            out.update({m.metric.format(key=k): float(v) for k, v in value.items() if _number(v)})
        elif _number(value):
            out[m.metric.format(key=key)] = float(value)
    return out


def _number(value: object) -> bool:
    return isinstance(value, int | float) and value == value  # a NaN is not a measured number


# ---------------------------------------------------------------------------------------------- frame types


def column_dtype(kind: Kind | None) -> str | None:
    """The pandas dtype of a frame column of ``kind``: nullable integers (``Int64``) for counts, nullable booleans
    (``boolean``) for flags, ``float64`` for numbers, nullable text (``string``), UTC times; None: as pandas reads
    it."""
    return {"int": "Int64", "bool": "boolean", "float": "float64", "str": "string", "list": "string"}.get(kind or "")


def keyed_columns(
    measures: Sequence[Measure], prefix: str = "", outer: str = "key", always: bool = True
) -> Iterator[tuple[str, Measure, str, bool]]:
    """Each frame column pattern of ``measures`` (``tokens_per_item.<role>``, ``judge.<score>.mean``) with the
    measure that gives it, the key its ``{key}`` stands for (``outer``: the enclosing mapping's) and whether every
    row has it (not a column of a value that may be absent, such as the judge's); a declared nested value's columns
    one by one."""
    for m in measures:
        if not m.in_frame:
            continue
        here = prefix + m.column
        if m.nested is not None and measures_of(m.nested):
            inner = always and not m.optional and m.kind == "nested"
            if m.kind == "nested":
                yield from keyed_columns(measures_of(m.nested), here + ".", outer, inner)
            else:
                base = prefix if m.column == "" else here + "."
                yield from keyed_columns(measures_of(m.nested), f"{base}<{m.key}>.", m.key, inner)
        elif m.keyed:
            yield f"{here}.<{m.key}>", m, m.key, False
        else:
            yield here, m, outer, always


# ------------------------------------------------------------------------------------------------ reference


#: the header of a column table in the reference: plain, and with each measure's unit, aggregation, table column and
#: MLflow metric (``detail``)
REFERENCE_HEADER = ("| column | type | meaning |", "|---|---|---|")
REFERENCE_DETAIL_HEADER = (
    "| column | type | unit | aggregated | table | MLflow metric | meaning |",
    "|---|---|---|---|---|---|---|",
)


def reference_rows(measures: Sequence[Measure], *, detail: bool = False) -> list[str]:
    """The rows of a data frame's column table in ``docs/reference.md``: each column, its type and meaning; with
    ``detail``, also its unit, how it is aggregated, its column in the printed table and its MLflow metric."""
    rows = []
    for column, m, key, _ in keyed_columns(measures):
        metric = m.metric.replace("{key}", f"<{key}>") if m.metric else ""
        cells = [f"`{column}`", m.type_text]
        if detail:
            cells += [m.unit, m.aggregated, f"`{m.header}`" if m.header else "", f"`{metric}`" if metric else ""]
        rows.append("| " + " | ".join([*cells, m.meaning]) + " |")
    return rows
