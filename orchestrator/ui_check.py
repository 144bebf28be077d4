"""Open a tracking store in the real MLflow UI, in headless Chromium, and take a screenshot.

    python -m orchestrator.ui_check --tracking-uri sqlite:///$PWD/mlflow.db --out mlflow-ui.png

Starts ``mlflow server`` on a free loopback port, checks through its REST API that the table's
parent and child runs are there, renders the experiment page in Chromium (Debian's ``chromium``
package), checks the rendered page names the runs, and stops the server. What a user sees after
``mlflow ui``, checked without a person.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1600,1000",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def start_server(tracking_uri: str, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
               MLFLOW_DISABLE_TELEMETRY="true")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    # Own process group: stopping it leaves no uvicorn worker behind.
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited ({proc.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError(f"mlflow server did not answer /health within 90 s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def check_ui(tracking_uri: str, out: Path, experiment: str = "mmemb") -> dict:
    """Returns what was seen: run counts from the API and run names found in the page."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise FileNotFoundError("chromium not found; install it: apt-get install chromium")
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="mmemb-ui-"))
    proc = start_server(tracking_uri, port, tmp / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        exp = _post(f"{base}/api/2.0/mlflow/experiments/search", {"max_results": 100})
        ids = [e["experiment_id"] for e in exp.get("experiments", []) if e["name"] == experiment]
        if not ids:
            raise ValueError(f"experiment {experiment!r} not in {tracking_uri}")
        runs = _post(f"{base}/api/2.0/mlflow/runs/search",
                     {"experiment_ids": ids, "max_results": 1000}).get("runs", [])
        tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
        parents = [t for t in tags if "mmemb.kind" in t]
        children = [t for t in tags if "mlflow.parentRunId" in t]
        url = f"{base}/#/experiments/{ids[0]}/runs"
        common = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
                  "--virtual-time-budget=20000"]
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                             timeout=120).stdout
        subprocess.run([*common, f"--screenshot={out}", url], capture_output=True, timeout=120)
        names = [t.get("mlflow.runName", "") for t in parents]
        return {"url": url, "parents": len(parents), "children": len(children),
                "parent_names_in_page": [n for n in names if n and n in dom],
                "screenshot": str(out) if out.exists() else None}
    finally:
        stop_server(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.ui_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tracking-uri", default=f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    p.add_argument("--out", default="mlflow-ui.png")
    args = p.parse_args(argv)
    try:
        seen = check_ui(args.tracking_uri, Path(args.out).resolve())
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(seen, indent=1))
    return 0 if seen["screenshot"] and seen["parent_names_in_page"] else 1


if __name__ == "__main__":
    sys.exit(main())
