"""The driver's Ray helpers: raylet noise filtered, storage paths, remote error lines."""

from __future__ import annotations

from trainables.runtime import ray_env


def test_raylet_worker_pool_hints_are_dropped_and_other_messages_print_once(capsys, monkeypatch):
    import ray._private.worker as rw

    monkeypatch.setattr(rw, "print_to_stdstream", rw.print_to_stdstream)  # restored afterwards
    ray_env.quiet_raylet()
    ray_env.quiet_raylet()  # idempotent: not wrapped twice
    noise = ("WARNING: 8 PYTHON worker processes have been started on node: x with address: "
             "1.2.3.4, which is 4x the maximum expected startup concurrency (2).")
    for _ in range(3):
        rw.print_to_stdstream({"lines": [noise], "pid": "raylet", "is_err": False}, ignore_prefix=False)
        rw.print_to_stdstream({"lines": ["A worker died"], "pid": "raylet", "is_err": False},
                              ignore_prefix=False)
    rw.print_to_stdstream({"lines": ["step 3"], "pid": 42, "is_err": False}, ignore_prefix=False)
    out = capsys.readouterr().out
    assert "PYTHON worker processes" not in out
    assert out.count("A worker died") == 1 and "step 3" in out


def test_storage_uri_and_root_cause(tmp_path):
    assert ray_env.storage_uri("s3://bucket/x") == "s3://bucket/x"
    assert ray_env.storage_uri(str(tmp_path / "runs")) == str((tmp_path / "runs").resolve())
    err = RuntimeError("Traceback ...\n  File x\nray.exceptions.RayTaskError: wrapped\n"
                       "torch.OutOfMemoryError: CUDA out of memory (injected at step 2)\n")
    assert ray_env.root_cause(err) == "OutOfMemoryError: CUDA out of memory (injected at step 2)"


def test_ray_state_dumps_go_to_a_file_the_output_names(monkeypatch, capsys, tmp_path):
    """Issue 31: on a lost node about 20 `[state-dump]` lines flooded the table's output."""
    import ray._private.worker as rw

    monkeypatch.setattr(rw, "print_to_stdstream", rw.print_to_stdstream)
    monkeypatch.setattr(ray_env, "_dump_log", [tmp_path / "dumps.log"])
    ray_env.quiet_raylet()
    dump = [f"[state-dump] NodeManager: line {i}" for i in range(20)]
    rw.print_to_stdstream({"lines": [*dump, "A node died"], "pid": "raylet", "is_err": True},
                          ignore_prefix=False)
    out, err = capsys.readouterr()
    assert "[state-dump]" not in out + err and "A node died" in out + err
    assert (tmp_path / "dumps.log").read_text().splitlines() == dump
