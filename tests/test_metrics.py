from __future__ import annotations

import dspy
import pytest

from dspy_for.metrics import (
    choice_match,
    extract_choice,
    extract_number,
    integer_match,
    metric_for,
    numeric_match,
    numeric_match_with_feedback,
    word_sort_match,
)

CASES = [
    ("#### 42", 42.0),
    ("#### 1,234", 1234.0),
    ("Reasoning... 3 + 4 = 7\n#### 7", 7.0),
    ("step: 12 apples\n#### 12\nextra 99", 12.0),
    ("#### $70", 70.0),
    ("#### -5", -5.0),
    ("The answer is 7.", 7.0),
    ("So she has 18 eggs left", 18.0),
    ("$1,234.50", 1234.5),
    ("\u22125 degrees", -5.0),
    ("\u20133", -3.0),
    ("50%", 50.0),
    ("a 12.5% raise", 12.5),
    ("3/4", 0.75),
    ("1 1/2 cups", 1.5),
    ("-1/2", -0.5),
    ("1,000,000 people", 1000000.0),
    ("costs \u20ac2,500", 2500.0),
    ("\u00a315", 15.0),
    ("0.5", 0.5),
    (".5 liters", 0.5),
    ("-0.25", -0.25),
    ("x=2, y=10, so total 12", 12.0),
    ("2**3 = 8", 8.0),
    ("from 9:15 to 9:40 is 25 minutes", 25.0),
    ("no number here", None),
    ("", None),
    (None, None),
    (17, 17.0),
    (2.5, 2.5),
    (True, None),
    ("The result is 5/0", None),
    ("Answer: 3 apples and 4 pears, total 7", 7.0),
    ("#### 10\n#### 11", 11.0),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_extract_number(text, expected):
    assert extract_number(text) == expected


def test_numeric_match_typed_and_free_text():
    ex = dspy.Example(question="q", answer=18.0)
    assert numeric_match(ex, dspy.Prediction(answer=18.0))
    assert numeric_match(ex, dspy.Prediction(answer="so the total is 18 dollars"))
    assert numeric_match(ex, dspy.Prediction(answer="18.004"))
    assert not numeric_match(ex, dspy.Prediction(answer="18.02"))
    assert not numeric_match(ex, dspy.Prediction(answer="unknown"))


def test_feedback_metric_for_gepa():
    ex = dspy.Example(question="q", answer=5.0, gold_solution="2+3=5\n#### 5")
    good = numeric_match_with_feedback(ex, dspy.Prediction(answer="5"))
    bad = numeric_match_with_feedback(ex, dspy.Prediction(answer="6"))
    assert good.score == 1.0 and "Correct" in good.feedback
    assert bad.score == 0.0 and "6" in bad.feedback and "2+3=5" in bad.feedback


@pytest.mark.parametrize(
    ("text", "letter"), [("C", "C"), ("The answer is (C).", "C"), ("B) 12", "B"), ("answer: e", "E"), ("none", None)]
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


def test_other_metrics():
    assert choice_match(dspy.Example(answer="B"), dspy.Prediction(answer="(B) 4"))
    assert not choice_match(dspy.Example(answer="B"), dspy.Prediction(answer="A"))
    assert integer_match(dspy.Example(answer=7), dspy.Prediction(answer="There are 7 objects."))
    assert not integer_match(dspy.Example(answer=7), dspy.Prediction(answer="7.5"))
    assert word_sort_match(dspy.Example(answer="apple banana cherry"), dspy.Prediction(answer="Apple, banana,  cherry"))
    assert not word_sort_match(
        dspy.Example(answer="apple banana cherry"), dspy.Prediction(answer="banana apple cherry")
    )
    assert metric_for("gsm8k") is numeric_match and metric_for("aqua") is choice_match
