"""Guard rail of the run-path refactor: the prompts every shipped config sends must not change.

Each row is (method, options as JSON, signature, prompts_fingerprint) as computed on main before the
refactor (commit 0351b6e), for every method and option set of every shipped config plus the defaults. The
committed per-item results under ``experiments/results/`` are keyed by these fingerprints: if one changes,
those results stop being reused and every stored measurement silently re-runs.
"""

from __future__ import annotations

import json

import pytest

from dspy_for.experiments.methods import build_method
from dspy_for.experiments.spec import prompts_fingerprint

FINGERPRINTS = [
    ('cot', '{}', 'question -> answer: float', 'b7fe3c6b1759'),
    ('cot', '{}', 'question -> answer: int', '4cd5300d0919'),
    ('cot', '{}', 'question -> answer: str', '7405fbb2fc6f'),
    ('for', '{"debater_mode": "free"}', 'question -> answer: float', '13f6d807e32d'),
    ('for', '{"debater_mode": "free"}', 'question -> answer: int', 'ba6060327ce9'),
    ('for', '{"debater_mode": "free"}', 'question -> answer: str', '221dcc1a4faa'),
    ('for', '{"host": true, "rounds": 1}', 'question -> answer: float', '523ab975314d'),
    ('for', '{"host": true, "rounds": 1}', 'question -> answer: int', 'fd9cd7454d5c'),
    ('for', '{"host": true, "rounds": 1}', 'question -> answer: str', '6ce0bf9334e2'),
    ('for', '{"host": true, "rounds": 3}', 'question -> answer: float', '523ab975314d'),
    ('for', '{"host": true, "rounds": 3}', 'question -> answer: int', 'fd9cd7454d5c'),
    ('for', '{"host": true, "rounds": 3}', 'question -> answer: str', '6ce0bf9334e2'),
    ('for', '{"rounds": 1}', 'question -> answer: float', '523ab975314d'),
    ('for', '{"rounds": 1}', 'question -> answer: int', 'fd9cd7454d5c'),
    ('for', '{"rounds": 1}', 'question -> answer: str', '6ce0bf9334e2'),
    ('for', '{"stop": "fixed"}', 'question -> answer: float', '523ab975314d'),
    ('for', '{"stop": "fixed"}', 'question -> answer: int', 'fd9cd7454d5c'),
    ('for', '{"stop": "fixed"}', 'question -> answer: str', '6ce0bf9334e2'),
    ('for', '{}', 'question -> answer: float', '523ab975314d'),
    ('for', '{}', 'question -> answer: int', 'fd9cd7454d5c'),
    ('for', '{}', 'question -> answer: str', '6ce0bf9334e2'),
    ('prorefine', '{"k": 32, "n": 2, "verifier": "llm"}', 'question -> answer: float', '0cbf8cee35c3'),
    ('prorefine', '{"k": 32, "n": 2, "verifier": "llm"}', 'question -> answer: int', 'dd739ef51570'),
    ('prorefine', '{"k": 32, "n": 2, "verifier": "llm"}', 'question -> answer: str', '7ce2b08706f0'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "llm"}', 'question -> answer: float', '0cbf8cee35c3'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "llm"}', 'question -> answer: int', 'dd739ef51570'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "llm"}', 'question -> answer: str', '7ce2b08706f0'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "none"}', 'question -> answer: float', '0cbf8cee35c3'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "none"}', 'question -> answer: int', 'dd739ef51570'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "none"}', 'question -> answer: str', '7ce2b08706f0'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "oracle"}', 'question -> answer: float', '0cbf8cee35c3'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "oracle"}', 'question -> answer: int', 'dd739ef51570'),
    ('prorefine', '{"k": 32, "n": 4, "verifier": "oracle"}', 'question -> answer: str', '7ce2b08706f0'),
    ('prorefine', '{"task_module": "predict"}', 'question -> answer: float', 'ee5c8a0d22fe'),
    ('prorefine', '{"task_module": "predict"}', 'question -> answer: int', '8ec3abf1b068'),
    ('prorefine', '{"task_module": "predict"}', 'question -> answer: str', 'ca2b976cb68d'),
    ('prorefine', '{}', 'question -> answer: float', '0cbf8cee35c3'),
    ('prorefine', '{}', 'question -> answer: int', 'dd739ef51570'),
    ('prorefine', '{}', 'question -> answer: str', '7ce2b08706f0'),
    ('refine', '{}', 'question -> answer: float', '27596970ed0d'),
    ('refine', '{}', 'question -> answer: int', '34f1af293d97'),
    ('refine', '{}', 'question -> answer: str', 'ed7f409da815'),
    ('self_consistency', '{}', 'question -> answer: float', 'e9f8004ad9f2'),
    ('self_consistency', '{}', 'question -> answer: int', '4b855050eb1e'),
    ('self_consistency', '{}', 'question -> answer: str', '8c95e2d883a7'),
    ('single', '{}', 'question -> answer: float', '77b73597193d'),
    ('single', '{}', 'question -> answer: int', '22478bac4733'),
    ('single', '{}', 'question -> answer: str', '2743b81e6654'),
]


@pytest.mark.parametrize(("method", "options", "signature", "expected"), FINGERPRINTS)
def test_prompts_of_shipped_methods_are_unchanged(method, options, signature, expected):
    program = build_method(method, signature, **json.loads(options))
    assert prompts_fingerprint(program) == expected
