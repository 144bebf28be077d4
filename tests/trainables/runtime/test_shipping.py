"""User code reaches the workers through Ray's runtime environment, checked before Ray starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainables.runtime.sibling_plugin import write_plugin
from trainables.runtime import shipping

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fresh(monkeypatch):
    """An empty record of shipped folders (the process's own is left as it was)."""
    monkeypatch.setattr(shipping, "_FOLDERS", [])
    monkeypatch.delenv(shipping.ENV, raising=False)


def test_the_import_root_of_a_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    assert shipping.root_of("x", tmp_path / "x.py") == tmp_path
    assert shipping.root_of("pkg.x", tmp_path / "pkg" / "x.py") == tmp_path
    assert shipping.root_of("pkg", tmp_path / "pkg" / "__init__.py") == tmp_path


def test_a_folder_becomes_the_jobs_py_modules_and_the_project_stays_home(fresh, tmp_path):
    assert shipping.runtime_env() == {}
    shipping.add(ROOT)  # the project itself is installed on every node
    shipping.add(tmp_path)
    shipping.add(tmp_path)
    env = shipping.runtime_env()
    (wrap,) = env["py_modules"]  # under a name no package has, holding the folder by its name
    assert Path(wrap).name == shipping.code_name(tmp_path.resolve()).replace("-", "_")
    assert (Path(wrap) / tmp_path.name).resolve() == tmp_path.resolve()
    assert json.loads(env["env_vars"][shipping.ENV]) == [str(tmp_path.resolve())]
    assert ".git" in env["excludes"]


def test_a_worker_finds_its_shipped_copy_first(fresh, tmp_path, monkeypatch):
    """As Ray unpacks py_modules: <session>/.../_ray_pkg_<hash>/<folder name> on sys.path."""
    mine = tmp_path / "laptop" / "plugins"
    copy = tmp_path / "node" / "_ray_pkg_abc123" / shipping.code_name(mine) / "plugins"
    (mine / "sub").mkdir(parents=True)
    (copy / "sub").mkdir(parents=True)
    monkeypatch.setenv(shipping.ENV, json.dumps([str(mine)]))
    monkeypatch.setattr(sys, "path", [str(copy.parents[1]), *sys.path])
    assert shipping.locate(mine) == copy
    assert shipping.locate(mine / "sub") == copy / "sub"
    assert shipping.locate(tmp_path / "laptop") == tmp_path / "laptop"  # not shipped: itself
    assert shipping.locate(tmp_path / "nowhere") is None


def test_a_method_loaded_from_a_file_imports_the_module_beside_it(fresh, tmp_path):
    from trainables.objectives.methods import load_methods

    write_plugin(tmp_path)
    try:
        assert load_methods([str(tmp_path / "hg_item.py")]) == ["hgitem"]
        assert sys.modules["hg_item"].__file__ == str(tmp_path / "hg_item.py")
        assert shipping.folders() == [tmp_path.resolve()]
    finally:
        for m in ("hg_item", "hardground"):
            sys.modules.pop(m, None)
        from trainables.objectives import methods

        for table in (methods._METHODS, methods._SOURCES):
            table.pop("hgitem", None)
        for k in [k for k, v in methods._BY_SETTINGS.items() if v == "hgitem"]:
            del methods._BY_SETTINGS[k]
        sys.path.remove(str(tmp_path.resolve()))


def test_a_file_the_code_imports_but_ray_would_leave_out_is_refused(fresh, tmp_path):
    (tmp_path / "keep.py").write_text("X = 1\n")
    (tmp_path / "left_out.py").write_text("Y = 2\n")
    (tmp_path / ".gitignore").write_text("left_out.py\n")
    shipping.add(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        import keep  # noqa: F401

        (line,) = shipping.check()
        assert f"user code: {tmp_path.resolve()} goes to every worker (2 files" in line
        import left_out  # noqa: F401

        with pytest.raises(ValueError, match=r"left_out.py \(left_out\) is imported by your code "
                                             r"but left out of what Ray ships.*\.gitignore"):
            shipping.check()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("keep", None)
        sys.modules.pop("left_out", None)


def test_a_module_naming_a_relative_file_is_no_file_of_the_folder(fresh, tmp_path, monkeypatch):
    """torch.ops says its __file__ is "_ops.py"; run from inside the code's folder, that name used
    to resolve there and refuse a grid the user never had a file for."""
    import types

    shipping.add(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "fake_ops", types.ModuleType("fake_ops"))
    sys.modules["fake_ops"].__file__ = "_ops.py"
    (line,) = shipping.check()
    assert f"user code: {tmp_path.resolve()} goes to every worker" in line


def test_a_folder_over_rays_limit_is_refused_before_ray_starts(fresh, tmp_path, monkeypatch):
    (tmp_path / "big.bin").write_bytes(b"\0" * 2**20)
    shipping.add(tmp_path)
    monkeypatch.setattr(shipping, "LIMIT_MIB", 1)
    with pytest.raises(ValueError, match=r"1 MiB of files would go to every Ray worker .*"
                                         r"\(Ray's limit: 1 MiB\).*\.rayignore"):
        shipping.check()


@pytest.mark.slow
def test_a_plugin_importing_a_module_beside_it_trains_run_from_another_folder(tmp_path, tiny_bert):
    """The issue's hg_item.py: it trained nowhere (`No module named 'hardground'` in every
    worker). Run as a user would, from another folder, through the embedded Ray."""
    plug, elsewhere = tmp_path / "my plugins", tmp_path / "elsewhere"
    plug.mkdir()
    elsewhere.mkdir()
    grid = write_plugin(plug)
    from trainables.testing import write_tiny_profile

    profile = write_tiny_profile(elsewhere, tiny_bert, max_steps=3, eval_every=3)
    argv = [sys.executable, "-m", "orchestrator.ablate", "--grid", str(grid), "--seeds", "0", "1",
            "--profile", str(profile), "--tracking-uri", f"sqlite:///{elsewhere / 'mlflow.db'}",
            "--storage", str(elsewhere / "runs")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.monotonic()
    done = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=1500)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "No module named" not in out
    from orchestrator.tracking.client import Tracker

    tr = Tracker(f"sqlite:///{elsewhere / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    kids = tr.children(parent.info.run_id)
    assert {c.data.tags["mmemb.cell"] for c in kids} == {"MCSE", "HG"} and len(kids) == 4
    assert {c.info.status for c in kids} == {"FINISHED"}
    hg = [c for c in kids if c.data.tags["mmemb.cell"] == "HG"]
    assert all(tr.client.get_metric_history(c.info.run_id, "loss/grounding") for c in hg)
    print(f"\nplug-in with a sibling import: 4 runs FINISHED in {time.monotonic() - t:.0f} s")
