"""A new SQLite MLflow store seeded with MLflow's own empty schema, made once per MLflow version (MLflow internals,
behind :mod:`dspy_for.compat`).

MLflow creates a new database store's tables by running every migration of its history: about 2.5 s on two cores, in
every first run into a new ``mlflow.db``. :func:`seed_sqlite_store` copies instead an empty database that MLflow's own
``mlflow.store.db.utils._initialize_tables`` made once for the installed MLflow, kept in the user cache: the same
tables and schema revision, and no experiment (MLflow adds its default one, with the new store's artifact root, when
it opens the copy; ``_verify_schema`` then checks the revision as for any store). Whatever goes wrong leaves the new
store to MLflow, as before.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

__all__ = ["schema_template", "seed_sqlite_store"]

logger = logging.getLogger(__name__)


def seed_sqlite_store(db: Path) -> bool:
    """Create the SQLite store ``db`` (which must not exist) as a copy of MLflow's empty schema; False, with nothing
    written, when ``db`` exists or the schema cannot be made or copied (MLflow then creates the tables itself). The
    caller holds the store's lock."""
    if db.exists():
        return False
    try:
        template = schema_template()
        part = db.with_name(f".{db.name}.{os.getpid()}.seed")
        shutil.copyfile(template, part)
        os.replace(part, db)
    except Exception as exc:  # only a shortcut: MLflow's own table creation still works
        logger.debug("a new store %s is left to MLflow to create: %s", db, exc)
        return False
    return True


def schema_template(folder: Path | None = None) -> Path:
    """The empty schema of the installed MLflow (``mlflow-<version>.db`` in ``folder``, by default the user cache's
    ``mlflow-schema``), made by MLflow on first use under a file lock."""
    import mlflow
    import platformdirs
    from filelock import FileLock

    folder = folder or Path(platformdirs.user_cache_dir("dspy-for")) / "mlflow-schema"
    path = folder / f"mlflow-{mlflow.__version__}.db"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        if not path.is_file():
            part = folder / f".{path.name}.{os.getpid()}"
            part.unlink(missing_ok=True)
            _make_schema(part)
            os.replace(part, path)
    return path


def _make_schema(path: Path) -> None:
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
