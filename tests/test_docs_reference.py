"""docs/reference.md cannot drift from the code.

Every table of the reference is preceded by a marker ``<!-- reference: NAME -->``; its first column names one key
per row (in backticks), and for the sections whose defaults the code declares, its second column starts with that
default (``required`` for a key without one, ``none`` for None, else the value as TOML writes it). The keys are
read from the code itself: the declared run settings (their table is exactly the rows their declarations make), the
other fields of the spec dataclasses (``ExperimentSpec``, ``DatasetConfig``, ``MethodConfig``, ``JudgeConfig``,
``SweepSpec``), the parameters of ``advise()``, the LM options ``make_lm`` and the transport take, the keys the
compile step and the search space read, the registered methods with their options, and the flags of ``compare``,
``sweep``, ``advise``, ``ask`` and ``export`` (those of the run settings in their own table). A key in the code but not in the
reference fails, and so does a key in the reference the code does not have, or a default that differs.

The README's Python example is run too (offline, a scripted LM) and must print what the README shows beside it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer

import dspy_for.cli as cli
import dspy_for.experiments.sweeps.search_space as search_space
import dspy_for.lm.options as lm_options
from dspy_for.experiments.advisor.driver import advise
from dspy_for.experiments.core.frame_columns import reference_tables as frame_tables
from dspy_for.experiments.methods import list_methods
from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, JudgeConfig, MethodConfig
from dspy_for.experiments.spec.settings import SETTINGS, reference_rows
from dspy_for.experiments.sweeps.spec import SweepSpec, load_sweep_spec
from dspy_for.lm import factory, server, transport

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE = REPO_ROOT / "docs" / "reference.md"
README = REPO_ROOT / "README.md"

MARKER = re.compile(r"^<!--\s*reference:\s*(\S+)\s*-->\s*$")
KEY = re.compile(r"^`([^`]+)`")
REQUIRED = object()  # a key without a default


# ------------------------------------------------------------------------------------------------ the document


def reference_tables(text: str) -> dict[str, list[list[str]]]:
    """``{marker name: rows}``: the body rows (cells, stripped) of the first table after each marker."""
    tables: dict[str, list[list[str]]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        name = m.group(1)
        assert name not in tables, f"docs/reference.md: marker `{name}` appears twice"
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("|"):
            assert not MARKER.match(lines[j].strip()), f"docs/reference.md: marker `{name}` has no table"
            j += 1
        rows = []
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append([c.strip() for c in lines[j].strip().strip("|").split("|")])
            j += 1
        assert len(rows) > 2, f"docs/reference.md: the table after marker `{name}` has no rows"
        tables[name] = rows[2:]  # header and separator off
    return tables


def first_key(cell: str, where: str) -> str:
    m = KEY.match(cell)
    assert m, f"docs/reference.md [{where}]: a row's first cell must start with a key in backticks, got {cell!r}"
    return m.group(1)


TABLES = reference_tables(REFERENCE.read_text(encoding="utf-8"))


def documented(section: str) -> dict[str, list[str]]:
    """``{key: its row}`` of a reference table; a key listed twice fails."""
    assert section in TABLES, f"docs/reference.md has no table marked `<!-- reference: {section} -->`"
    out: dict[str, list[str]] = {}
    for row in TABLES[section]:
        key = first_key(row[0], section)
        if key.startswith("--"):
            key = key.split()[0]  # `--dataset NAME`, `--sequential / --no-sequential`: the flag itself
        assert key not in out, f"docs/reference.md [{section}]: `{key}` is listed twice"
        out[key] = row
    return out


def toml(value: Any) -> str:
    """A default as the reference writes it: TOML literals, ``none`` for None."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def spellings(value: Any) -> set[str]:
    """How the reference may write ``value``: as TOML, and a whole float also without its ``.0`` (300 s)."""
    out = {toml(value)}
    if isinstance(value, float) and value.is_integer():
        out.add(str(int(value)))
    return out


def default_ok(cell: str, default: Any) -> bool:
    if default is REQUIRED:
        return cell.startswith("required")
    if default is None:
        return cell.startswith("none")
    return any(cell.startswith(f"`{s}`") for s in spellings(default))


# ------------------------------------------------------------------------------------------------ the code


def dataclass_defaults(cls: type) -> dict[str, Any]:
    """A config's keys with their defaults: the dataclass's fields, but the run settings (their own table)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in SETTINGS:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = REQUIRED
    return out


def signature_defaults(fn: Callable[..., Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    params = inspect.signature(fn).parameters.values()
    return {
        p.name: REQUIRED if p.default is inspect.Parameter.empty else p.default
        for p in params
        if p.name not in skip and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def sweep_dataset_defaults(tmp_path: Path) -> dict[str, Any]:
    """``[dataset]`` of a sweep: the dataset fields, with the defaults a loaded sweep config gives them."""
    config = tmp_path / "sweep.toml"
    config.write_text(
        'method = "cot"\n[dataset]\nname = "gsm8k"\n[search.temperature]\ntype = "float"\nlow = 0\nhigh = 1\n',
        encoding="utf-8",
    )
    loaded = load_sweep_spec(config).dataset
    return {f.name: getattr(loaded, f.name) if f.name != "name" else REQUIRED for f in dataclasses.fields(loaded)}


def compile_keys() -> dict[str, Any]:
    """The keys of a method's ``compile`` table (the fields of the typed spec it is parsed into, but the optimizer's
    own options), with the defaults the parse gives a table that names only its kind (one that validates)."""
    from dataclasses import fields

    from dspy_for.experiments.methods import check_compile

    parsed = check_compile("cot", {}, {"kind": "textgrad"})
    assert parsed is not None
    keys: dict[str, Any] = {f.name: getattr(parsed, f.name) for f in fields(parsed) if f.name != "options"}
    return {**keys, "kind": REQUIRED}


def search_keys() -> set[str]:
    """The keys a ``[search.<option>]`` table takes (the set the parser allows)."""
    source = inspect.getsource(search_space.parse_search_space)
    m = re.search(r"set\(spec\) - \{([^}]*)\}", source)
    assert m, "parse_search_space no longer lists the keys of a [search.<option>] table where this test reads them"
    return set(re.findall(r'"(\w+)"', m.group(1)))


def lm_option_defaults() -> dict[str, Any]:
    """Every LM option the code names: those `check_lm_options` checks, the transport's, the keyword parameters of
    dspy-for's LM classes, and the options that make a model think; with the defaults the code applies."""
    source = inspect.getsource(lm_options.check_lm_options)
    names = set(re.findall(r'"(\w+)" in options|options\.get\("(\w+)"\)|options\["(\w+)"\]', source))
    keys = {n for group in names for n in group if n}
    keys |= set(lm_options.TRANSPORT_OPTIONS) | set(lm_options._THINKING_OPTIONS)
    for cls in (factory.LM, factory.LocalLM):
        keys |= {
            p.name
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name != "cache_namespace"
        }
    defaults = {
        "timeout": lm_options.DEFAULT_TIMEOUT,
        "num_retries": lm_options.DEFAULT_NUM_RETRIES,
        "max_retry_wait": transport.DEFAULT_MAX_RETRY_WAIT,
        "max_tokens": lm_options.DEFAULT_MAX_TOKENS,
        "temperature": lm_options.lm_defaults("openai/gpt-4.1-mini", {})["temperature"],
        "n_ctx": server.DEFAULT_N_CTX,
        "prompt_cache": True,
        "slots": lm_options.DEFAULT_SLOTS,
    }
    return {k: defaults.get(k) for k in keys}


def cli_flags(command: str) -> set[str]:
    """The command's own flags (not those of its run settings, which have their own table; nor hidden ones)."""
    group = typer.main.get_command(cli.app)
    *groups, name = command.split()  # a subcommand: "models build-server"
    for word in groups:
        group = group.commands[word]  # type: ignore[attr-defined]
    params = group.commands[name].params  # type: ignore[attr-defined]
    settings = {p for p in params if p.name in SETTINGS}
    return {
        p.opts[0]
        for p in params
        if p.param_type_name == "option" and p.opts[0].startswith("--") and p not in settings and not p.hidden
    }


# ------------------------------------------------------------------------------------------------ the checks


def check_section(section: str, code: Mapping[str, Any], *, defaults: bool = True) -> None:
    doc = documented(section)
    missing = sorted(set(code) - set(doc))
    extra = sorted(set(doc) - set(code))
    assert not missing, f"docs/reference.md [{section}] lacks {missing}: the code has them; document them"
    assert not extra, f"docs/reference.md [{section}] lists {extra}: the code has no such key; remove them"
    if not defaults:
        return
    for key, default in code.items():
        cell = doc[key][1] if len(doc[key]) > 1 else ""
        assert default_ok(cell, default), (
            f"docs/reference.md [{section}] `{key}`: the default cell {cell!r} must start with "
            f"{'required' if default is REQUIRED else 'none' if default is None else '`' + toml(default) + '`'}"
        )


@pytest.mark.parametrize(
    ("section", "cls"),
    [
        ("compare", ExperimentSpec),
        ("compare.datasets", DatasetConfig),
        ("compare.methods", MethodConfig),
        ("judge", JudgeConfig),
        ("sweep", SweepSpec),
    ],
)
def test_config_keys_and_defaults(section: str, cls: type) -> None:
    check_section(section, dataclass_defaults(cls))


def test_sweep_dataset_keys_and_defaults(tmp_path: Path) -> None:
    check_section("sweep.dataset", sweep_dataset_defaults(tmp_path))


def test_sweep_search_keys() -> None:
    check_section("sweep.search", dict.fromkeys(search_keys()), defaults=False)


def test_compile_keys_and_defaults() -> None:
    check_section("compile", compile_keys())


def test_advise_parameters_and_defaults() -> None:
    check_section("advise", signature_defaults(advise))


def test_lm_options_and_defaults() -> None:
    check_section("lm_options", lm_option_defaults())


@pytest.mark.parametrize("command", ["compare", "sweep", "advise", "ask", "export", "serve", "models build-server"])
def test_every_flag(command: str) -> None:
    check_section(f"flags.{command.split()[-1]}", dict.fromkeys(cli_flags(command)), defaults=False)


def test_the_run_settings_table_is_made_from_their_declarations() -> None:
    """Each row as :func:`reference_rows` writes it from the declaration (key, default, flag, commands, meaning)."""
    text = REFERENCE.read_text(encoding="utf-8").splitlines()
    start = text.index("<!-- reference: settings -->")
    table = [line for line in text[start + 1 :][: len(SETTINGS) + 3] if line.startswith("|")][2:]
    expected = reference_rows()
    assert table == expected, "docs/reference.md [settings] must be exactly these rows:\n" + "\n".join(expected)


@pytest.mark.parametrize("marker", sorted(frame_tables()))
def test_every_frame_column_table_is_made_from_the_declarations(marker: str) -> None:
    """A frame's column table is exactly the rows its columns' declarations make (a cell's: each measure of the
    summary with its unit, aggregation, table column and MLflow metric): `scripts/reference_tables.py` writes them."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- reference: {marker} -->") + 1
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    expected = frame_tables()[marker]
    assert table == expected, (
        f"docs/reference.md [{marker}] differs from the declarations: run `.venv/bin/python "
        "scripts/reference_tables.py` to write it"
    )


def test_the_generated_tables_can_fail() -> None:
    """A measure added without its row in the reference is caught: the cells' table grows by its row."""
    from dataclasses import make_dataclass
    from typing import Annotated

    from dspy_for.experiments.spec.measures import Measure, measures_of
    from dspy_for.experiments.spec.measures import reference_rows as measure_rows

    grown = make_dataclass("Grown", [("new_measure", Annotated[int, Measure("a new count", metric="new")])])
    (row,) = measure_rows(measures_of(grown), detail=True)
    assert row == "| `new_measure` | integer |  |  |  | `new` | a new count |"
    assert row not in REFERENCE.read_text(encoding="utf-8")


def test_every_method_with_its_roles_and_options() -> None:
    """The methods table: every registered method, its roles, and each option with its default (``key = value``)."""
    doc = documented("methods")
    code = {m.name: m for m in list_methods()}
    assert sorted(doc) == sorted(code), f"docs/reference.md [methods]: {sorted(doc)} vs the registry's {sorted(code)}"
    for name, m in code.items():
        roles, options = doc[name][1], doc[name][2]
        for role in m.roles:
            assert f"`{role}`" in roles, f"docs/reference.md [methods] `{name}`: role `{role}` missing"
        for key, value in m.defaults.items():
            assert any(f"`{key} = {v}`" in options for v in spellings(value)), (
                f"docs/reference.md [methods] `{name}`: write its option as `{key} = {toml(value)}`"
            )
        written = set(re.findall(r"`(\w+) = ", options))
        assert written <= set(m.defaults), (
            f"docs/reference.md [methods] `{name}`: no options {written - set(m.defaults)}"
        )


def test_the_checks_can_fail() -> None:
    """A missing key, an extra key and a wrong default are each caught."""
    doc = "\n".join(
        [
            "<!-- reference: demo -->",
            "| key | default | meaning |",
            "|---|---|---|",
            "| `a` | `1` | one |",
            "| `c` | none | extra |",
        ]
    )
    rows = reference_tables(doc)["demo"]
    keys = {first_key(r[0], "demo"): r for r in rows}
    assert set(keys) == {"a", "c"}
    assert default_ok(keys["a"][1], 1) and not default_ok(keys["a"][1], 2)
    assert default_ok(keys["c"][1], None) and not default_ok(keys["c"][1], REQUIRED)
    assert toml([1, "x"]) == '[1, "x"]' and spellings(300.0) == {"300.0", "300"} and toml({}) == "{}"


# ------------------------------------------------------------------------------------------------ the README example


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]


def test_the_readme_python_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    blocks = _blocks(README.read_text(encoding="utf-8"))
    i = next(i for i, (lang, body) in enumerate(blocks) if lang == "python" and "ScriptedLM" in body)
    code = blocks[i][1]
    lang, shown = blocks[i + 1]
    assert lang == "text", "the README shows the example's output in a ```text block right after it"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DSPY_FOR_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == shown.strip().splitlines(), done.stdout


def test_the_readme_stays_a_front_page() -> None:
    """The README opens with the two commands (set up and run; set up and test) and stays within 120 lines: the
    manual lives in docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines: move the detail to docs/"
    text = "\n".join(lines[:15])
    assert "bash scripts/setup.sh && .venv/bin/dspy-for compare experiments/quickstart.toml" in text
    assert "bash scripts/test.sh" in text
