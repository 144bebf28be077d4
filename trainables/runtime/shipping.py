"""User code (method, grid and search files) shipped to every Ray worker by Ray itself.

A method file given on the command line (``--methods my/hg_item.py``) or imported by a grid or
search file lives on the machine the command runs from. Its folder is recorded here and handed
to Ray as a ``py_modules`` entry of the job's runtime environment: Ray zips it (leaving out what
its ``.gitignore`` and ``.rayignore`` name, ``.git`` and ``__pycache__``), and unpacks it on each
node before a worker of the job starts. A worker puts its copy of the folder first on its import
path and imports the method's module by name, exactly as the driver did, so the method's own
imports of files beside it (``from hardground import ...``) work there as they did here, and a
module the driver could not import fails the dry run, not the workers.

:func:`check` refuses, before Ray starts, a folder Ray would refuse (over its size limit) or ship
without a file the driver imported from it (ignored by its ``.gitignore``).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ENV = "MMEMB_USER_CODE"
"""the shipped folders, as the driver named them (JSON list), in the order of ``py_modules``"""
EXCLUDES = (".git", "__pycache__")
LIMIT_MIB = 512
"""Ray's limit for one package (its gRPC message size)"""

_FOLDERS: list[Path] = []
_PROJECT = Path(__file__).resolve().parents[2]


def add(folder: str | os.PathLike) -> Path:
    """Ship ``folder`` (a user file's folder) to every worker of the next Ray job."""
    path = Path(folder).resolve()
    if path not in _FOLDERS and path != _PROJECT:  # the project is on every node already
        _FOLDERS.append(path)
    return path


def add_code(module: str, file: str | os.PathLike) -> Path | None:
    """Ship the folder ``module`` (``file``) is imported from, unless Ray's workers import it
    without: an installed package, or this project (on every node of a cluster already)."""
    root = root_of(module, file)
    if root == _PROJECT or any(root == f or f in root.parents for f in _FOLDERS):
        return None
    if any(part in ("site-packages", "dist-packages") for part in root.parts):
        return None
    return add(root)


def folders() -> list[Path]:
    return list(_FOLDERS)


def root_of(module: str, file: str | os.PathLike) -> Path:
    """The folder that must be on the import path for ``import module`` to load ``file``."""
    path = Path(file).resolve()
    depth = module.count(".") + (path.name == "__init__.py")
    return path.parents[depth]


def put_first(folder: Path) -> None:
    """``folder`` first on this process's import path (kept there: a method imports lazily)."""
    entry = str(folder)
    if entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)


def code_name(folder: Path) -> str:
    """The name ``folder`` travels under: never the name of a package a worker imports (a user's
    folder called ``orchestrator`` or ``tests`` would shadow it on the workers' import path)."""
    return "mmemb_code_" + hashlib.sha1(str(folder).encode()).hexdigest()[:12]


_STAGE: list[Path] = []


def staged(folder: Path) -> Path:
    """A folder named :func:`code_name` holding a link to ``folder`` under its own name: what Ray
    zips (it follows the link), so a worker finds ``<Ray's copy>/<code name>/<folder name>``."""
    if not _STAGE:
        _STAGE.append(Path(tempfile.mkdtemp(prefix="mmemb-code-")))
        atexit.register(shutil.rmtree, _STAGE[0], True)
    wrap = _STAGE[0] / code_name(folder)
    link = wrap / folder.name
    if not link.is_symlink():
        wrap.mkdir(exist_ok=True)
        link.symlink_to(folder, target_is_directory=True)
    return wrap


def runtime_env() -> dict:
    """The job's runtime environment that ships the recorded folders ({} when none)."""
    sent = [f for f in _FOLDERS if f.is_dir()]  # a test's folder may be gone since
    if not sent:
        return {}
    return {"py_modules": [str(staged(f)) for f in sent], "excludes": list(EXCLUDES),
            "env_vars": {ENV: json.dumps([str(f) for f in sent])}}


def shipped(folder: Path) -> Path | None:
    """This worker's copy of ``folder`` (one the driver shipped), None outside a Ray job that
    shipped it. Ray puts each unpacked package (``_ray_pkg_<hash>``) on the import path."""
    try:
        sent = [Path(f) for f in json.loads(os.environ.get(ENV, "[]"))]
    except ValueError:
        return None
    if folder not in sent:
        return None
    for base in (Path(p) for p in sys.path if Path(p).name.startswith("_ray_pkg_")):
        copy = base / code_name(folder) / folder.name
        if copy.is_dir():
            return copy
    return None


def locate(root: Path) -> Path | None:
    """Where ``root`` (a folder of the driver's machine) is in this process: the shipped copy of
    the recorded folder that holds it, else the folder itself where it exists."""
    try:
        sent = [Path(f) for f in json.loads(os.environ.get(ENV, "[]"))]
    except ValueError:
        sent = []
    for folder in sent:
        if root == folder or folder in root.parents:
            copy = shipped(folder)
            if copy is not None:
                return copy / root.relative_to(folder)
    return root if root.is_dir() else None


def shipped_files(folder: Path) -> tuple[set[Path], int]:
    """The files Ray would ship of ``folder`` (its own ignore rules) and their total size."""
    from trainables.runtime.ray_private import walk_shipped

    include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    files: set[Path] = set()
    total = [0]

    def take(p: Path) -> None:
        if p.is_file():
            files.add(p.resolve())
            total[0] += p.stat().st_size

    walk_shipped(folder, list(EXCLUDES), take, include_gitignore)
    return files, total[0]


def check() -> list[str]:
    """Refuse what a worker would meet; -> one 'checked' line per shipped folder."""
    out = []
    for folder in [f for f in _FOLDERS if f.is_dir()]:
        files, size = shipped_files(folder)
        mib = size / 2**20
        if mib >= LIMIT_MIB:
            raise ValueError(f"{folder}: {mib:.0f} MiB of files would go to every Ray worker with "
                             f"the code there (Ray's limit: {LIMIT_MIB} MiB); keep your method, "
                             "grid and search files in a folder of their own, or list what they "
                             "do not need in a .rayignore file there")
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None)
            # torch.ops says its __file__ is "_ops.py": a relative name is no file of the folder
            if not f or not f.endswith(".py") or not os.path.isabs(f):
                continue
            p = Path(f).resolve()
            if folder in p.parents and p not in files:
                raise ValueError(f"{p} ({name}) is imported by your code but left out of what Ray "
                                 f"ships to the workers (a .gitignore or .rayignore in {folder} "
                                 "names it); remove it from that file, or move it beside the code")
        out.append(f"user code: {folder} goes to every worker ({len(files)} files, {mib:.1f} MiB)")
    return out
