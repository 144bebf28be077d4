"""Where a result came from: git commit and dirty state of the code, recorded on every run."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@cache
def git_state() -> dict[str, str]:
    """``{"git_commit": sha or "unknown", "git_dirty": "true"/"false"/"unknown"}``."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": sha or "unknown",
        "git_dirty": "unknown" if status is None else str(bool(status)).lower(),
    }
