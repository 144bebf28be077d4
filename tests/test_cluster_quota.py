"""docs/cluster.md's AWS quota advice adds up the vCPUs of cluster.yaml's node types."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VCPUS = {"g4dn.xlarge": 4, "g5.xlarge": 4, "g5.12xlarge": 48, "p4d.24xlarge": 96}
"""AWS's vCPU count of each instance type the file names (G and P families count toward the
GPU quotas)"""


def test_the_quota_covers_the_whole_cluster_at_once():
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    need = VCPUS[head["node_config"]["InstanceType"]]  # a G instance too: it counts
    for name, t in types.items():
        if name != cfg["head_node_type"]:
            need += t["max_workers"] * VCPUS[t["node_config"]["InstanceType"]]
    text = " ".join((ROOT / "docs" / "cluster.md").read_text().split())
    m = re.search(r"ask for at least (\d+) vCPUs", text)
    assert m and int(m[1]) == need == 68, (m and m[0], need)
