from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from dspy_for.modules.adapters import FieldRecoveringChatAdapter, python_quoted_items, restore_field_headers

SIG = dspy.Signature("question -> reasoning: str, answer: float")


@pytest.mark.parametrize(
    ("tail", "expected"),
    [("answer: 135.0", 135.0), ("**Answer:** 135", 135.0), ("`answer`:\n135.0", 135.0)],
)
def test_a_last_field_written_as_a_plain_line_is_read(tail, expected):
    completion = f"[[ ## reasoning ## ]]\n15 * 5 = 75\n75 + 60 = 135\n{tail}\n\n[[ ## completed ## ]]"
    with pytest.raises(AdapterParseError):
        dspy.ChatAdapter().parse(SIG, completion)
    out = FieldRecoveringChatAdapter().parse(SIG, completion)
    assert out == {"reasoning": "15 * 5 = 75\n75 + 60 = 135", "answer": expected}


def test_the_last_such_line_after_the_last_header_wins():
    completion = "answer: 1\n[[ ## reasoning ## ]]\nanswer: 2 is wrong\nanswer: 3\n[[ ## completed ## ]]"
    assert FieldRecoveringChatAdapter().parse(SIG, completion)["answer"] == 3.0


@pytest.mark.parametrize(
    "completion",
    [
        "[[ ## reasoning ## ]]\nno answer at all\n[[ ## completed ## ]]",  # nothing to recover
        "[[ ## reasoning ## ]]\nok\n[[ ## answer ## ]]\nforty\n[[ ## completed ## ]]",  # unparsable value
        "[[ ## reasoning ## ]]\nok\nanswer: forty",  # a recovered value must parse too
    ],
)
def test_what_cannot_be_repaired_fails_as_with_chat_adapter(completion):
    with pytest.raises(AdapterParseError) as failed:
        FieldRecoveringChatAdapter().parse(SIG, completion)
    assert failed.value.lm_response == completion


def test_nothing_missing_means_nothing_to_restore():
    assert restore_field_headers("[[ ## answer ## ]]\n3", ["answer"]) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("['What is Biff's total?', 'How?']", ["What is Biff's total?", "How?"]),
        ("\n['Is it the brothers' share?' ,'x',]\n", ["Is it the brothers' share?", "x"]),
        ("['one']", ["one"]),
        ('["What is Biff\'s total?"]', None),  # JSON: DSPy reads it
        ("[]", None),
        ("What is x?", None),
    ],
)
def test_python_quoted_items(text, expected):
    assert python_quoted_items(text) == expected


def test_a_single_quoted_list_keeps_its_apostrophes():
    sig = dspy.Signature("task -> questions: list[str], note: str")
    completion = (
        "[[ ## questions ## ]]\n['How many did Kimberly's brother pick?', 'What is x?']\n\n"
        "[[ ## note ## ]]\nit's fine\n\n[[ ## completed ## ]]"
    )
    assert dspy.ChatAdapter().parse(sig, completion)["questions"] == [
        "How many did Kimberly",
        "s brother pick?'",
        "What is x?",
    ]
    assert FieldRecoveringChatAdapter().parse(sig, completion) == {
        "questions": ["How many did Kimberly's brother pick?", "What is x?"],
        "note": "it's fine",
    }
