from __future__ import annotations

from pathlib import Path

from trainables.runtime.checkpoint_store import MARKER, CheckpointStore


def _folder(tmp: Path, name: str, text: str) -> Path:
    d = tmp / "work" / name
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "state.pt").write_text(text)
    return d


def test_the_newest_complete_checkpoint_is_found_and_older_ones_deleted(tmp_path):
    store = CheckpointStore(str(tmp_path / "runs"), "array-a")
    assert store.latest() is None
    first = store.save(_folder(tmp_path, "1", "one"))
    second = store.save(_folder(tmp_path, "2", "two"))
    assert Path(second).parent == tmp_path / "runs" / "array-a"
    assert Path(second).name.startswith("checkpoint_") and second > first
    assert store.latest() == second
    assert not Path(first).exists()  # only the newest is kept
    assert not (tmp_path / "work" / "2").exists()  # the local folder was consumed
    with store.opened(store.latest()) as d:
        assert (d / "sub" / "state.pt").read_text() == "two"
    # A new store of the same name (a restarted trial, a --resume) finds it.
    assert CheckpointStore(str(tmp_path / "runs"), "array-a").latest() == second
    assert CheckpointStore(str(tmp_path / "runs"), "array-b").latest() is None


def test_keep_all_keeps_every_checkpoint(tmp_path):
    store = CheckpointStore(str(tmp_path / "runs"), "a", keep_all=True)
    paths = [store.save(_folder(tmp_path, str(i), str(i))) for i in range(3)]
    assert all(Path(p).exists() for p in paths)
    assert store.latest() == paths[-1]


def test_a_checkpoint_cut_short_is_never_loaded(tmp_path):
    """A copy without its marker (the process died mid-upload) does not count."""
    store = CheckpointStore(str(tmp_path / "runs"), "a")
    whole = store.save(_folder(tmp_path, "1", "one"))
    cut = Path(store.root) / "checkpoint_9999-12-31_23-59-59.000000"
    (cut / "sub").mkdir(parents=True)
    assert store.latest() == whole
    (cut / MARKER).write_text("")
    assert store.latest() == str(cut)


def test_a_clock_that_went_back_does_not_hide_the_newest(tmp_path):
    store = CheckpointStore(str(tmp_path / "runs"), "a")
    future = Path(store.root) / "checkpoint_9999-12-31_23-59-59.000000"
    future.mkdir(parents=True)
    (future / MARKER).write_text("")
    newest = store.save(_folder(tmp_path, "1", "one"))
    assert store.latest() == newest and not future.exists()


def test_object_storage_is_downloaded_and_removed_after(tmp_path, monkeypatch):
    """A storage URI goes through pyarrow's filesystem (here file://, the path S3 takes):
    copied up, the local folder removed, and opened as a temporary local copy."""
    store = CheckpointStore(f"file://{tmp_path / 'remote'}", "a")
    store.local = False  # take the copy path, as for s3://
    path = store.save(_folder(tmp_path, "1", "one"))
    assert not (tmp_path / "work" / "1").exists()
    with store.opened(path) as d:
        seen = d
        assert (d / "sub" / "state.pt").read_text() == "one"
        assert not str(d).startswith(str(tmp_path / "remote"))
    assert not seen.exists()
