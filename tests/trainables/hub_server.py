"""A stand-in for the Hugging Face hub on 127.0.0.1, for the fetch's tests.

It answers the two requests ``trainables.fetch`` makes: the repository listing
(``/api/{models,datasets}/<repo>/revision/<rev>``, with sizes, git blob ids and LFS SHA-256s) and
the file download (``/<datasets/>?<repo>/resolve/<commit>/<path>``, with HTTP Range). Faults are
injected per file: ``cut[path] = n`` never sends byte ``n`` and on, closing the connection there (``cut_times`` times),
``corrupt`` serves other bytes than the listing publishes, ``hold[path]`` sends half the file and
waits for an event; and per request: ``faults[key]`` is a
list consumed one entry per request to ``key`` (a file name, or ``api:<repo>`` for a listing),
each entry one of ``FAULTS``. A repository missing from ``repos`` answers as the hub does
(404, ``X-Error-Code: RepoNotFound``); a revision in ``gone_revisions``, as a revision the hub no
longer has (404, ``RevisionNotFound``). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from dataclasses import dataclass, field

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FAULTS = ("corrupt", "404", "500", "503", "drop", "cut:N")
"""per-request faults: other bytes than listed; an HTTP status; the connection closed with no
answer; the body cut after N bytes"""


@dataclass
class Hub:
    repos: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    """(repo_type, repo id) -> path -> bytes"""
    lfs: set[str] = field(default_factory=set)
    """paths served as LFS files (published with a SHA-256)"""
    cut: dict[str, int] = field(default_factory=dict)
    cut_times: int = 10**9
    corrupt: set[str] = field(default_factory=set)
    faults: dict[str, list[str]] = field(default_factory=dict)
    gone_revisions: set[str] = field(default_factory=set)
    hold: dict[str, threading.Event] = field(default_factory=dict)
    """path -> an event: the file's first half is sent, the rest once the event is set (a
    download in progress, for a test that interrupts it)"""
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, path, Range header)"""

    def listing(self, repo_type: str, repo: str) -> dict:
        files = self.repos[(repo_type, repo)]
        siblings = []
        for path, data in files.items():
            s = {"rfilename": path, "size": len(data),
                 "blobId": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
            if path.rsplit("/", 1)[-1] in self.lfs:
                s["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                            "pointerSize": 134}
            siblings.append(s)
        return {"id": repo, "sha": COMMIT, "siblings": siblings, "private": False}

    def fault(self, key: str) -> str | None:
        """The next fault for ``key``, consumed (None when there is none)."""
        queue = self.faults.get(key)
        return queue.pop(0) if queue else None

    def downloads(self, name: str) -> list[str | None]:
        """The Range headers of the downloads of files named ``name``."""
        return [r for m, p, r in self.requests if m == "GET" and "/resolve/" in p
                and p.endswith("/" + name)]


def _handler(hub: Hub):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(code)
            for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            hub.requests.append(("GET", self.path, self.headers.get("Range")))
            path = self.path.split("?", 1)[0]
            if path.startswith("/api/"):
                kind, _, rest = path[5:].partition("/")
                if kind not in ("models", "datasets") or not rest:
                    return self._send(404, b'{"error": "not served here"}')
                repo, _, revision = rest.partition("/revision/")
                key = (kind.rstrip("s"), repo)
                fault = hub.fault(f"api:{repo}")
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault and fault.isdigit():
                    return self._send(int(fault), b'{"error": "injected"}')
                if revision in hub.gone_revisions:
                    return self._send(404, b'{"error": "Invalid rev id"}',
                                      {"X-Error-Code": "RevisionNotFound"})
                if key not in hub.repos:
                    return self._send(404, b'{"error": "Repository not found"}',
                                      {"X-Error-Code": "RepoNotFound"})
                return self._send(200, json.dumps(hub.listing(*key)).encode(),
                                  {"Content-Type": "application/json"})
            kind = "dataset" if path.startswith("/datasets/") else "model"
            rest = path[len("/datasets/"):] if kind == "dataset" else path[1:]
            repo, _, tail = rest.partition("/resolve/")
            name = tail.split("/", 1)[1] if "/" in tail else ""
            data = hub.repos.get((kind, repo), {}).get(name)
            if data is None:
                return self._send(404, b"not found", {"X-Error-Code": "EntryNotFound"})
            fault = hub.fault(name)
            if fault == "drop":
                self.close_connection = True
                return
            if fault and fault.isdigit():
                return self._send(int(fault), b"injected")
            if name in hub.corrupt or fault == "corrupt":
                data = bytes(b ^ 0xFF for b in data)
            start = 0
            rng = self.headers.get("Range")
            if rng:
                start = int(rng.split("=")[1].split("-")[0])
            body = data[start:]
            cut = hub.cut.get(name)
            once = fault is not None and fault.startswith("cut:")
            if once:
                cut = start + int(fault[4:])
            self.send_response(206 if rng else 200)
            self.send_header("Content-Length", str(len(body)))
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            held = hub.hold.get(name)
            if held is not None:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                held.wait()
                body = body[len(body) // 2:]
            if cut is not None and (once or hub.cut_times > 0) and start <= cut:
                hub.cut_times -= 0 if once else 1
                self.wfile.write(body[:cut - start])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


class Serving:
    """``with Serving(hub) as url:`` the hub on 127.0.0.1 in a thread."""

    def __init__(self, hub: Hub):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


SENTEVAL_DIRS = ("STS/STS12-en-test", "STS/STS13-en-test", "STS/STS14-en-test",
                 "STS/STS15-en-test", "STS/STS16-en-test", "STS/STSBenchmark", "SICK", "MR",
                 "CR", "SUBJ", "MPQA", "SST/binary", "TREC", "MRPC")


def senteval_tar(dirs=SENTEVAL_DIRS, pad: int = 0, mode: int = 0o644) -> bytes:
    """A small tar in SimCSE's layout: ``downstream/<task>/...`` for every task in ``dirs`` (each
    file ``pad`` bytes longer, for a tar of a chosen size; its members of mode ``mode``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in dirs:
            data = f"stand-in for {d}\n".encode() + b"." * pad
            info = tarfile.TarInfo(f"downstream/{d}/data.txt")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def paper_hub() -> Hub:
    """Stand-in files for every repository the paper profile's fetch reads."""
    from trainables.fetch import PAPER

    hub = Hub(lfs={"wiki1m_for_simcse.txt", "senteval.tar", "model.safetensors",
                   "pytorch_model.bin"})
    for item in PAPER:
        key = (item.repo_type, item.repo)
        files = hub.repos.setdefault(key, {})
        if item.files:
            for f in item.files:
                files[f] = senteval_tar() if f == "senteval.tar" else (
                    b"".join(b"sentence %d of the stand-in corpus\n" % i for i in range(3000)))
        else:
            files.update({"config.json": b'{"model_type": "bert"}\n', "vocab.txt": b"[PAD]\na\n",
                          "README.md": b"not fetched\n", "tf_model.h5": b"not fetched",
                          "onnx/model.onnx": b"not fetched",
                          "model.safetensors": bytes(range(256)) * 64})
    return hub
