"""The steps of the lab's `ray up` journey (tests/cluster/test_ray_up_local.py): docs/cluster.md's
commands verbatim, the file's ports, the REPLACE lines filled in, and what the test reads off the
machines (raylets, MLflow, a colleague's fresh shell)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.lab import Machine, missing_tools

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "cluster.local.yaml"
DOC = ROOT / "docs" / "cluster.md"
LAPTOP_IP, HEAD_IP, WORKER_IP = "10.77.0.1", "10.77.0.3", "10.77.0.2"
CLUSTER_TMP = "/tmp/ray-mmemb-lab"

# docs/cluster.md, "Machines your lab owns", verbatim.
TOKEN = "ray get-auth-token --generate"
UP = "RAY_UP_enable_autoscaler_v2=0 ray up -y cluster.local.yaml"
STATUS = "ray exec cluster.local.yaml 'ray status'"
STOP_ON_HEAD = "ray exec cluster.local.yaml 'ray stop'"
DOWN = "RAY_UP_enable_autoscaler_v2=0 ray down -y cluster.local.yaml"
OOM = ("running low on memory", "ran low on memory", "out of memory issue")
"""Ray's memory monitor killed a worker (the host's memory, shared with other work, ran short)"""

# Ray's own defaults, for a port the file leaves to Ray; MLflow's own for its server.
DEFAULT_PORTS = {"gcs": 6379, "dashboard": 8265, "client": 10001, "agent": 52365, "mlflow": 5000}
PORT_FLAGS = {"gcs": "--port", "dashboard": "--dashboard-port", "client": "--ray-client-server-port",
              "agent": "--dashboard-agent-listen-port"}
ON_EVERY_NODE = ("agent",)  # the others listen on the head only


# the plug-in, in the head's /tmp only: Ray ships its folder to the worker
PLUGIN_TABLE = ("ray exec cluster.local.yaml 'cd ~/mmemb && python -m orchestrator.ablate --grid "
                "/tmp/plugin/hg_grid.py --seeds 0 1 --array-size 1 --address auto --tracking-uri "
                "http://localhost:{mlflow_port} --storage /mnt/shared/runs'")


def table_command(mlflow_port: int) -> str:
    return ("ray exec cluster.local.yaml 'cd ~/mmemb && python -m orchestrator.ablate --grid table3 "
            f"--address auto --tracking-uri http://localhost:{mlflow_port} --storage /mnt/shared/runs'")


def cluster_ports(text: str) -> dict[str, int]:
    """The ports the file's Ray and MLflow listen on: its pins, else the defaults."""
    cfg = yaml.safe_load(text)
    (head,) = [c for c in cfg["head_start_ray_commands"] if "ray start" in c]
    (mlflow,) = [c for c in cfg["head_start_ray_commands"] if "mlflow server" in c]
    out = {}
    for name, flag in PORT_FLAGS.items():
        m = re.search(rf"{flag}[= ](\d+)", head)
        out[name] = int(m[1]) if m else DEFAULT_PORTS[name]
    m = re.search(r"mlflow server .*?--port[= ](\d+)", mlflow, re.S)
    out["mlflow"] = int(m[1]) if m else DEFAULT_PORTS["mlflow"]
    return out


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
    """The cluster's raylet on machine m: its node id, its address and its usage-stats setting."""
    (raylet,) = [pid for pid, name, cmd in m.processes()
                 if name == "raylet" and f"{CLUSTER_TMP}/" in cmd]
    args = Path(f"/proc/{raylet}/cmdline").read_bytes().split(b"\0")
    arg = {a.split(b"=", 1)[0].decode(): a.split(b"=", 1)[1].decode() for a in args if b"=" in a}
    env = dict(e.split(b"=", 1) for e in Path(f"/proc/{raylet}/environ").read_bytes().split(b"\0")
               if b"=" in e)
    return {"node_id": arg["--node_id"], "ip": arg["--node_ip_address"], "pid": str(raylet),
            "usage_stats": env.get(b"RAY_USAGE_STATS_ENABLED", b"").decode()}


MLFLOW_QUERY = r"""
import json, sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
exps = [e.experiment_id for e in c.search_experiments()]
out = []
for p in c.search_runs(exps, "tags.`mmemb.kind` = 'table'"):
    kids = c.search_runs(exps, f"tags.mlflow.parentRunId = '{p.info.run_id}'")
    out.append({"id": p.info.run_id, "status": p.info.status, "grid": p.data.tags.get("mmemb.grid"),
                "artifacts": [a.path for a in c.list_artifacts(p.info.run_id)],
                "children": [{"status": k.info.status, "trial": k.data.tags.get("mmemb.trial"),
                              "node": k.data.tags.get("mmemb.node")} for k in kids]})
print(json.dumps(out))
"""

# Run on the laptop through a tunnel: MLflow's health, the UI page of each link the table printed
# (the MLflow UI is one page: the part after # picks the run in the browser), then the table's run
# and its report.
THROUGH_TUNNEL = r"""
import json, sys, urllib.request
base, run, *links = sys.argv[1:]
assert urllib.request.urlopen(base + "/health", timeout=10).status == 200
for link in links:
    assert urllib.request.urlopen(link.split("#")[0], timeout=30).status == 200, link
got = json.load(urllib.request.urlopen(f"{base}/api/2.0/mlflow/runs/get?run_id={run}", timeout=30))
arts = json.load(urllib.request.urlopen(f"{base}/api/2.0/mlflow/artifacts/list?run_id={run}", timeout=30))
print(json.dumps({"status": got["run"]["info"]["status"], "artifacts": [f["path"] for f in arts.get("files", [])]}))
"""


def wait_for(check, timeout: float, what: str, poll: float = 2.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return value


def settle(check, timeout: float, poll: float = 2.0):
    """check() until it is falsy or `timeout` passes; -> its last value (falsy: settled)."""
    deadline = time.monotonic() + timeout
    while (value := check()) and time.monotonic() < deadline:
        time.sleep(poll)
    return value


def hint_commands(out: str) -> tuple[str, list[str]]:
    """The table's closing hint -> (its line, the commands it says to run on the laptop)."""
    (line,) = [ln for ln in out.splitlines() if ln.startswith("open the runs:")]
    m = re.search(r"(?:from|on) your laptop[^:]*: (.*?)(?:[;,] then .*)?\)?$", line)
    assert m, f"the closing hint names no command for the laptop: {line}"
    return line, [c.strip() for c in m[1].split(", or ") if c.strip()]


def fresh_shell(m: Machine, env: dict[str, str]) -> None:
    """A colleague's new login shell of the same account after `ray up`: nothing of the cluster."""
    script = 'echo "RAY_ADDRESS=[$RAY_ADDRESS] ray=$(type -t ray)"; exit\n'
    got = {}
    for argv in (["bash", "--login", "-i"], ["bash", "-i"]):
        done = m.run(argv, env=env, input=script, check=False)
        got[" ".join(argv)] = done.stdout.strip().splitlines()[-1:] or [done.stderr[-300:]]
    log("a colleague's fresh shell on the head after `ray up`", **got)
    for argv, line in got.items():
        assert line[0] in ("RAY_ADDRESS=[] ray=file", "RAY_ADDRESS=[] ray="), (argv, line)


def host_wheel_folders() -> list[Path]:
    """The folders this machine's pip finds wheels in (find-links): the lab's mirror serves them."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True).stdout
    found = re.findall(r"find-links='([^']*)'", out) + [os.environ.get("PIP_FIND_LINKS", "")]
    return [Path(f) for v in found for f in v.split() if Path(f).is_dir()]


