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


@cache
def code_version() -> str:
    """The code a campaign runs, in one word: the commit, with a fingerprint of the uncommitted
    changes when the tree is dirty ('3f2a9c1d0b7e+dirty.5e0c1a2b'), so that a ``--resume``
    after an edit can say the finished runs came from other code; the package version when the
    code is not a git checkout."""
    import hashlib

    state = git_state()
    if state["git_commit"] == "unknown":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"mmemb {version('mmemb')}"
        except PackageNotFoundError:
            return "unknown"
    out = state["git_commit"][:12]
    if state["git_dirty"] == "true":
        diff = _git("diff", "HEAD") or ""
        out += f"+dirty.{hashlib.sha256(diff.encode()).hexdigest()[:8]}"
    return out
