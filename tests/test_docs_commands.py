"""Every ``dspy-for`` command the README and ``docs/*.md`` show runs as far as the CLI validates it.

A command is taken from a fenced shell block (``bash``, ``sh``, ``shell``, ``console``, ``text`` or unlabelled;
in ``text`` / ``console`` blocks only ``$ `` prompt lines, the rest being output), with ``\\`` line
continuations joined, comments dropped, ``&&`` / ``||`` / ``;`` / ``|`` chains split, ``VAR=value`` prefixes
dropped, ``$VAR`` filled from an ``export VAR=...`` earlier in the block and optional ``[--flag VALUE]`` parts
kept. Each runs through the real Typer app (:data:`dspy_for.cli.app`); the library call behind it runs for
real up to its first step past validation, where a stand-in stops it: ``compare`` at tracking set-up (after
:func:`~dspy_for.experiments.spec.config.load_spec`), ``sweep`` at opening the study (after
:func:`~dspy_for.experiments.sweeps.spec.load_sweep_spec` and its own checks), ``advise`` at loading the items,
``ask`` at building the LMs, ``export`` at finding the results directory (after the config, ``--to`` and
``--level`` are checked); ``models`` (``build-server`` too), ``serve`` and ``ui`` parse their flags only. No LM is called, no server
started, nothing downloaded, no dataset read (placeholder data directories such as ``DATA_DIR`` are never
opened; a placeholder ``--data FILE.jsonl`` or ``--train FILE.jsonl`` that does not exist is replaced by a two-line
file of that name).

A command the doc shows failing on purpose carries a trailing comment saying so (``# refused``, ``# exits 2``
or ``# fails``): it must then be refused with exit code 2.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import dspy
import pytest
import typer
from typer.testing import CliRunner

import dspy_for.cli as cli
import dspy_for.cli_models as cli_models
from dspy_for.datasets import loaders
from dspy_for.lm import server
from dspy_for.lm.registry import get_model

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "text"}
PROMPT_ONLY_LANGS = {"console", "text"}  # blocks that mix commands (``$ ...``) with their output
CHAIN = {"&&", "||", ";", "|"}
EXPECT_REFUSED = re.compile(r"#.*\b(refused|exits? 2|fails)\b", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
EXPORT = re.compile(r"^\s*export\s+([A-Za-z_]\w*)=(.*)$")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
REDIRECT = re.compile(r"^\d*(>>?|<)(&\d+)?$")  # an operator whose target is the next word
REDIRECT_ATTACHED = re.compile(r"^\d*(>>?|<)\S+$")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line of the command's first line
    args: tuple[str, ...]  # after `dspy-for`
    refused: bool  # the doc says it fails


# ----------------------------------------------------------------------------------------------- extraction


def _shell_blocks(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(language, [(line number, line)]) of every fenced block."""
    lang: str | None = None
    fence = ""
    lines: list[tuple[int, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if lang is None and m:
            fence, lang, lines = m.group(1), m.group(2).lower(), []
        elif lang is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            yield lang, lines
            lang = None
        elif lang is not None:
            lines.append((n, line))


def _logical_lines(lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Lines with their ``\\`` continuations joined, numbered by their first line."""
    start = 0
    parts: list[str] = []
    for n, line in lines:
        if not parts:
            start = n
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(p.strip() for p in parts)
        parts = []
    if parts:
        yield start, " ".join(p.strip() for p in parts)


def _is_dspy_for(word: str) -> bool:
    return word == "dspy-for" or word.endswith("/dspy-for")


def _optional_parts(words: list[str]) -> list[str]:
    """``[--flag VALUE]`` (an optional part shown in brackets) kept as ``--flag VALUE``."""
    out, inside = [], False
    for w in words:
        if w.startswith("[-"):
            inside, w = True, w[1:]
        if inside and w.endswith("]"):
            inside, w = False, w[:-1]
        out.append(w)
    return out


def _commands(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a chain, each without its redirections."""
    current: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in CHAIN:
            yield current
            current = []
        elif REDIRECT.match(w):
            skip = True
        elif not REDIRECT_ATTACHED.match(w):
            current.append(w)
    yield current


def _substitute(word: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: env.get(m.group(1), m.group(0)), word)


def doc_commands(text: str, where: str) -> Iterator[DocCommand]:
    """The ``dspy-for`` commands of a Markdown ``text`` (the file ``where``, for the ids)."""
    for lang, lines in _shell_blocks(text):
        if lang not in SHELL_LANGS:
            continue
        env: dict[str, str] = {}
        for n, line in _logical_lines(lines):
            stripped = line.strip()
            if stripped.startswith("$ "):
                stripped = stripped[2:]
            elif lang in PROMPT_ONLY_LANGS:
                continue  # output, not a command
            if "dspy-for" not in stripped and not EXPORT.match(stripped):
                continue
            words = shlex.split(stripped, comments=True)
            if EXPORT.match(stripped):
                name, _, value = words[1].partition("=")
                env[name] = value
                continue
            refused = bool(EXPECT_REFUSED.search(stripped))
            for cmd in _commands(_optional_parts(words)):
                while cmd and ASSIGNMENT.match(cmd[0]):
                    cmd = cmd[1:]
                if cmd and _is_dspy_for(cmd[0]):
                    yield DocCommand(f"{where}:{n}", tuple(_substitute(w, env) for w in cmd[1:]), refused)


COMMANDS = [c for p in DOCS for c in doc_commands(p.read_text(encoding="utf-8"), p.relative_to(REPO_ROOT).as_posix())]


def test_the_extraction_finds_the_documented_commands() -> None:
    """The extraction itself: continuations, comments, chains, prompts, env prefixes, optional parts."""
    text = "\n".join(
        [
            "```bash",
            "export DB='sqlite:///x.db'",
            "bash scripts/setup.sh && .venv/bin/dspy-for compare a.toml   # a comment",
            "LITELLM_LOCAL_MODEL_COST_MAP=True dspy-for sweep s.toml \\",
            '    --storage "$DB" --n-trials 2 > log.txt 2>&1',
            "dspy-for serve m --prompt-cache [--prompt-cache-mb 1024]",
            "dspy-for compare c.toml --first 0   # refused: --first must be positive",
            "```",
            "```text",
            "$ dspy-for ui",
            "dspy-for output line, not a command",
            "```",
            "```python",
            'print("dspy-for compare x")',
            "```",
        ]
    )
    found = list(doc_commands(text, "example.md"))
    assert [(c.where, c.args, c.refused) for c in found] == [
        ("example.md:3", ("compare", "a.toml"), False),
        ("example.md:4", ("sweep", "s.toml", "--storage", "sqlite:///x.db", "--n-trials", "2"), False),
        ("example.md:6", ("serve", "m", "--prompt-cache", "--prompt-cache-mb", "1024"), False),
        ("example.md:7", ("compare", "c.toml", "--first", "0"), True),
        ("example.md:10", ("ui",), False),
    ]
    assert len(COMMANDS) >= 20 and any(c.where.startswith("docs/sequential.md:") for c in COMMANDS)


# ----------------------------------------------------------------------------------------------- validation


class _Stop(Exception):
    """Raised by a stand-in: the command got past its validation."""


class _Forbidden(AssertionError):
    """Something a validation must never do (an LM call, a server start, a download, a dataset read)."""


def _stand_in(reached: list[str], name: str, check: Callable[..., Any] | None = None) -> Callable[..., NoReturn]:
    """Stops the command there; ``check`` first validates what it was given (e.g. a model name)."""

    def stop(*args: Any, **kwargs: Any) -> NoReturn:
        if check is not None:
            check(*args)
        reached.append(name)
        raise _Stop(name)

    return stop


def _forbidden(what: str) -> Callable[..., NoReturn]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise _Forbidden(f"validating a documented command must not {what}")

    return refuse


@pytest.fixture
def validate_only(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-ins at the first step past validation of every command, and refusals for anything that would call
    an LM, start a server, download a model or read a dataset (the bundled ``sample`` split excepted: ``ask
    --sample N`` reads it before anything else). Returns the names of the stand-ins reached."""
    reached: list[str] = []
    mod = importlib.import_module
    # the library steps that follow validation
    monkeypatch.setattr(mod("dspy_for.experiments.tracking.store"), "setup_tracking", _stand_in(reached, "compare"))
    monkeypatch.setattr(mod("dspy_for.experiments.sweeps.sweep"), "open_study", _stand_in(reached, "sweep"))
    monkeypatch.setattr(mod("dspy_for.experiments.advisor.driver"), "load_examples", _stand_in(reached, "advise"))
    monkeypatch.setattr(mod("dspy_for.experiments.core.prepare"), "build_lms", _stand_in(reached, "ask"))
    monkeypatch.setattr(mod("dspy_for.experiments.results"), "items_dir_of", _stand_in(reached, "export"))
    # the commands that only parse their flags here (and name a model of the registry)
    monkeypatch.setattr(cli, "serve_ui", _stand_in(reached, "ui"))
    monkeypatch.setattr(cli_models, "serve_forever", _stand_in(reached, "serve", check=get_model))
    monkeypatch.setattr(cli_models, "pull_model", _stand_in(reached, "models pull", check=get_model))
    monkeypatch.setattr(cli_models, "list_models", _stand_in(reached, "models list"))
    monkeypatch.setattr(cli_models, "build_server", _stand_in(reached, "models build-server"))
    # never, whatever the code path
    read_rows = loaders._load_rows

    def load_rows(name: str, split: str, data_dir: Any) -> Any:
        if split == "sample" and data_dir is None:
            return read_rows(name, split, data_dir)
        raise _Forbidden(f"validating a documented command must not read a dataset ({name}/{split}, {data_dir})")

    monkeypatch.setattr(loaders, "_load_rows", load_rows)
    monkeypatch.setattr(dspy.LM, "forward", _forbidden("call an LM"))
    monkeypatch.setattr(dspy.LM, "aforward", _forbidden("call an LM"))
    monkeypatch.setattr(server, "start_server", _forbidden("start a local server"))
    monkeypatch.setattr(server, "ensure_server", _forbidden("start a local server"))
    monkeypatch.chdir(REPO_ROOT)  # the commands name configs relative to the repository
    return reached


def _placeholder_data(args: tuple[str, ...], tmp: Path) -> list[str]:
    """``--data FILE.jsonl`` (or ``--train``) naming a file that does not exist (the reader's own task or training
    items) → a two-line file of that name, so the command reads a file of the documented shape."""
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a in ("--data", "--train") and not Path(out[i + 1]).exists():
            path = tmp / Path(out[i + 1]).name
            rows = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "What is 4 * 2?", "answer": "8"}]
            path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            out[i + 1] = str(path)
    return out


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_validates(command: DocCommand, validate_only: list[str], tmp_path: Path) -> None:
    args = _placeholder_data(command.args, tmp_path)
    result = CliRunner().invoke(cli.app, args)
    shown = f"`dspy-for {shlex.join(command.args)}` ({command.where}):\n{result.output}"
    if isinstance(result.exception, _Forbidden):
        raise result.exception
    if command.refused:
        assert result.exit_code == 2, f"the doc shows it refused, but it was not: {shown}"
        return
    if "--help" in args:
        assert result.exit_code == 0, shown
        return
    if "--dry-run" in args:  # the plan: it runs to its end with nothing forbidden (no LM, server, download)
        assert result.exit_code == 0 and "dry run: no LM was built or called" in result.output, shown
        return
    assert result.exit_code != 2, f"refused: {shown}"
    assert isinstance(result.exception, _Stop) and validate_only, (
        f"did not get past its validation (exit {result.exit_code}, {result.exception!r}): {shown}"
    )


def test_a_refused_command_fails_this_test(validate_only: list[str]) -> None:
    """The check can fail: a flag the CLI does not know and a config override it refuses both exit 2 before
    any stand-in is reached."""
    for args in (
        ["compare", "experiments/quickstart.toml", "--no-such-flag"],
        ["compare", "experiments/quickstart.toml", "--first", "0"],
        ["sweep", "experiments/sweep_for.toml", "--workers", "0"],
        ["advise", "--lm", "local/qwen2.5-coder-1.5b", "--dataset", "gsm8k", "--split", "nope"],
        ["ask", "--method", "magic", "q"],
        ["models", "pull", "qwen-nope"],
        ["serve", "qwen-nope", "--prompt-cache-mb", "1024"],
    ):
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 2, (args, result.output)
    assert validate_only == []


def test_reaching_a_stand_in_means_validated(validate_only: list[str]) -> None:
    result = CliRunner().invoke(cli.app, ["compare", "experiments/quickstart.toml", "--first", "2"])
    assert isinstance(result.exception, _Stop) and validate_only == ["compare"], result.output
    assert not isinstance(result.exception, typer.Exit)


@pytest.mark.parametrize(
    ("methods", "flags", "refused"),
    [
        ("cot,for_n1_host", [], False),  # match_budget sizes neither: nothing to refuse
        ("cot,self_consistency,for_n1_host", [], True),
        ("cot,for_n1_host,defender_sc", [], True),
        ("cot,self_consistency,for_n1_host", ["--no-match-budget"], False),
    ],
)
def test_match_budget_with_sequential_is_refused_only_when_it_sizes_a_method(
    validate_only: list[str], methods: str, flags: list[str], refused: bool
) -> None:
    args = ["compare", "experiments/matched_budget.toml", "--methods", methods, "--sequential", *flags]
    result = CliRunner().invoke(cli.app, args)
    if refused:
        assert result.exit_code == 2 and "--no-match-budget" in result.output, result.output
        assert "self_consistency" in result.output or "defender_sc" in result.output
    else:
        assert isinstance(result.exception, _Stop), result.output
