"""MLflow's own console lines the project says better: a new sqlite store's table list (INFO),
and the ERROR block with the SQLAlchemy traceback that MLflow logs for a store that is locked or
gone before it raises the same error again. The project catches that error and says in one line
what happened and what to run (the journal, the store checks); MLflow's 65 lines before it
would bury that line."""

from __future__ import annotations

import logging

DB_LOGGER = "mlflow.store.db.utils"
CAUGHT = "SQLAlchemy database error"
"""how MLflow's managed session starts the ERROR it logs before re-raising the error"""


class _DropCaught(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(CAUGHT)


def quiet_mlflow() -> None:
    """Idempotent: the level and one filter on MLflow's database logger."""
    log = logging.getLogger(DB_LOGGER)
    log.setLevel(logging.WARNING)
    if not any(isinstance(f, _DropCaught) for f in log.filters):
        log.addFilter(_DropCaught())
