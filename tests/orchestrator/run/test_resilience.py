"""Fault injection on a whole table: results survive a killed worker, a killed driver, a node
leaving, MLflow going away, a NaN / OOM, and bad input is refused before anything runs.

Every table is ``grid_tiny.py`` (2 cells x 2 seeds, tiny BERT, demo data), its four members
packed into two arrays of two (``--array-size 2``: the packing, and so every member's numbers,
is then the same on any machine and cluster). One array is one Tune trial and one Ray Train run,
so a killed worker takes its array down and the array resumes from its checkpoint; a NaN drops
only its member. Each fault run is compared against one clean run of the same grid in another
store (``reference``): the same configs give the same numbers, so "nothing lost, nothing
duplicated" is checked value by value. Tables run as ``python -m orchestrator.ablate``
subprocesses in their own session; every process they start inherits a unique
``MMEMB_TEST_TAG`` and is killed by that tag afterwards (never ``ray stop``, which is
machine-wide). The fault tables are slow (minutes each on 2 shared cores) and marked so; the
bad-input cases start no Ray and run in the default suite.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from orchestrator.tracking.client import Tracker
from tests.waiting import wait_for
from trainables.testing import write_tiny_profile

ROOT = Path(__file__).resolve().parents[3]
GRID = str(Path(__file__).parents[1] / "grid_tiny.py")
KEYS = ["mcse/seed-0", "mcse/seed-1", "kdmcse/seed-0", "kdmcse/seed-1"]
ARRAYS = (("mcse/seed-0", "mcse/seed-1"), ("kdmcse/seed-0", "kdmcse/seed-1"))
"""the two arrays ``--array-size 2`` packs (baseline first, in plan order)"""
CELL = {"mcse": "MCSE", "kdmcse": "KDMCSE"}


def partner(key: str) -> str:
    (arr,) = [a for a in ARRAYS if key in a]
    return next(k for k in arr if k != key)


def log(what: str, **facts) -> None:
    """Measured outcomes, printed for the record (run pytest with -s to see them)."""
    print(f"\n[resilience] {what}: " + ", ".join(f"{k}={v}" for k, v in facts.items()), flush=True)


# --- processes: find and kill exactly what one table started ---------------------------------
def tagged(tag: str) -> list[int]:
    """Live processes whose environment carries MMEMB_TEST_TAG=tag (the table and all of Ray's)."""
    needle, pids = f"MMEMB_TEST_TAG={tag}".encode(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0") and \
                    (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def kill_tagged(tag: str) -> int:
    pids = tagged(tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not tagged(tag), f"the processes tagged {tag} to exit")
    return len(pids)


def _name(pid: int) -> str:
    """A process's title (ray::X) or its Python script's name (agent.py, ...)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    script = next((a for a in args[1:] if a.endswith(".py")), args[0])
    return Path(script).name if args[0].endswith(("python", "python3")) else args[0][:40]


class Table:
    """One ``orchestrator.ablate`` subprocess on the tiny grid, writing into ``store``."""

    def __init__(self, space: Path, store: Path, label: str, *extra: str,
                 env: dict[str, str] | None = None, tracking: str | None = None):
        store.mkdir(parents=True, exist_ok=True)
        self.store, self.label, self.tag = store, label, uuid.uuid4().hex
        self.tracking = tracking or f"sqlite:///{store / 'mlflow.db'}"
        argv = [sys.executable, "-m", "orchestrator.ablate", "--grid", GRID,
                "--profile", str(space / "tiny.yaml"), "--storage", str(store / "runs"),
                "--tracking-uri", self.tracking, "--array-size", "2", *extra]
        full = {**os.environ, "PYTHONPATH": str(ROOT), "MMEMB_TEST_TAG": self.tag,
                "TUNE_GLOBAL_CHECKPOINT_S": "1", **(env or {})}
        self.t0 = time.time()
        with (store / f"{label}.out").open("w") as out, (store / f"{label}.err").open("w") as err:
            self.proc = subprocess.Popen(argv, cwd=store, env=full, stdout=out, stderr=err,
                                         start_new_session=True)

    def wait(self, timeout: float = 1800) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.seconds = time.time() - self.t0
            kill_tagged(self.tag)
        return rc

    @property
    def out(self) -> str:
        return (self.store / f"{self.label}.out").read_text()

    @property
    def err(self) -> str:
        return (self.store / f"{self.label}.err").read_text()


@pytest.fixture
def tables():
    """Starts tables; whatever is still running at the end is killed by its tag."""
    started: list[Table] = []

    def start(*args, **kwargs) -> Table:
        started.append(Table(*args, **kwargs))
        return started[-1]

    yield start
    for t in started:
        kill_tagged(t.tag)


# --- reading the MLflow store ------------------------------------------------------------------
def finished_children(db: Path) -> dict[str, str]:
    """trial key -> run id of FINISHED children, read-only from the sqlite store (while it runs)."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return dict(con.execute(
            "SELECT t.value, r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = 'mmemb.trial' AND r.status = 'FINISHED'").fetchall())
    except sqlite3.OperationalError:  # tables not created yet
        return {}
    finally:
        con.close()


def wait_for_finished(db: Path, n: int, table: Table) -> dict[str, str]:
    def done() -> dict[str, str] | None:
        kids = finished_children(db)
        if len(kids) >= n:
            return kids
        assert table.proc.poll() is None, f"table ended early ({table.proc.returncode}): {table.err}"
        return None

    return wait_for(done, f"{n} finished children in {db}", limit_s=1800, poll_s=0.5)


def read_table(uri: str) -> tuple[Tracker, str, list]:
    """(tracker, parent run id, children) of the one table in the store."""
    tr = Tracker(uri)
    parents = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    assert len(parents) == 1, [p.info.run_id for p in parents]
    return tr, parents[0].info.run_id, tr.children(parents[0].info.run_id)


def by_key(children) -> dict[str, object]:
    keys = [c.data.tags["mmemb.trial"] for c in children]
    assert sorted(keys) == sorted(KEYS), f"children per key: {keys}"  # each trial exactly once
    return {c.data.tags["mmemb.trial"]: c for c in children}


def numbers(child) -> dict[str, float]:
    m = child.data.metrics
    return {k: v for k, v in m.items() if k.startswith("test/") or k in ("best_stsb_dev", "best_step")}


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def space(tmp_path_factory, tiny_bert) -> Path:
    d = tmp_path_factory.mktemp("resilience")
    write_tiny_profile(d, tiny_bert)
    return d


@pytest.fixture(scope="module")
def hashes(space) -> dict[str, str]:
    """member key -> config hash (what MMEMB_FAULT_INJECT targets)."""
    from orchestrator.spec.plan import plan_runs
    from orchestrator.spec.registry import load_grid

    profile = str(space / "tiny.yaml")
    members = plan_runs(load_grid(GRID), profile)
    return {m.key: m.config_hash for m in members}


@pytest.fixture(scope="module")
def reference(space) -> dict[str, dict[str, float]]:
    """The clean table: trial key -> final numbers."""
    t = Table(space, space / "reference", "run")
    rc = t.wait()
    assert rc == 0, t.err
    _, _, kids = read_table(t.tracking)
    ref = {k: numbers(c) for k, c in by_key(kids).items()}
    assert all(len(v) >= 10 for v in ref.values()), ref
    log("clean reference table", seconds=round(t.seconds), avg={k: round(v["test/avg"], 4)
                                                                 for k, v in ref.items()})
    return ref


def assert_same_numbers(kids_by_key: dict, reference: dict, keys=KEYS) -> None:
    for k in keys:
        assert numbers(kids_by_key[k]) == reference[k], k


def assert_dev_curve_once_per_eval(tr: Tracker, kids_by_key: dict) -> dict[str, list[int]]:
    """Every member's STS-B dev curve has each evaluation step once: a restarted array
    continues, it does not report its steps again. -> member key -> steps."""
    steps = {k: [m.step for m in tr.client.get_metric_history(c.info.run_id, "stsb_dev")]
             for k, c in kids_by_key.items()}
    for k, st in steps.items():
        assert st == sorted(set(st)) and st, (k, st)
    return steps


# --- 1. a worker process dies mid-run --------------------------------------------------------
@pytest.mark.slow
def test_killed_worker_restarts_its_array_from_checkpoint_and_keeps_the_table(space, hashes,
                                                                              reference, tables):
    """The kill takes down the whole array holding the victim (one process trains both of its
    members); the array resumes from its step-3 checkpoint and both members end as if nothing
    happened, as does the other array."""
    store = space / "kill-worker"
    victim = "mcse/seed-0"
    t = tables(space, store, "run", "--max-failures", "1", env={
        "MMEMB_FAULT_INJECT": f"kill:5:{hashes[victim]}",
        "MMEMB_FAULT_MARKER_DIR": str(store / "markers")})
    rc = t.wait()
    assert rc == 0, t.err
    assert (store / "markers" / f"fault-kill-{hashes[victim]}").read_text() == "5"  # it did die
    tr, _, kids = read_table(t.tracking)
    kids = by_key(kids)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    assert kids[victim].data.tags["mmemb.array"] == kids[partner(victim)].data.tags["mmemb.array"]
    assert_same_numbers(kids, reference)
    steps = assert_dev_curve_once_per_eval(tr, kids)
    log("worker killed at step 5", victim=victim, array=[victim, partner(victim)],
        seconds=round(t.seconds), dev_steps=steps[victim], children=len(kids))


# --- 2. the driver is SIGKILLed mid-table, then --resume -------------------------------------
@pytest.mark.slow
def test_driver_killed_mid_table_resume_runs_only_the_missing(space, reference, tables):
    store = space / "kill-driver"
    db = store / "mlflow.db"
    t = tables(space, store, "first")
    wait_for_finished(db, 1, t)
    t.proc.kill()  # SIGKILL: no handler, no cleanup, as a crash or an OOM killer
    t.proc.wait()
    killed_at = time.time() - t.t0
    orphans = sorted(_name(pid) for pid in tagged(t.tag))  # what the dead driver left running
    kill_tagged(t.tag)
    done_before = finished_children(db)
    tr, parent, kids = read_table(t.tracking)
    before = {c.data.tags["mmemb.trial"]: c for c in kids}
    history = {k: {m: [(x.step, x.value) for x in tr.client.get_metric_history(rid, m)]
                   for m in tr.client.get_run(rid).data.metrics} for k, rid in done_before.items()}

    r = tables(space, store, "resume", "--resume")
    rc = r.wait()
    assert rc == 0, r.err
    assert f"{len(done_before)} already done, {4 - len(done_before)} to run" in r.out
    tr, parent2, kids = read_table(t.tracking)
    assert parent2 == parent  # the same table continued
    kids = by_key(kids)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    for k, rid in done_before.items():  # kept, not re-run: same run, same history
        assert kids[k].info.run_id == rid
        assert {m: [(x.step, x.value) for x in tr.client.get_metric_history(rid, m)]
                for m in history[k]} == history[k]
    for k, c in before.items():  # an interrupted trial continued in its own run
        assert kids[k].info.run_id == c.info.run_id
    assert_same_numbers(kids, reference)
    assert_dev_curve_once_per_eval(tr, kids)
    log("driver SIGKILLed", killed_after_s=round(killed_at), finished_before=sorted(done_before),
        started_before=sorted(before), orphans_at_kill=orphans, resume_s=round(r.seconds))


# --- 3. a node leaves the cluster mid-table --------------------------------------------------
def _on_node(node_id: str) -> dict[str, str]:
    """actor class -> state, of the actors placed on one node (GCS tables; no dashboard needed)."""
    from ray._private.state import actors

    return {f"{a['ActorClassName']}#{i}": a["State"] for i, a in enumerate(actors().values())
            if a.get("Address", {}).get("NodeID") == node_id}


def _orphaned_groups() -> list[tuple[str, str]]:
    """(id, description) of live placement groups, read raw from the GCS for the creator flags."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    out = []
    for raw in state._connect_and_get_accessor().get_placement_group_table():
        pg = gcs_pb2.PlacementGroupTableData.FromString(raw)
        name = pg.DESCRIPTOR.fields_by_name["state"].enum_type.values_by_number[pg.state].name
        if name != "REMOVED":
            res = [dict(b.unit_resources) for b in pg.bundles]
            # Driver-made groups (Tune's) have a nil creator actor: never orphans.
            orphan = pg.creator_actor_dead and set(pg.creator_actor_id) != {0xFF}
            out.append((pg.placement_group_id.hex(), f"{pg.placement_group_id.hex()[:8]} {name} "
                        f"{res} creator_actor_dead={orphan}"))
    return out


def _unblock(table: Table, timeout: float = 240) -> str:
    """Diagnosis only: remove groups whose creating actor is dead; does the table then finish?"""
    from orchestrator.run.placement import free_placement_groups, orphaned_groups

    dead = orphaned_groups()
    free_placement_groups(dead)
    try:
        rc = table.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return f"removing {len(dead)} orphaned group(s) did not unblock it"
    return f"removing orphaned group(s) {[d[:8] for d in dead]} unblocked it: exit {rc} " \
        f"{time.time() - table.t0:.0f} s after start"


def dev_points(db: Path) -> int:
    """STS-B dev points logged so far (each array's first one comes with its first checkpoint)."""
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute("SELECT COUNT(*) FROM metrics WHERE key = 'stsb_dev'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["training", "startup"])
def test_node_leaving_mid_table_reschedules_its_trials(phase, space, reference, tables,
                                                        monkeypatch):
    """The second node dies while the array there trains ("training": its trial is up, past a
    first checkpoint) or while it is still starting ("startup": its CPU is reserved, no
    checkpoint yet). The array starts again on the remaining node, from its checkpoint if any."""
    import ray
    from ray._private.state import available_resources_per_node
    from ray.cluster_utils import Cluster

    store = space / f"node-leaves-{phase}"
    # Cluster() writes its address to <temp>/ray/ray_current_cluster, where every address-less
    # ray.init() on this machine (other sessions' tests) would find and join it: keep it private.
    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="mmray", dir="/tmp"))
    # The nodes' workers import this checkout, not whichever one pip installed in editable mode.
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    mem = 100 * 2**20
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": mem})
    node = cluster.add_node(num_cpus=1, object_store_memory=mem)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)  # the test's own view of the cluster
    try:
        t = tables(space, store, "run", "--address", cluster.address, "--max-failures", "1")
        removed_at = gone = None
        while t.proc.poll() is None and time.time() - t.t0 < 1500:
            if removed_at is None:
                here = _on_node(node.node_id)
                # A one-worker array trains in its Tune trial's actor (ImplicitFunc).
                worker = any(k.startswith(("ImplicitFunc", "RayTrainWorker")) and s == "ALIVE"
                             for k, s in here.items())
                reserved = available_resources_per_node()[node.node_id].get("CPU", 0.0) < 0.5
                # mid-run: past a first checkpoint (its dev point is logged with it)
                points = dev_points(store / "mlflow.db")
                training = worker and points > 0
                if (phase == "training" and training) or (phase == "startup" and reserved
                                                          and points == 0):
                    gone = sorted(k.split("#")[0] for k, s in _on_node(node.node_id).items()
                                  if s == "ALIVE")
                    finished_then = sorted(finished_children(store / "mlflow.db"))
                    cluster.remove_node(node, allow_graceful=False)
                    removed_at = time.time() - t.t0
            elif time.time() - t.t0 > removed_at + 1500:  # healthy: ~2 min; this is a deadlock
                stuck = [d for _, d in _orphaned_groups()]
                done = sorted(finished_children(store / "mlflow.db"))
                pytest.fail(f"table stuck 1500 s after the node left ({phase}, at "
                            f"{removed_at:.0f} s); actors lost with it: {gone}; finished: {done};"
                            f" placement groups held: {stuck}; {_unblock(t)}")
            time.sleep(0.3)
        rc = t.wait(60)
        alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert removed_at is not None, "no run ever reached the second node"
    assert alive[node.node_id] is False
    assert rc == 0, t.err[-3000:]
    _, _, kids = read_table(t.tracking)
    kids = by_key(kids)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    ended_on = {k: c.data.tags.get("mmemb.node", "")[:8] for k, c in kids.items()}
    assert node.node_id[:8] not in ended_on.values()
    assert_same_numbers(kids, reference)
    assert_dev_curve_once_per_eval(Tracker(t.tracking), kids)
    log(f"node removed ({phase})", removed_after_s=round(removed_at), lost_actors=gone,
        finished_then=finished_then, seconds=round(t.seconds), ended_on=ended_on)


# --- 4. MLflow goes away mid-table ----------------------------------------------------------
@pytest.mark.slow
def test_mlflow_down_mid_table_keeps_results_and_uploads_them_once(space, reference, tables):
    from orchestrator.results.browser_check import _free_port, start_server, stop_server

    store = space / "mlflow-down"
    store.mkdir()
    db, port = store / "mlflow.db", _free_port()
    backend, uri = f"sqlite:///{db}", f"http://127.0.0.1:{port}"
    server = start_server(backend, port, store / "server1.log")
    try:
        t = tables(space, store, "run", tracking=uri)
        wait_for_finished(db, 1, t)
        stop_server(server)
        down_at = time.time() - t.t0
        kept_before_down = sorted(finished_children(db))
        rc = t.wait()
    finally:
        if server.poll() is None:
            stop_server(server)
    assert rc == 3, t.err
    # one command left: it uploads and renders the report (issue 49: never "run this again")
    upload = re.search(r"^\s*(python -m orchestrator\.sync .+)$", t.err, re.M)
    assert upload and "did not answer" in t.err and "run this again" not in t.err, t.err
    journal = Path(shlex.split(upload.group(1))[3])
    assert journal.is_file() and str(journal) in t.err

    server = start_server(backend, port, store / "server2.log")  # back, on the same store
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, *shlex.split(upload.group(1))[1:]]
        runs = [subprocess.run(argv, cwd=store, env=env, capture_output=True, text=True,
                               timeout=600) for _ in range(2)]  # the second uploads nothing
        assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
        assert "INCOMPLETE" not in runs[0].stdout and "is now FINISHED" in runs[0].stdout
        assert "nothing to upload" in runs[1].stdout, runs[1].stdout
        tr, parent, kids = read_table(uri)
        assert tr.client.get_run(parent).info.status == "FINISHED"
        assert_dev_curve_once_per_eval(tr, by_key(kids))
        kids = by_key(kids)
    finally:
        if server.poll() is None:
            stop_server(server)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    assert_same_numbers(kids, reference)
    log("MLflow server killed", down_after_s=round(down_at), finished_before=kept_before_down,
        journal_entries=len(journal.with_suffix(".uploaded").read_text().splitlines()),
        table_s=round(t.seconds))


# --- 5. a NaN drops its member, an OOM fails its array; the table says INCOMPLETE -----------
NEIGHBOUR_TOL = 1e-4
"""a member whose array partner left mid-run: the stacked batch loses that partner's padding,
so its numbers agree with the reference to float rounding, not bit for bit (tests/trainables/
arrays/test_trainer.py shows the same at 1e-5 on the dev and test scores)"""


@pytest.mark.slow
@pytest.mark.parametrize("kind,victim,failed,reason", [
    # a NaN drops only its member, with the step and the term; its partner trains on
    ("nan", "kdmcse/seed-1", ["kdmcse/seed-1"], "non-finite loss at step 2: term 'total'"),
    # an OOM cannot be pinned on a member: the array fails, the other array completes
    ("oom", "mcse/seed-0", ["mcse/seed-0", "mcse/seed-1"], "OutOfMemoryError"),
])
def test_failure_is_reported_not_averaged(kind, victim, failed, reason, space, hashes, reference,
                                          tables):
    store = space / f"fault-{kind}"
    t = tables(space, store, "run", env={"MMEMB_FAULT_INJECT": f"{kind}:2:{hashes[victim]}"})
    rc = t.wait()
    assert rc != 0, t.out
    cell = CELL[victim.split("/")[0]]
    seeds = [k.rsplit("-", 1)[1] for k in failed]
    if kind == "nan":
        assert re.search(rf"FAILED {cell} seed {seeds[0]}: {reason}", t.out), t.out
    else:
        assert re.search(rf"FAILED array \w+ \(2 members\): {reason}", t.out), t.out
    tr, parent, kids = read_table(t.tracking)
    kids = by_key(kids)
    for k in failed:
        assert kids[k].info.status == "FAILED"
        assert reason in kids[k].data.tags["mmemb.error"], kids[k].data.tags["mmemb.error"]
    ok = [k for k in KEYS if k not in failed]
    assert all(kids[k].info.status == "FINISHED" for k in ok)
    alone = [k for k in ok if partner(k) not in failed]  # arrays the fault never touched
    assert_same_numbers(kids, reference, alone)
    for k in set(ok) - set(alone):
        assert numbers(kids[k]).keys() == reference[k].keys()
        for m, v in reference[k].items():
            assert numbers(kids[k])[m] == pytest.approx(v, abs=NEIGHBOUR_TOL), (k, m)
    md = tr.load_artifact_text(parent, "report.md")
    missing = ", ".join(seeds)
    assert f"{cell} INCOMPLETE (missing seeds {missing})" in md or \
        f"{cell} (baseline) INCOMPLETE (missing seeds {missing})" in md, md
    for seed in seeds:
        assert f"- {cell} seed {seed}: " in md and reason in md
    stats = md.split("Statistics vs", 1)[1] if "Statistics vs" in md else ""
    assert not re.search(r"^\| KDMCSE \| (?!all \| no statistics)", stats, re.M)  # none from fewer seeds
    assert tr.client.get_run(parent).info.status == "FAILED"
    log(f"{kind} injected at step 2", victim=victim, failed=failed, rc=rc,
        seconds=round(t.seconds), error=kids[victim].data.tags["mmemb.error"][:120])


# --- 6. bad input on every command line, refused before anything is launched -----------------
@pytest.fixture(scope="module")
def bad(tmp_path_factory, tiny_bert, tiny_clip) -> Path:
    """Profiles and files, each broken in one way, around the (valid) generated demo data."""
    import json

    import pyarrow.parquet as pq
    from PIL import Image

    from trainables.data.demo_corpus import generate_demo

    d = tmp_path_factory.mktemp("bad-input")
    demo = generate_demo(d / "demo", dim=32)
    (d / "textdir").mkdir()
    (d / "notparquet.parquet").write_text("caption,image\na dog,1\n")
    raw = demo.pairs_store.read_bytes()
    (d / "truncated.parquet").write_bytes(raw[: len(raw) // 2])
    t = pq.read_table(demo.pairs_store)
    meta = json.loads(t.schema.metadata[b"mmemb"]) | {"image_dim": 512}  # column stays 32 wide
    pq.write_table(t.replace_schema_metadata({b"mmemb": json.dumps(meta).encode()}),
                   d / "dim512.parquet")
    base = {"encoder": str(tiny_bert), "text_teachers": [str(tiny_bert)],
            "objective": {"teacher_weights": [1.0]}, "batch_size": 8, "max_steps": 6,
            "data": {"demo": False, "text": str(demo.text_file), "pairs": str(demo.pairs_store),
                     "senteval": str(demo.senteval_dir), "cache_dir": str(d / "cache")}}
    for name, data in {"ok": {}, "missing_text": {"text": "/nope/wiki1m.txt"},
                       "text_dir": {"text": str(d / "textdir")},
                       "not_parquet": {"pairs": str(d / "notparquet.parquet")},
                       "truncated": {"pairs": str(d / "truncated.parquet")},
                       "dim512": {"pairs": str(d / "dim512.parquet")},
                       "no_column": {"image_column": "clip_image"}}.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump(base | {"data": base["data"] | data}))
    (d / "syntax.yaml").write_text("data: [unclosed\n  demo: true\n")
    (d / "list.yaml").write_text("- lr\n- seed\n")
    (d / "journal.jsonl").write_text("")
    (d / "images").mkdir()
    Image.new("RGB", (8, 8)).save(d / "images" / "a.png")
    (d / "pairs.csv").write_text("image,caption\na.png,a black square\n")
    (d / "clip").symlink_to(tiny_clip)
    return d


def _closed() -> str:
    from orchestrator.results.browser_check import _free_port

    return f"http://127.0.0.1:{_free_port()}"


# (command, argv with {d} = the bad-input folder and {w} = this case's empty work folder, message)
GRIDARGS = f"--grid {GRID} --storage {{w}}/runs --tracking-uri sqlite:///{{w}}/mlflow.db"
SEARCH = "--space kdmcse_search --num-samples 2 --storage {w}/runs --tracking-uri sqlite:///{w}/mlflow.db"
TRAIN = "--storage {w}/runs"
EXTRACT = "--pairs {d}/pairs.csv --images {d}/images --model {d}/clip --out {w}/o.parquet --no-progress"
CASES = [
    ("ablate", f"{GRIDARGS} --profile {{d}}/missing_text.yaml", "text corpus not found at /nope/wiki1m.txt; fix data.text"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/text_dir.yaml", "textdir is a directory"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/not_parquet.yaml", "notparquet.parquet: not a readable Parquet file"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/truncated.yaml", "the file is corrupt or truncated"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/dim512.yaml", "column 'image' has dim 32 but metadata image_dim is 512"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/no_column.yaml", "no feature column 'clip_image'"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/syntax.yaml", "syntax.yaml is not valid YAML"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/list.yaml", "list.yaml must hold a mapping"),
    ("ablate", "--grid {d}/nope.py --storage {w}/runs", "file {d}/nope.py does not exist"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/ok.yaml --cpus-per-trial 64", "--cpus-per-trial 64 but this machine has"),
    # issue 14, at the command line (each also in-process in test_preflight.py)
    ("ablate", f"{GRIDARGS} --profile {{d}}/ok.yaml --seeds -1 0", "argument --seeds: -1 must be an integer >= 0"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/ok.yaml --seeds 0", "--seeds 0: needs at least 2 seeds"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/ok.yaml --gpus-per-trial {{gpus}}", "--gpus-per-trial {gpus} but this machine has"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/ok.yaml --tracking-uri htp://localhost:5000", "MLflow has no 'htp' store"),
    ("ablate", f"{GRIDARGS} --profile {{d}}/ok.yaml --tracking-uri sqlite:////proc/nope/mlflow.db", "folder /proc/nope does not exist"),
    ("search", f"{SEARCH} --profile {{d}}/ok.yaml --confirm-seeds 1 1", "--confirm-seeds 1 1: seeds must be distinct"),
    ("search", "--space nope", "unknown search 'nope'"),
    ("search", f"{SEARCH} --profile {{d}}/missing_text.yaml", "text corpus not found at /nope/wiki1m.txt"),
    ("search", f"{SEARCH} --profile {{d}}/truncated.yaml", "the file is corrupt or truncated"),
    ("search", f"{SEARCH} --profile {{d}}/syntax.yaml", "syntax.yaml is not valid YAML"),
    ("search", f"{SEARCH} --profile {{d}}/ok.yaml --gpus-per-trial {{gpus}}", "--gpus-per-trial {gpus} but this machine has"),
    ("search", f"{SEARCH} --profile {{d}}/ok.yaml --cpus-per-trial 64", "--cpus-per-trial 64 but this machine has"),
    ("search", f"{SEARCH} --profile {{d}}/ok.yaml --tracking-uri {{closed}}", "unreachable"),
    ("train", f"{TRAIN} --profile {{d}}/missing_text.yaml", "text corpus not found at /nope/wiki1m.txt"),
    ("train", f"{TRAIN} --profile {{d}}/not_parquet.yaml", "notparquet.parquet: not a readable Parquet file"),
    ("train", f"{TRAIN} --profile {{d}}/no_column.yaml", "no feature column 'clip_image'"),
    ("train", f"{TRAIN} --config {{d}}/syntax.yaml", "syntax.yaml is not valid YAML"),
    ("report", "--run 0123abcd --tracking-uri {closed}", "unreachable"),
    ("sync", "{d}/journal.jsonl --tracking-uri {closed}", "unreachable"),
    ("convert", "clip-json --json {d}/textdir --out {w}/o.parquet", "{d}/textdir"),
    ("convert", "clip-json --json {d}/textdir --out /proc/nope/o.parquet", "--out /proc/nope/o.parquet: /proc is not a writable folder"),
    ("extract", "--pairs {d}/pairs.csv --images {d}/pairs.csv --model {d}/clip --out {w}/o.parquet", "image folder not found"),
    ("extract", "--pairs {d}/pairs.csv --images {d}/images --model {d}/nope --out {w}/o.parquet", "cannot load CLIP config"),
    ("extract", f"{EXTRACT} --num-gpus-per-actor 8", "GPU"),
    ("extract", f"{EXTRACT} --num-cpus-per-actor 64", "CPU"),
]
MODULES = {"ablate": "orchestrator.ablate", "search": "orchestrator.search",
           "report": "orchestrator.report", "sync": "orchestrator.sync",
           "train": "trainables.train", "convert": "trainables.convert",
           "extract": "trainables.extract"}


@pytest.mark.parametrize("command,argv,message", CASES,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_bad_input_is_refused_before_anything_runs(command, argv, message, bad, tmp_path):
    """A one-line error naming the problem, a non-zero exit, no Ray started (extract excepted:
    it asks Ray what the actors may use), and nothing launched or written."""
    import torch

    work = tmp_path / "work"
    work.mkdir()
    fill = {"d": bad, "w": work, "closed": _closed(), "gpus": torch.cuda.device_count() + 2}
    args = shlex.split(argv.format(**fill))
    # A Ray start would leave its session folder here (short: Ray's socket paths live under it).
    ray_tmp = Path(tempfile.mkdtemp(prefix="mmray", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MMEMB_TEST_TAG": uuid.uuid4().hex,
           "RAY_TMPDIR": str(ray_tmp)}
    t0 = time.time()
    try:  # a subprocess: Ray started by a refused command must not outlive the case
        done = subprocess.run([sys.executable, "-m", MODULES[command], *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)  # a hang guard only
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m {MODULES[command]} {argv}: still running after 900 s (hangs "
                    "instead of refusing the input)")
    finally:
        kill_tagged(env["MMEMB_TEST_TAG"])
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and message.format(**fill) in errors[0], done.stderr[-3000:]
    started = list(ray_tmp.iterdir())
    shutil.rmtree(ray_tmp, ignore_errors=True)
    if command != "extract":
        assert not started, "Ray was started"
    assert not (work / "runs").exists() and not (work / "o.parquet").exists()
    if (work / "mlflow.db").exists():
        con = sqlite3.connect(work / "mlflow.db")
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
        con.close()
    log(f"bad input {command}", seconds=round(time.time() - t0, 1), error=errors[0][:160])
