"""The cluster files (cluster.yaml on AWS, cluster.local.yaml on owned machines) and their guide.

`ray up` has no dry run, so these checks stand in for one, offline: Ray's own config preparation
and schema validation, the invariants the project relies on (GPU workers, token auth on every
node, MLflow on the head, shared storage, the data under $MMEMB_DATA), shell syntax of every
command, the environment the setup really writes, and every command in README.md, "Running on a cluster" parsed
by the real CLIs. The MLflow start command is run for real in the slow test.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
AWS = ROOT / "cluster.yaml"
LOCAL = ROOT / "cluster.local.yaml"
DOCS = ROOT / "README.md"  # the cluster section lives in the README
COMMAND_KEYS = ("initialization_commands", "setup_commands", "head_setup_commands",
                "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")


def raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def prepared(cfg: dict) -> dict:
    """What `ray up` does to the file before anything is launched (private API, Ray 2.60)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    full = prepare_config(copy.deepcopy(cfg))
    validate_config(full)
    return full


def env_command(cfg: dict) -> str:
    (cmd,) = [c for c in cfg["setup_commands"] if "> ~/.mmemb_env" in c]
    return cmd


def mlflow_command(cfg: dict) -> str:
    (cmd,) = [c for c in cfg["head_start_ray_commands"] if "mlflow server" in c]
    return cmd


def sourced_env(cfg: dict, home: Path) -> dict[str, str]:
    """Run the setup command that writes the node environment, then read it back from a login."""
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    for _ in range(2):  # setup commands run again on every `ray up`: must stay idempotent
        subprocess.run(["bash", "-c", env_command(cfg)], env=env, check=True)
    out = subprocess.run(["bash", "-c", ". ~/.bashrc; env"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_ray_accepts_the_file(path):
    full = prepared(raw(path))
    assert full["head_node_type"] in full["available_node_types"]


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_ray_rejects_a_bogus_key(path):
    bad = raw(path)
    bad["bogus_key"] = 1
    with pytest.raises(jsonschema.ValidationError, match="bogus_key"):
        prepared(bad)
    if path == AWS:
        bad = raw(path)
        bad["available_node_types"]["gpu_small"]["bogus_key"] = 1
        with pytest.raises(jsonschema.ValidationError, match="bogus_key"):
            prepared(bad)


def test_aws_node_types():
    full = prepared(raw(AWS))
    types = full["available_node_types"]
    head = types[full["head_node_type"]]
    assert head["resources"] == {"CPU": 0}  # no trial or run is scheduled on the head
    workers = {n: t for n, t in types.items() if n != full["head_node_type"]}
    assert workers, "no worker node type"
    for name, t in workers.items():
        assert t["resources"].get("GPU", 0) >= 1, f"{name} declares no GPU"
        assert 0 <= t["min_workers"] <= t["max_workers"], name
        assert t["min_workers"] == 0, f"{name} would keep a GPU machine running while idle"
    assert sum(t["max_workers"] for t in workers.values()) <= full["max_workers"]
    # One image everywhere: Ray needs the same Python on every node.
    assert len({t["node_config"]["ImageId"] for t in types.values()}) == 1


def test_packed_runs_fit_the_small_worker():
    """docs: 4 arrays per GPU at the default 1 CPU each; a trial's driver holds no CPU
    (orchestrator.run.resources.TRIAL_DRIVER_RESOURCES), so a trial costs exactly its array's 1 CPU."""
    from orchestrator.run.resources import TRIAL_DRIVER_RESOURCES, Resources

    assert TRIAL_DRIVER_RESOURCES.get("CPU", 0) == 0 and TRIAL_DRIVER_RESOURCES.get("GPU", 0) == 0

    res = raw(AWS)["available_node_types"]["gpu_small"]["resources"]
    assert Resources(1.0, 0.25).concurrency({"CPU": res["CPU"], "GPU": res["GPU"]}) == 4
    assert "--gpus-per-trial 0.25" in DOCS.read_text()
    head = raw(AWS)["available_node_types"]["head"]
    for stale in ("0.01 CPU", "--cpus-per-trial 0.9"):  # drivers no longer hold CPU
        assert stale not in AWS.read_text() and stale not in LOCAL.read_text(), stale
    assert head["resources"] == {"CPU": 0}


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_commands_are_shell_strings(path):
    full = prepared(raw(path))
    for key in COMMAND_KEYS:
        for cmd in full[key]:
            # An unquoted `--resources='{"x": 1}'` line parses as a YAML mapping, not a string.
            assert isinstance(cmd, str), f"{key}: {cmd!r} is not a string (YAML quoting)"
            r = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
            assert r.returncode == 0, f"{key}: {r.stderr.strip()}\n{cmd}"


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_setup_installs_this_project(path):
    cfg = raw(path)
    repo = [remote for remote, local in cfg["file_mounts"].items() if local == "."]
    assert len(repo) == 1, "the repository is not shipped"
    installs = [c for c in cfg["setup_commands"] if "pip install" in c]
    assert any(f"-e {repo[0]}" in c and '"ray[default,tune,train]==2.60.0"' in c for c in installs)
    assert not any("torch==2.13.0" in c for c in installs)  # GPU nodes keep a CUDA torch
    if path == AWS:  # the image's CUDA torch, held in place
        assert any("torch==$(python -c" in c for c in installs)


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_token_auth_everywhere(path, tmp_path):
    cfg = raw(path)
    starts = [c for k in ("head_start_ray_commands", "worker_start_ray_commands")
              for c in cfg[k] if "ray start" in c]
    assert len(starts) == 2
    assert all("RAY_AUTH_MODE=token ray start" in c for c in starts)
    token = [(r, lo) for r, lo in cfg["file_mounts"].items() if r.endswith("/.ray/auth_token")]
    assert token == [(token[0][0], "~/.ray/auth_token")]
    assert sourced_env(cfg, tmp_path)["RAY_AUTH_MODE"] == "token"  # ray exec/attach/down shells


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_setup_environment(path, tmp_path):
    cfg = raw(path)
    (tmp_path / ".bashrc").write_text("# the user's own\n")
    env = sourced_env(cfg, tmp_path)
    data_mounts = {r: lo for r, lo in cfg["file_mounts"].items() if lo == "~/mmemb-data"}
    assert len(data_mounts) == 1
    remote = next(iter(data_mounts)).replace("~", str(tmp_path), 1)
    assert env["MMEMB_DATA"] == remote  # the paper profile reads where the data was shipped
    assert env["MLFLOW_DISABLE_TELEMETRY"] == "true"
    bashrc = (tmp_path / ".bashrc").read_text().splitlines()
    assert bashrc[0] == "# the user's own" and bashrc.count(". ~/.mmemb_env") == 1


def test_mlflow_runs_on_the_head_only():
    for path in (AWS, LOCAL):
        cfg = raw(path)
        cmd = mlflow_command(cfg)
        for flag in ("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false", "setsid", "--host 0.0.0.0",
                     "--port 5000", "--allowed-hosts", '"sqlite:///$HOME/mlflow/mlflow.db"',
                     "--artifacts-destination"):
            assert flag in cmd, f"{path.name}: {flag} missing"
        assert not any("mlflow" in c for k in ("worker_setup_commands", "worker_start_ray_commands")
                       for c in cfg[k])
    assert mlflow_command(raw(AWS)) == mlflow_command(raw(LOCAL))  # the slow test covers both


def test_shared_storage_on_aws():
    cfg = raw(AWS)
    assert any("exportfs" in c and "/mnt/shared" in c for c in cfg["head_setup_commands"])
    assert any('"$RAY_HEAD_IP":/mnt/shared /mnt/shared' in c for c in cfg["worker_setup_commands"])
    assert any("boto3" in c for c in cfg["head_setup_commands"])  # the autoscaler needs it
    assert "--storage /mnt/shared/runs" in DOCS.read_text()


def test_local_file_keeps_to_the_v1_autoscaler():
    text = LOCAL.read_text()
    assert "RAY_UP_enable_autoscaler_v2=0 ray up" in text and "57153" in text
    cfg = raw(LOCAL)
    head_start = [c for c in cfg["head_start_ray_commands"] if "ray start --head" in c]
    assert all("RAY_enable_autoscaler_v2=0" in c for c in head_start)
    ips = cfg["provider"]["worker_ips"]
    assert len(set(ips)) == len(ips) and cfg["provider"]["head_ip"] not in ips
    assert cfg["min_workers"] == cfg["max_workers"] == len(ips)


# --- README.md, "Running on a cluster": every command parses with the real command lines -------------------------

def doc_lines() -> list[str]:
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", DOCS.read_text(), flags=re.S)
    lines = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [ln.split("  #")[0].strip() for ln in joined.splitlines() if ln.strip()]
    # and the inline ones that name a cluster file, such as `ray down -y --workers-only cluster.yaml`
    lines += re.findall(r"`((?:[A-Z_a-z0-9]+=\S+ )*ray [^`]*cluster[^`]*)`", DOCS.read_text())
    return lines


def test_doc_ray_commands_parse():
    from ray.scripts.scripts import cli

    seen = set()
    for line in doc_lines():
        tokens = shlex.split(line)
        while tokens and re.fullmatch(r"[A-Z_a-z0-9]+=\S*", tokens[0]):
            tokens.pop(0)  # VAR=value prefixes
        if not tokens or tokens[0] != "ray":
            continue
        name, args = tokens[1], tokens[2:]
        assert name in cli.commands, f"no `ray {name}`: {line}"
        cli.commands[name].make_context(name, args)  # raises on unknown options or arity
        seen.add(name)
    assert {"up", "attach", "exec", "dashboard", "down", "rsync-down"} <= seen


def test_doc_ablate_commands_parse(capsys):
    from orchestrator.ablate import main
    from orchestrator.spec.registry import load_grid

    found = 0
    for line in doc_lines():
        if "orchestrator.ablate" not in line:
            continue
        argv = shlex.split(line.split("orchestrator.ablate", 1)[1].rstrip("'"))
        assert main([*argv, "--list"]) == 0, line  # argparse exits on an unknown flag
        load_grid(argv[argv.index("--grid") + 1])
        if "--profile" in argv and argv[argv.index("--profile") + 1] == "paper":
            assert "--address" in argv and "--tracking-uri" in argv, line  # cluster commands
            found += 1
    assert found >= 2


def test_doc_python_snippets_compile():
    snippets = [shlex.split(ln)[2] for ln in doc_lines() if ln.startswith("python -c ")]
    for src in snippets:
        compile(src, "<README.md>", "exec")


# --- the MLflow start command, for real ---------------------------------------------------------

@pytest.mark.slow
def test_mlflow_start_command_runs(tmp_path):
    """Start, answer on /health, refuse foreign Host headers, restart in place, stop by group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = mlflow_command(raw(AWS)).replace("5000", str(port))
    env = dict(os.environ, HOME=str(tmp_path))
    subprocess.run(["bash", "-c", cmd], env=env, check=True, timeout=300)
    pid_file = tmp_path / "mlflow" / "server.pid"
    first = int(pid_file.read_text())
    try:
        assert os.getpgid(first) == first  # its own process group: `kill -- -PGID` stops it all

        def status(host: str) -> int:
            url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
            try:
                return urllib.request.urlopen(
                    urllib.request.Request(url, headers={"Host": host}), timeout=10).status
            except urllib.error.HTTPError as e:
                return e.code

        assert status(f"localhost:{port}") == 200  # through `ray attach -p`
        assert status(f"10.0.3.7:{port}") == 200  # a worker in the VPC
        assert status(f"evil.example:{port}") == 403
        subprocess.run(["bash", "-c", cmd], env=env, check=True, timeout=300)  # `ray up` again
        second = int(pid_file.read_text())
        assert second != first and not Path(f"/proc/{first}").exists()
    finally:
        pid = int(pid_file.read_text())
        os.killpg(pid, 15)
        for _ in range(30):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.5)
