"""How a refusal of the tracking store says where to put it instead: the option the user typed,
or for the default store (``./mlflow.db``, which no option named) the option that replaces it."""

from __future__ import annotations


def elsewhere(option: str) -> str:
    """How to put the store elsewhere: the option itself, or for the default store (./mlflow.db,
    which no option named) the option that replaces it."""
    if option.startswith("--"):
        return f"point {option} elsewhere"
    return "pass --tracking-uri sqlite:///PATH/mlflow.db to put the store elsewhere"


def point(option: str) -> str:
    """How to name another store: the option itself, or for the default store the option that
    replaces it."""
    if option.startswith("--"):
        return f"point {option} at another file"
    return "pass --tracking-uri sqlite:///PATH/mlflow.db to use another file"

