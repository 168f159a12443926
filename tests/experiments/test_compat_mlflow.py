"""The MLflow internals tracing uses live behind dspy_for.compat.mlflow; an MLflow without them fails loudly."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from dspy_for.compat import mlflow as compat
from dspy_for.errors import MissingDependencyError

PIP = r"pip install 'mlflow>=3\.5,<4'"


def test_the_installed_mlflow_is_supported():
    compat.check_supported()
    root = compat.start_live_span("root", start_ns=1_000, span_type="CHAIN")
    child = compat.start_live_span("child", start_ns=2_000, span_type="LLM", parent=root)
    assert child.trace_id == root.trace_id and child.parent_id == root.span_id
    compat.end_live_span(child, outputs={"a": 1}, status="OK", end_ns=3_000)
    compat.end_live_span(root, outputs=None, status="OK", end_ns=4_000)
    assert compat.finished_span(child).outputs == {"a": 1}
    meta = compat.trace_metadata(inputs="{}", outputs="", token_usage=None, source_run="r1")
    assert meta["mlflow.sourceRun"] == "r1" and meta["mlflow.trace_schema.version"] == "3"
    assert compat.examples_source("bundled sample", "gsm8k", "test").to_dict()["split"] == "test"
    first, second = compat.new_trace_id(), compat.new_trace_id()
    assert re.fullmatch(r"tr-[0-9a-f]{32}", first) and first != second


@pytest.mark.parametrize(
    ("module", "name", "named"),
    [
        ("mlflow.tracking.fluent", "_get_experiment_id", "mlflow.tracking.fluent._get_experiment_id"),
        ("mlflow.tracing.utils", "generate_trace_id_v3", "mlflow.tracing.utils.generate_trace_id_v3"),
        ("mlflow.tracing.config", "get_config", "mlflow.tracing.config.get_config"),
    ],
)
def test_an_mlflow_without_an_internal_is_refused_with_the_install_command(monkeypatch, module, name, named):
    monkeypatch.delattr(importlib.import_module(module), name)
    with pytest.raises(MissingDependencyError, match=re.escape(named) + ".*" + PIP):
        compat.check_supported()


def test_a_private_method_gone_is_refused(monkeypatch):
    from mlflow.tracing.client import TracingClient

    monkeypatch.delattr(TracingClient, "_upload_trace_data")
    with pytest.raises(MissingDependencyError, match=rf"TracingClient\._upload_trace_data.*{PIP}"):
        compat.check_supported()


@pytest.mark.parametrize(("key", "renamed"), [("CHAT_USAGE", "mlflow.chat.usage"), ("MODEL", "mlflow.model")])
def test_a_renamed_key_is_refused(monkeypatch, key, renamed):
    from mlflow.tracing.constant import SpanAttributeKey

    monkeypatch.setattr(SpanAttributeKey, key, renamed)
    with pytest.raises(MissingDependencyError, match=rf"SpanAttributeKey\.{key}.*{PIP}"):
        compat.check_supported()


def test_importing_dspy_for_does_not_import_mlflow():
    code = "import sys, dspy_for, dspy_for.compat.mlflow, dspy_for.experiments.tracking.traces; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
