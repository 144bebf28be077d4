"""The closing line of a table or search: how to open its runs in the MLflow UI, from where you sit.

A local store opens with ``mlflow ui``. A tracking server is already the UI; one on this machine's
loopback (a cluster's head: the cluster files start MLflow on 127.0.0.1) is reached from a laptop
through an SSH tunnel. On a head that `ray up` set up, the line says the tunnel for that cluster:
``ray attach FILE -p PORT`` with the cluster file the user gave `ray up` (found among the files
`ray up` uploaded with this repository, by the cluster name Ray recorded on the head), and on
machines of your own (Ray's ``local`` provider) also the plain ``ssh -N -L`` to the head's address.
"""

from __future__ import annotations

import getpass
import socket
from pathlib import Path
from urllib.parse import urlsplit

BOOTSTRAP = Path("~/ray_bootstrap_config.yaml")
"""what `ray up` leaves on the head: the cluster file as Ray completed it"""
REPO = Path(__file__).resolve().parents[2]
"""this repository: on a cluster's head, the copy `ray up` uploaded from the user's checkout"""


def open_hint(uri: str, bootstrap: Path = BOOTSTRAP, repo: Path = REPO) -> str:
    from orchestrator.tracking.uris import masked

    uri = masked(uri)  # a line on the console: a password in the URI stays out of it
    if not uri.startswith(("http://", "https://")):
        return f"open the runs: mlflow ui --backend-store-uri {uri}  (then http://127.0.0.1:5000)"
    parts = urlsplit(uri)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return f"open the runs: {uri} in a browser"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    local = f"{parts.scheme}://localhost:{port}"
    cluster = _cluster(bootstrap.expanduser())
    if cluster is None:  # a server on this machine, no cluster: a tunnel from elsewhere
        return (f"open the runs: {uri} in a browser (from another machine: ssh -N -L "
                f"{port}:127.0.0.1:{port} {getpass.getuser()}@{socket.gethostname()}; then {local})")
    commands = []
    if (name := cluster_file(cluster, repo)) is not None:
        commands.append(f"ray attach {name} -p {port}")
    provider, auth = cluster.get("provider") or {}, cluster.get("auth") or {}
    if provider.get("type") == "local" and provider.get("head_ip"):
        user = f"{auth['ssh_user']}@" if auth.get("ssh_user") else ""
        commands.append(f"ssh -N -L {port}:127.0.0.1:{port} {user}{provider['head_ip']}")
    if not commands:
        commands.append(f"ray attach YOUR-CLUSTER-FILE -p {port}")
    return (f"open the runs: {uri} in a browser (on your laptop, where you ran `ray up`: "
            f"{', or '.join(commands)}; then {local})")


def ui_base(uri: str, default: str) -> str:
    """Where the MLflow UI of these runs is: a tracking server is its own UI (a cluster head's,
    at the port the tunnel of :func:`open_hint` forwards); a local store opens with `mlflow ui`,
    at ``default``."""
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else default


def _cluster(path: Path) -> dict | None:
    import yaml

    try:
        cfg = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return cfg if isinstance(cfg, dict) and cfg.get("cluster_name") else None


def cluster_file(cluster: dict, repo: Path) -> str | None:
    """The cluster file (relative to the repository) of this cluster's name and provider: the
    one the user gave `ray up`, which uploaded it with the repository; None if not exactly one."""
    import yaml

    want = (cluster.get("cluster_name"), (cluster.get("provider") or {}).get("type"))
    found = []
    for path in sorted([*repo.glob("*.y*ml"), *repo.glob("[!.]*/*.y*ml")]):
        if path.suffix not in (".yaml", ".yml") or path.name == BOOTSTRAP.name:
            continue  # Ray's completed copy names no file the user gave
        try:
            cfg = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        if isinstance(cfg, dict) and isinstance(cfg.get("provider"), dict) and \
                (cfg.get("cluster_name"), cfg["provider"].get("type")) == want:
            found.append(path.relative_to(repo).as_posix())
    return found[0] if len(found) == 1 else None
