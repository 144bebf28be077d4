"""MLflow going away mid-table: writes land in the journal, replay restores them without duplicates."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator import sync
from orchestrator.tracking.client import TAG
from orchestrator.tracking.journal import PENDING, Journal
from trainables.models.mlflow_export import DATA


def plan(cell, seed):
    return {"run_name": f"{cell} | seed {seed}", "key": f"{cell}/seed-{seed}", "grid": "g",
            "cell": cell, "seed": seed, "config_hash": "h", "run": {"lr": 1e-5}}


def test_offline_writes_are_kept_and_replayed(tracker, tmp_path, monkeypatch, capsys):
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "journal.jsonl")
    a = box.start_child(parent, plan("A", 0))
    box.log_result(a, {"step": 3, "stsb_dev": 70.0})
    assert not box.offline and not box.path.exists()

    def down(*args, **kwargs):
        raise ConnectionError("server gone")

    for name in ("log_result", "start_child", "end", "reopen_child"):
        monkeypatch.setattr(tracker, name, down)
    box.log_result(a, {"step": 6, "stsb_dev": 71.0, "final": 1, "test/avg": 75.5})
    box.end(a, "FINISHED")
    b = box.start_child(parent, plan("B", 0))
    assert b == PENDING + "B/seed-0"
    box.log_result(b, {"step": 6, "final": 1, "test/avg": 74.0})
    box.set_tag(b, "mmemb.error", "")
    box.end(b, "FINISHED")
    assert box.offline and box.kept == 6
    assert "keeping results in" in capsys.readouterr().err
    monkeypatch.undo()

    # The server is back: one command uploads everything, the runs end FINISHED, once each.
    assert sync.main([str(box.path), "--tracking-uri", tracker.uri]) == 0
    assert not box.path.exists() and box.path.with_suffix(".uploaded").exists()
    children = {c.data.tags["mmemb.trial"]: c for c in tracker.children(parent)}
    assert set(children) == {"A/seed-0", "B/seed-0"}
    assert all(c.info.status == "FINISHED" for c in children.values())
    assert children["A/seed-0"].data.metrics["test/avg"] == 75.5
    assert children["B/seed-0"].data.metrics["test/avg"] == 74.0
    hist = tracker.client.get_metric_history(children["A/seed-0"].info.run_id, "stsb_dev")
    assert [(m.step, m.value) for m in hist] == [(3, 70.0), (6, 71.0)]


def test_replay_reuses_an_unfinished_run_of_the_same_trial(tracker, tmp_path):
    parent = tracker.start_parent("t", "table", "p", {})
    old = tracker.start_child(parent, plan("A", 1))  # left RUNNING by a dead driver
    box = Journal(tracker, tmp_path / "j.jsonl")
    box.offline = True
    h = box.start_child(parent, plan("A", 1))
    box.end(h, "FINISHED")
    sync.main([str(box.path), "--tracking-uri", tracker.uri])
    children = tracker.children(parent)
    assert [c.info.run_id for c in children] == [old]
    assert children[0].info.status == "FINISHED"


def model_folder(root, name):
    """What a worker writes for a member: an MLflow model folder around the student folder."""
    folder = root / name / "model"
    (folder / DATA).mkdir(parents=True)
    (folder / "MLmodel").write_text(f"flavors: {{}}  # {name}\n")
    (folder / DATA / "config.json").write_text(f'{{"name": "{name}"}}')
    return folder


def artifacts(tracker, run_id):
    def walk(path):
        for f in tracker.client.list_artifacts(run_id, path):
            yield from (walk(f.path) if f.is_dir else [f.path])

    return sorted(walk("model"))


def test_a_folder_not_needed_after_is_moved_into_a_local_store_not_copied(tracker, tmp_path):
    """``move``: a ``file:`` artifact store takes the model folder by a rename (the same weights
    file, no copy); without it the folder is copied and stays."""
    from orchestrator.tracking.client import local_artifacts

    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "journal.jsonl")
    a, b = box.start_child(parent, plan("A", 0)), box.start_child(parent, plan("B", 0))
    moved, kept = model_folder(tmp_path, "moved"), model_folder(tmp_path, "kept")
    inode = (moved / DATA / "config.json").stat().st_ino
    assert box.log_model(a, str(moved), move=True) is True
    assert box.log_model(b, str(kept)) is True
    assert artifacts(tracker, a) == artifacts(tracker, b) == ["model/MLmodel", f"model/{DATA}/config.json"]
    store_a = local_artifacts(tracker.client.get_run(a).info.artifact_uri)
    assert store_a is not None and (store_a / "model" / DATA / "config.json").stat().st_ino == inode
    assert not moved.exists() and kept.is_dir()
    uri = tracker.client.get_run(a).data.tags[f"{TAG}checkpoint"]
    assert Path(uri) == store_a / "model" / DATA


def test_local_artifacts_reads_only_a_local_folder():
    from orchestrator.tracking.client import local_artifacts

    assert local_artifacts("file:///x/mlartifacts/r/artifacts") == Path("/x/mlartifacts/r/artifacts")
    assert local_artifacts("file:///a%20b/artifacts") == Path("/a b/artifacts")
    assert local_artifacts("/x/artifacts") == Path("/x/artifacts")
    for remote in ("s3://bucket/r/artifacts", "mlflow-artifacts:/1/r/artifacts",
                   "http://host/artifacts", "file://otherhost/x"):
        assert local_artifacts(remote) is None


def test_log_model_is_journalled_offline_and_replay_uploads_the_folder(tracker, tmp_path, monkeypatch):
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "journal.jsonl")
    a = box.start_child(parent, plan("A", 0))
    online = model_folder(tmp_path, "online")
    assert box.log_model(a, str(online)) is True and not box.path.exists()
    assert artifacts(tracker, a) == ["model/MLmodel", f"model/{DATA}/config.json"]
    assert tracker.client.get_run(a).data.tags[f"{TAG}model"] == f"runs:/{a}/model"

    def down(*args, **kwargs):
        raise ConnectionError("server gone")

    for name in ("log_model_dir", "start_child", "end"):
        monkeypatch.setattr(tracker, name, down)
    late = model_folder(tmp_path, "late")
    assert box.log_model(a, str(late)) is False  # the upload fails: the folder waits in the journal
    b = box.start_child(parent, plan("B", 0))
    pending = model_folder(tmp_path, "pending")
    assert box.log_model(b, str(pending)) is False  # its run does not exist yet
    box.end(b, "FINISHED")
    entries = [json.loads(line) for line in box.path.read_text().splitlines()]
    assert [e.pop("id").split(":")[1] for e in entries] == ["1", "2", "3", "4"]
    assert [e["op"] for e in entries] == ["log_model", "start_child", "log_model", "end"]
    assert entries[0] == {"op": "log_model", "handle": a, "folder": str(late)}
    assert entries[2] == {"op": "log_model", "handle": PENDING + "B/seed-0", "folder": str(pending)}
    monkeypatch.undo()

    assert sync.main([str(box.path), "--tracking-uri", tracker.uri]) == 0
    children = {c.data.tags["mmemb.trial"]: c.info.run_id for c in tracker.children(parent)}
    rb = children["B/seed-0"]
    assert artifacts(tracker, rb) == ["model/MLmodel", f"model/{DATA}/config.json"]
    assert tracker.client.get_run(rb).data.tags[f"{TAG}model"] == f"runs:/{rb}/model"
    checkpoint = tracker.client.get_run(rb).data.tags[f"{TAG}checkpoint"]
    assert checkpoint.endswith(f"/model/{DATA}") and json.loads(
        (Path(checkpoint) / "config.json").read_text()) == {"name": "pending"}
    # A's second upload replaced its model with the later folder
    got = Path(tracker.client.download_artifacts(a, f"model/{DATA}/config.json", str(tmp_path / "dl")))
    assert json.loads(got.read_text()) == {"name": "late"}


def test_sync_refuses_a_missing_journal(tmp_path, capsys):
    assert sync.main([str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_journal_whose_folder_fails_moves_with_what_it_holds(tracker, tmp_path, monkeypatch,
                                                                capsys):
    """The journal's own folder stops taking writes (a full disk holds it too): it moves, with
    the entries it already held, to the first writable fallback, and says where."""
    parent = tracker.start_parent("t", "table", "p", {})
    monkeypatch.setattr(tracker, "end", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "x")))
    folder = tmp_path / "full"
    box = Journal(tracker, folder / "journal.jsonl", parent=parent,
                  fallbacks=[Path("/proc/no/such"), tmp_path / "fallback"])
    child = tracker.start_child(parent, plan("A", 0))
    box.end(child, "FINISHED")  # MLflow refuses: kept in the journal (header + the end)
    assert box.path == folder / "journal.jsonl" and box.kept == 2
    real_open = Path.open

    def full(self, *args, **kwargs):
        if self.parent == folder and "a" in (args[0] if args else kwargs.get("mode", "r")):
            raise OSError(28, "No space left on device")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full)
    box.set_tag(child, "mmemb.error", "disk full")
    assert box.path == tmp_path / "fallback" / "journal.jsonl" and box.moved_from.parent == folder
    lines = [json.loads(x) for x in box.path.read_text().splitlines()]
    assert [e["op"] for e in lines] == ["parent", "end", "set_tag"]  # nothing lost on the way
    assert not (folder / "journal.jsonl").exists()
    assert f"cannot write the journal in {folder}: No space left on device; it is now " \
           f"{box.path}" in capsys.readouterr().err


def test_a_journal_with_nowhere_to_go_says_so_and_keeps_trying(tracker, tmp_path, monkeypatch,
                                                                capsys):
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, Path("/proc/no/journal.jsonl"), parent=parent,
                  fallbacks=[Path("/proc/no/such")])
    box.offline = True
    box.end(parent, "FAILED")
    err = capsys.readouterr().err
    assert "error: cannot keep 2 result(s) in a journal: /proc/no" in err
    assert "MMEMB_JOURNAL_DIR" in err and box.kept == 0 and len(box.unwritten) == 2
    box.fallbacks = [tmp_path / "later"]  # a folder can take them again: nothing was dropped
    box.set_tag(parent, "k", "v")
    assert box.kept == 3 and [json.loads(x)["op"] for x in box.path.read_text().splitlines()] \
        == ["parent", "end", "set_tag"]


def test_an_artifact_folder_that_refuses_files_is_not_a_store_that_stopped_answering(
        tracker, tmp_path, monkeypatch, capsys):
    """Issue 31: a read-only artifact folder mid-table read as 'MLflow stopped answering' and left
    every run RUNNING; the store still answers, so only the files wait in the journal."""
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "journal.jsonl", parent=parent)
    a = box.start_child(parent, plan("A", 0))

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "mlartifacts"))

    monkeypatch.setattr(tracker, "log_model_dir", read_only)
    assert box.log_model(a, str(tmp_path / "model")) is False
    box.log_result(a, {"step": 6, "final": 1, "test/avg": 75.5})
    box.end(a, "FINISHED")
    assert not box.offline and box.refused_files and box.kept == 2  # header + the model
    run = tracker.client.get_run(a)
    assert run.info.status == "FINISHED" and run.data.metrics["test/avg"] == 75.5
    err = capsys.readouterr().err
    assert "MLflow cannot store files" in err and "the store still answers" in err
    assert [json.loads(x)["op"] for x in box.path.read_text().splitlines()] == ["parent", "log_model"]
