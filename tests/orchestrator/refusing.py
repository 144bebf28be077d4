"""What the refusal tests share: a command line run in a work folder, and the check that it was
refused in one line with nothing started or written."""

from __future__ import annotations

from pathlib import Path


def run_in(work: Path, main, argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """``main(argv)`` from ``work`` -> (exit code, stdout, stderr); Ray must not have started."""
    import ray

    monkeypatch.chdir(work)
    try:
        rc = main(argv)
    except SystemExit as e:  # refused while parsing the command line
        rc = e.code
    out, err = capsys.readouterr()
    assert not ray.is_initialized(), "Ray was started"
    return rc, out, err


def refused(work: Path, main, argv: list[str], message: str, capsys, monkeypatch,
            code: int = 2) -> str:
    """Exit ``code``, exactly one ``error:`` line holding ``message``, no traceback, and nothing
    written in ``work`` (no mlflow.db, no runs/: its listing is unchanged)."""
    before = sorted(p.name for p in work.iterdir())
    rc, out, err = run_in(work, main, argv, capsys, monkeypatch)
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == code, out[-2000:] + err[-2000:]
    assert len(errors) == 1 and message in errors[0], err[-3000:]
    assert "Traceback" not in err
    assert sorted(p.name for p in work.iterdir()) == before, "something was written"
    return errors[0]
