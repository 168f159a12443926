"""The small comparison several tests run: CoT (the baseline) and FOR-Prompting with one round on the first 4 items
of the bundled GSM8K sample, on a fake model name a test's scripted LM or test server answers."""

from __future__ import annotations


def config(experiment: str) -> str:
    """The comparison as a config file's text, under MLflow experiment ``experiment``."""
    return f"""
experiment = "{experiment}"
lm = "openai/fake-model"
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 4
[[methods]]
name = "cot"
[[methods]]
name = "for"
label = "for_n1"
options = {{ rounds = 1 }}
"""
