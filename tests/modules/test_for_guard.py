from __future__ import annotations

import pytest

from dspy_for.modules.guard import RULES, check_question, numbers_in

TASK = "Tom has 3 boxes of 12 apples. He gives away 5. How many apples are left?"
ANSWER = "reasoning: 3 * 12 = 36; 36 - 5 = 31\nanswer: 31"
ALLOWED = numbers_in(TASK) | numbers_in(ANSWER)

CASES = [
    # acceptable questions
    ("How did you get 36?", []),
    ("Did you multiply 3 by 12?", []),
    ("Is 31 the number left or the number given away?", []),
    ("What does 'gives away 5' change in your total?", []),
    ("Could the boxes hold different numbers of apples?", []),
    ("Which quantity in the task did you use in step 2?", []),
    ("In line 3, why subtract rather than add?", ["proposes_fix"]),
    ("Are you sure every box has 12 apples?", []),
    ('"Did you account for the apples given away?"', []),
    ("1. What unit is your final answer in?", []),
    ("Why did you use 36 before subtracting?", []),
    # not a question
    ("Your subtraction is right.", ["not_a_question"]),
    ("What is 3 times 12", ["not_a_question"]),
    # imperative
    ("Fix the multiplication.", ["not_a_question", "imperative"]),
    ("Recalculate the total?", ["imperative"]),
    ("Make sure you subtract 5?", ["imperative"]),
    ("Please re-read the task?", ["imperative"]),
    ("Check the units?", ["imperative"]),
    # proposes an answer or a value
    ("Shouldn't it be 41?", ["proposes_answer"]),
    ("Isn't the answer 31?", ["proposes_answer"]),
    ("Is the correct answer 31?", ["proposes_answer"]),
    ("Did you mean 3 * 12 = 36?", ["proposes_answer"]),
    ("Why did you use 40?", ["proposes_answer"]),
    ("Wouldn't the total be 42?", ["proposes_answer"]),
    ("Is it actually 31?", ["proposes_answer"]),
    # proposes a fix or a method
    ("You should add 5 instead?", ["proposes_fix"]),
    ("You should add 7 instead?", ["proposes_answer", "proposes_fix"]),
    ("Let's recompute: is it 3 * 12?", ["proposes_fix"]),
    ("Why not divide the apples by the boxes?", ["proposes_fix"]),
    ("Did you forget that you need to subtract the 5?", ["proposes_fix"]),
    ("I suggest checking step 1, is it right?", ["proposes_fix"]),
    # empty
    ("", ["empty"]),
    ("?!", ["empty"]),
]


@pytest.mark.parametrize(("item", "expected"), CASES)
def test_guard_rules(item, expected):
    assert check_question(item, allowed_numbers=ALLOWED) == expected


def test_every_rule_is_exercised():
    seen = {r for _, reasons in CASES for r in reasons}
    assert seen == set(RULES)


def test_numbers_are_normalised():
    assert numbers_in("1,250 bottles and 2.50 dollars, 7.0 kg") == {"1250", "2.5", "7"}


def test_screen_questions_drops_repeats_and_splits_violations():
    from dspy_for.modules.guard import screen_questions

    s = screen_questions(
        ["  How did you get 36? ", "", "Shouldn't it be 48?", "how did you get 36", "Is 31 left?"],
        asked=["How did you get 36?!"],
        allowed_numbers=ALLOWED,
    )
    assert s.repeats == ["How did you get 36?", "how did you get 36"]
    assert s.items == ["Shouldn't it be 48?", "Is 31 left?"]
    assert s.violations == [("Shouldn't it be 48?", ["proposes_answer"])] and s.accepted == ["Is 31 left?"]


def test_unused_numbers_are_in_numeric_order():
    from dspy_for.modules.guard import unused_numbers

    assert unused_numbers("20 birds fly 50 miles, then 6 miles, 1,000 times", "20 birds") == ["6", "50", "1000"]
