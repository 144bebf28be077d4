"""What every command line shares: options typed by their check, and one-line refusals.

A numeric option declares what makes sense for it with the same checks as the config fields
(``trainables.runtime.checks``): ``p.add_argument("--cpus-per-trial", type=option(POSITIVE), ...)``. A
bad value (NaN, infinity, zero, a negative, a word) is then refused while the command line is
parsed, before anything is imported or started, as one ``error:`` line naming the option, the
value and what it must be. ``tests/test_command_lines.py`` walks every option of every command's
parser: a numeric option added without a check fails there.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from trainables.runtime.checks import Check, Number


def one_line(e: BaseException) -> str:
    """An exception's message on one line (MLflow's carry response bodies over several)."""
    text = " ".join(str(e).split())
    return text[:600] if text else type(e).__name__


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose refusals are one ``error:`` line (exit 2), not usage + error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True, eq=False)  # hashed by identity: argparse looks types up in a dict
class Option:
    """An argparse ``type``: a number parsed and checked, or one of ``words`` (``auto``)."""

    check: Number
    words: Mapping[str, Any] = field(default_factory=dict)

    @property
    def __name__(self) -> str:  # what argparse calls the type in its own messages
        return "integer" if self.check.integer else "number"

    def __call__(self, text: str) -> Any:
        if text in self.words:
            return self.words[text]
        try:
            value: Any = int(text) if self.check.integer else float(text)
        except ValueError:
            also = f" or {' or '.join(map(repr, self.words))}" if self.words else ""
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {self.check.describe()}{also}") from None
        problem = self.check.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{text} {problem}")
        return value


def option(check: Check, **words: Any) -> Option:
    """The argparse ``type`` of a numeric option whose values ``check`` accepts; ``words`` maps
    accepted words to values (``option(count(1), auto=None)``)."""
    if not isinstance(check, Number):
        raise TypeError("option() takes a Number check (trainables.runtime.checks)")
    return Option(check, dict(words))


def refuse(message: str, code: int = 2) -> int:
    """Print the one ``error:`` line; the exit code to return."""
    print(f"error: {message}", file=sys.stderr)
    return code


def unexpanded_home(path: str | os.PathLike, option_name: str, given: str | None = None,
                    meant: str | None = None) -> None:
    """Refuse a path that starts with ``~`` no shell expanded (quoted, or passed by a YAML file or
    a script): as given it names a folder called ``~`` in the working folder, never the home
    folder. ``given``: the value as the user wrote it (a URI around the path); ``meant``: the
    value with the home folder in it, offered as the fix."""
    text = os.fspath(path)
    if not text.startswith("~"):
        return
    given = given or text
    if meant is None:
        try:
            meant = str(Path(text).expanduser())
        except RuntimeError:  # ~name of a user this machine does not know
            meant = "the full path"
    raise ValueError(f"{option_name} {given}: the leading ~ was not expanded (a shell expands it "
                     f"only when it is unquoted; a YAML file or a script passes it as it is), so "
                     f"this names a path under a folder called '{text.split('/')[0]}' in {Path.cwd()}; write "
                     f"{meant} instead")


def writable_folder(path: str | os.PathLike, option_name: str, hint: str = "") -> Path:
    """A folder a command will write into (or create): its nearest existing ancestor is a folder
    where a file can really be created (``os.access`` says yes to root even on /proc).
    -> the absolute path; one line naming the option when not. Nothing is left behind."""
    import tempfile

    unexpanded_home(path, option_name)
    target = Path(path).absolute()
    probe = target
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{option_name} {path}: {probe} is a file, so no folder can be made "
                         f"there; point {option_name} at a folder{hint}")
    why = "not a folder"
    if probe.is_dir():
        try:
            fd, name = tempfile.mkstemp(prefix=".mmemb-probe-", dir=probe)
            os.close(fd)
            os.unlink(name)
            return target
        except OSError as e:
            why = e.strerror or str(e)
    raise ValueError(f"{option_name} {path}: {probe} is not a writable folder ({why}); point "
                     f"{option_name} at a folder you can write{hint}")


def writable_file(path: str | os.PathLike, option_name: str) -> Path:
    """A file a command will write: its folder can be created and written (see
    :func:`writable_folder`); the refusal names the file as the user gave it."""
    target = Path(path).absolute()
    try:
        writable_folder(target.parent, option_name)
    except ValueError as e:
        raise ValueError(str(e).replace(f"{option_name} {target.parent}:",
                                        f"{option_name} {path}:", 1)) from None
    return target


def exit_now(rc: int | None) -> NoReturn:
    """End a command's process with ``rc`` once what it started has ended, skipping Python's
    teardown of the modules it imported.

    Why: after a table's last line its driver spent ~4 s (2 cores) in the interpreter's
    finalisation, torch, its compiler (Dynamo), Ray and MLflow freeing their objects one by one
    (``import torch`` alone adds ~1 s to any exit). What that teardown owes a command runs here,
    in the order Python runs it: the threads that are not daemons are ended and joined (a thread
    pool's idle workers told to stop first), then every ``atexit`` handler (Ray's shutdown, the
    embedded Ray's temp dir, logging's flush, the ``weakref.finalize`` of temporary folders),
    then the standard streams are flushed. Call it only from ``if __name__ == "__main__"``: a
    test calling ``main()`` keeps its process.
    """
    import atexit
    import contextlib
    import threading

    code = rc if isinstance(rc, int) else (0 if rc is None else 1)
    # CPython's own first two steps of an exit; where either is absent, the slow way.
    join_threads = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if join_threads is None or run_exitfuncs is None:
        sys.exit(code)
    # Not a plain join of the threads: a thread pool's idle workers (MLflow's artifact copies)
    # end only when the pool's exit hook, which this runs first, tells them to.
    join_threads()
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more reaches it
            stream.flush()
    os._exit(code)
