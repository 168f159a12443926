"""A new SQLite MLflow store is a copy of MLflow's own empty schema, made once per MLflow version: the same tables and
schema revision as a store MLflow creates itself, MLflow's migrations not run again, and a schema that cannot be made
leaves the new store to MLflow."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from dspy_for.compat import mlflow_schema
from dspy_for.experiments.tracking.store import setup_tracking


def _schema(db: Path) -> tuple[dict[str, set[tuple[object, ...]]], list[tuple[str, ...]]]:
    """Each table's columns (name, type, not null, default, key) and the schema revision: MLflow's own creation
    writes the same columns in an order that varies from run to run."""
    with closing(sqlite3.connect(db)) as con:
        names = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
        tables = {n: {tuple(c[1:]) for c in con.execute(f"pragma table_info('{n}')")} for n in names}
        revision = con.execute("select version_num from alembic_version").fetchall()
    return tables, revision


@pytest.fixture
def template_folder(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    made = mlflow_schema.schema_template

    monkeypatch.setattr(mlflow_schema, "schema_template", lambda folder_=None: made(folder_ or folder))
    return folder


def test_a_new_store_has_the_schema_mlflow_makes_without_running_its_migrations_again(
    template_folder, tmp_path, monkeypatch
):
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    own = tmp_path / "own.db"
    SqlAlchemyStore(f"sqlite:///{own}", (tmp_path / "own-artifacts").as_uri())  # MLflow's own creation

    setup_tracking(f"sqlite:///{tmp_path}/a/mlflow.db", "first")  # makes the schema once
    (template,) = template_folder.glob("mlflow-*.db")
    migrations: list[object] = []
    monkeypatch.setattr("mlflow.store.db.utils._initialize_tables", migrations.append)
    setup_tracking(f"sqlite:///{tmp_path}/b/mlflow.db", "second")
    assert migrations == []  # the second store was copied, not migrated

    for db in (template, tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"):
        assert _schema(db) == _schema(own), db
    import mlflow

    with mlflow.start_run() as run:  # the copy is a working store of its own, under its own artifact root
        mlflow.log_metric("accuracy", 0.5)
    got = mlflow.get_run(run.info.run_id)
    assert got.data.metrics == {"accuracy": 0.5} and got.info.artifact_uri.startswith((tmp_path / "b").as_uri())
    assert [e.name for e in mlflow.search_experiments()] == ["second", "Default"]


def test_a_schema_that_cannot_be_made_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    def refused(folder: Path | None = None) -> Path:
        raise PermissionError("the cache is read-only")

    monkeypatch.setattr(mlflow_schema, "schema_template", refused)
    assert not mlflow_schema.seed_sqlite_store(tmp_path / "new.db") and not (tmp_path / "new.db").exists()
    setup_tracking(f"sqlite:///{tmp_path}/c/mlflow.db", "made-by-mlflow")
    import mlflow

    assert mlflow.get_experiment_by_name("made-by-mlflow") is not None


def test_an_existing_store_is_never_replaced(template_folder, tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"")
    assert not mlflow_schema.seed_sqlite_store(db) and db.read_bytes() == b""
