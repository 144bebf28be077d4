"""Names that moved: a forwarding module keeps an old import working for one release and says,
once, where the name lives now.

A plug-in method written from an earlier docs/methods.md imports what that page printed (for
example ``from trainables.checks import setting``). When a module moves, its old name stays as a
small module that re-exports the new one and calls :func:`moved` at import: a
``DeprecationWarning`` naming the new import, raised at the plug-in's own import line.

Python's default filters show a ``DeprecationWarning`` only when it is raised from ``__main__``;
one raised from a plug-in file that mmemb loads (a ``--methods`` file, a grid that imports its
method) would be hidden, and the user would learn of the move only when the old name is gone.
So when Python's default filters would drop the warning, :func:`moved` prints it itself, as one
line on stderr; when the filters let it through (``-W default``, a test's ``pytest.warns``) it is
raised as any warning is, and a user who silenced it (``-W ignore::DeprecationWarning``,
``PYTHONWARNINGS``) sees nothing. A module is imported once per process, so the line comes once.
"""

from __future__ import annotations

import sys
import warnings


def moved(old: str, new: str, example: str, stacklevel: int = 3) -> None:
    """Say that module ``old`` moved to ``new``; ``example`` is the import line to write now.

    Called from the forwarding module's body: ``stacklevel`` 3 is the line that imported it
    (this function, the module body, then the importer; importlib's own frames are skipped)."""
    message = (f"{old} is deprecated and goes in the next release: import from {new} instead "
               f"({example})")
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)
    if not seen and sys.warnoptions:  # the user's own -W / PYTHONWARNINGS dropped it
        return
    if not seen:  # Python's default filters drop it (outside __main__): say it anyway
        frame = sys._getframe(0)
        for _ in range(stacklevel - 1):  # as warnings.warn counts: importlib's frames skipped
            up = frame.f_back
            while up is not None and "importlib" in up.f_code.co_filename \
                    and "_bootstrap" in up.f_code.co_filename:
                up = up.f_back
            frame = up or frame
        where = f"{frame.f_code.co_filename} line {frame.f_lineno}"
        print(f"warning: {where}: {message}", file=sys.stderr, flush=True)
        return
    w = seen[0]  # let it through for real, where the filters in force show or record it
    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
