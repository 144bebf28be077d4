"""The closing line says how to open the runs from where the user sits: on a cluster's head, the
tunnel for *that* cluster (the file the user gave `ray up`, and on machines of their own the plain
`ssh -L` to the head), never another cluster's file. The slow cluster test runs it as printed."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

import yaml

from orchestrator.tracking.open_hint import REPO, cluster_file, open_hint, ui_base


def _bootstrap(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "ray_bootstrap_config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


LAB = {"cluster_name": "mmemb-lab", "auth": {"ssh_user": "mmemb", "ssh_private_key": "~/ray_bootstrap_key.pem"},
       "provider": {"type": "local", "head_ip": "192.168.1.10", "worker_ips": ["192.168.1.11"]}}


def test_a_local_store_and_a_remote_server():
    assert open_hint("sqlite:////x/mlflow.db") == \
        "open the runs: mlflow ui --backend-store-uri sqlite:////x/mlflow.db  (then http://127.0.0.1:5000)"
    assert open_hint("http://mlflow.lab:5000") == "open the runs: http://mlflow.lab:5000 in a browser"


def test_a_server_on_this_machine_outside_a_cluster(tmp_path):
    hint = open_hint("http://127.0.0.1:5000", bootstrap=tmp_path / "none.yaml", repo=tmp_path)
    assert hint == (f"open the runs: http://127.0.0.1:5000 in a browser (from another machine: "
                    f"ssh -N -L 5000:127.0.0.1:5000 {getpass.getuser()}@{socket.gethostname()}; "
                    "then http://localhost:5000)")


def test_a_lab_cluster_names_its_own_file_and_the_tunnel_to_its_head(tmp_path):
    """Issue 37: the lab cluster's hint said `ray attach cluster.yaml`, the AWS file (boto3 missing)."""
    repo = tmp_path / "repo"
    (repo / "clusters").mkdir(parents=True)
    (repo / "cluster.yaml").write_text(yaml.safe_dump({"cluster_name": "mmemb", "provider": {"type": "aws"}}))
    (repo / "clusters" / "ours.yaml").write_text(yaml.safe_dump(LAB))
    (repo / "broken.yaml").write_text("{: not yaml")
    hint = open_hint("http://localhost:25000", bootstrap=_bootstrap(tmp_path, LAB), repo=repo)
    assert hint == ("open the runs: http://localhost:25000 in a browser (on your laptop, where you ran "
                    "`ray up`: ray attach clusters/ours.yaml -p 25000, or ssh -N -L "
                    "25000:127.0.0.1:25000 mmemb@192.168.1.10; then http://localhost:25000)")
    # the file not among the uploaded ones (or two of that name): the tunnel alone
    (repo / "clusters" / "ours.yaml").unlink()
    hint = open_hint("http://localhost:25000", bootstrap=_bootstrap(tmp_path, LAB), repo=repo)
    assert "(on your laptop, where you ran `ray up`: ssh -N -L 25000:127.0.0.1:25000 mmemb@192.168.1.10;" in hint


def test_an_aws_cluster_names_its_file():
    aws = yaml.safe_load((REPO / "cluster.yaml").read_text())
    assert cluster_file(aws, REPO) == "cluster.yaml"
    lab = yaml.safe_load((REPO / "cluster.local.yaml").read_text())
    assert cluster_file(lab, REPO) == "cluster.local.yaml"  # the shipped files tell apart


def test_an_aws_head(tmp_path):
    aws = {"cluster_name": "mmemb", "provider": {"type": "aws", "region": "us-east-1"}, "auth": {"ssh_user": "ubuntu"}}
    hint = open_hint("http://localhost:5000", bootstrap=_bootstrap(tmp_path, aws), repo=REPO)
    assert "(on your laptop, where you ran `ray up`: ray attach cluster.yaml -p 5000; then http://localhost:5000)" in hint
    hint = open_hint("http://localhost:5000", bootstrap=_bootstrap(tmp_path, aws), repo=tmp_path)
    assert "ray attach YOUR-CLUSTER-FILE -p 5000;" in hint


def test_the_printed_links_point_at_the_server_the_runs_are_on():
    """A table on a cluster printed its MLflow links at 127.0.0.1:5000 (`mlflow ui`'s default)
    while its server listened on another port: they opened nothing, or another MLflow."""
    assert ui_base("http://localhost:25000/", "http://127.0.0.1:5000") == "http://localhost:25000"
    assert ui_base("sqlite:////x/mlflow.db", "http://127.0.0.1:5000") == "http://127.0.0.1:5000"
