"""Importing a file the user wrote (a grid, a search space, a method): it is code, and code can
end the process as well as raise.

A grid file that calls ``sys.exit(0)`` at import made ``ablate`` exit 0 having checked nothing;
one that parses a command line with ``argparse`` printed its own usage (argparse reads this
command's arguments, fails, and exits), naming neither file; Ctrl-C during a slow import was
answered with advice to ``--resume`` a run that never started. :func:`importing` turns each into
one line naming the file, the line and what it did.
"""

from __future__ import annotations

import contextlib
import io
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

_OURS = tuple(str(Path(__file__).resolve().parents[2] / d) for d in ("orchestrator", "trainables"))
"""the packages that load a user's files: a failure inside them is not the file at fault"""

MAIN_GUARD = 'if __name__ == "__main__":'


class ImportExited(ValueError):
    """A user's file exited (``sys.exit``, argparse) while it was imported; the message is the
    one line naming it."""


class ImportInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while a user's file was being imported; the message names the file
    and the line it was running."""


def at_fault(e: BaseException, where: str) -> tuple[str, int | None]:
    """(file, line) at fault for an exception raised while importing ``where``: the file of a
    SyntaxError, else the innermost frame in a file of the user's (not Python's, a library's or
    mmemb's own), so a grid importing a broken method file names the method file."""
    import sysconfig

    if isinstance(e, SyntaxError) and e.filename:
        return e.filename, e.lineno
    libs = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")
              and not f.filename.startswith((*_OURS, *filter(None, libs)))]
    if frames:
        return frames[-1].filename, frames[-1].lineno
    return where, None


def _head(e: BaseException, where: str) -> str:
    """``FILE: line N`` of the line at fault, with ``(imported by WHERE)`` when it is another
    file than the one asked for."""
    file, line = at_fault(e, where)
    by = "" if Path(file).name == Path(where).name else f" (imported by {where})"
    return f"{where if not by else file}{by}: " + (f"line {line}: " if line else "")


def _argparse_error(e: SystemExit, printed: str) -> str | None:
    """argparse's own complaint when ``e`` is its exit (``parse_args`` on arguments it does not
    take), else None."""
    if not any(Path(f.filename).name == "argparse.py" for f in traceback.extract_tb(e.__traceback__)):
        return None
    said = [ln.split(": error: ", 1)[1] for ln in printed.splitlines() if ": error: " in ln]
    return said[-1] if said else ("it printed its help" if e.code in (0, None) else "")


def exit_line(e: SystemExit, where: str, kind: str, printed: str = "") -> str:
    """One line for a user's file that exited while it was imported."""
    head = _head(e, where)
    why = (f"a {kind} is imported, not run as a script: move that part under {MAIN_GUARD} "
           "(or out of the file); fix that file")
    complaint = _argparse_error(e, printed)
    if complaint is not None:
        said = f" ({complaint})" if complaint else ""
        return (f"{head}parses a command line with argparse while it is imported, and argparse "
                f"exited on this command's own arguments{said}; {why}")
    code = e.code
    call = f"sys.exit({code!r})" if code is not None else "sys.exit()"
    ends = ("as a success, having checked nothing" if code in (0, None) else
            f"with exit status {code} and no word of why" if isinstance(code, int) else
            f"printing only {str(code)[:80]!r}")
    return f"{head}calls {call} while it is imported, which would end this command {ends}; {why}"


def interrupted_line(e: KeyboardInterrupt, where: str, kind: str) -> str:
    """``interrupted (Ctrl-C) while importing the grid file F, at line N`` (the line it was
    running: what to look at when a file is slow to import)."""
    file, line = at_fault(e, where)
    at = "" if not line else f", at line {line}" + (
        "" if Path(file).name == Path(where).name else f" of {file}, which it imports")
    return f"interrupted (Ctrl-C) while importing the {kind} {where}{at}"


@contextlib.contextmanager
def importing(where: str | Path, kind: str) -> Iterator[None]:
    """Run the import of the user's file ``where`` (a ``kind``: 'grid file', 'search space
    file', 'method file') inside this block: its ``SystemExit`` (``sys.exit``, argparse) becomes
    an :class:`ImportExited` (a ``ValueError``) naming the file and line, its ``KeyboardInterrupt`` an
    :class:`ImportInterrupted` that does the same. What the file writes to stderr is held back
    while it runs (argparse's usage, which names neither file) and passed on when it exits
    normally or raises anything else."""
    where = str(where)
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    except SystemExit as e:
        raise ImportExited(exit_line(e, where, kind, held.getvalue())) from None
    except ImportInterrupted:
        raise  # a file imported by this one: already named
    except KeyboardInterrupt as e:
        raise ImportInterrupted(interrupted_line(e, where, kind)) from None
    except BaseException:
        sys.stderr.write(held.getvalue())
        raise
    else:
        sys.stderr.write(held.getvalue())
