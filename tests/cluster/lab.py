"""A lab of Linux machines on one host, for the real `ray up` test: namespaces, sshd, a pip proxy.

Each machine is a PID, mount and network namespace of its own: its own process table (so a `ray
stop` run on it sees only its own processes), its own `/tmp`, `/run` and `/mnt`, a copy-on-write
view of `$HOME` (an overlay whose writes land in the test's scratch folder), and its own network
stack: its own 127.0.0.1 and ports, and one address on the lab's network (10.77.0.0/24), a
bridge in the first machine's namespace that every later machine is plugged into by a veth pair.
A port forwarded to a machine's 127.0.0.1 (an SSH tunnel) is reachable only through the tunnel,
as between real machines. The host's ports, processes, network, home and /tmp are never touched.

The lab has no route out. pip inside reaches packages only through a proxy that this process
serves on 127.0.0.1:3128 of each machine (`PIP_PROXY`, set by each machine's sshd): HTTPS to the
package indexes (CONNECT to port 443), and the lab's own wheel mirror, `http://wheels.lab/`
(`Lab(mirror=...)`: a find-links page of the host folders' wheels, as a lab's devpi or Artifactory
would serve them); nothing else is proxied.

Killing a machine's init (PID 1 of its namespace) makes the kernel kill every process in it, so
`Lab.close()` leaves nothing behind even when a test fails; the `unshare` holding each machine
dies with the test process (parent-death signal), and its init with it; the network goes with
the namespaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.ctrl_c import sigint_as_at_a_terminal

PROXY_PORT = 3128
MIRROR = "wheels.lab"
"""the host name of the lab's wheel mirror, reachable only through the proxy"""
NETWORK = "10.77.0.0/24"
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1

# PID 1 of a machine: makes its private views (argv[1]: the commands, as JSON), then reaps
# orphans (daemons such as sshd and Ray's processes are reparented to it) so that no zombie of a
# finished process counts as one still running.
_INIT = r"""
import json, os, subprocess, sys, time
for step in json.loads(sys.argv[1]):
    subprocess.run(step, check=True)
os.chdir("/")
open("/tmp/.machine-ready", "w").close()
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""

_SSHD_CONFIG = """\
ListenAddress {ip}:22
HostKey {host_key}
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
SetEnv PIP_PROXY=http://127.0.0.1:{proxy_port}
"""


def missing_tools() -> list[str]:
    """The host programs the lab needs that are not installed."""
    need = ["unshare", "nsenter", "ip", "ssh", "ssh-keygen", "rsync"]
    missing = [t for t in need if shutil.which(t) is None]
    if sshd_path() is None:
        missing.append("sshd")
    return missing


def sshd_path() -> str | None:
    return shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)), None)


def _parent_death_kill() -> None:
    """In the forked child: die with the test process (its thread that forked us)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_for(check, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


class Machine:
    """One machine of the lab: a PID + mount namespace with its own /tmp, /run, /mnt and $HOME."""

    def __init__(self, lab: Lab, name: str, scratch: Path, holder: subprocess.Popen, init_pid: int,
                 home_upper: Path):
        self.lab, self.name, self.scratch, self.home_upper = lab, name, scratch, home_upper
        self.holder, self.init_pid = holder, init_pid
        self.pid_ns = os.readlink(f"/proc/{init_pid}/ns/pid")
        self.ip: str | None = None
        """its address on the lab's network"""

    def outside(self, inside_tmp_path: str | os.PathLike) -> Path:
        """Where a path under the machine's /tmp lies on the host."""
        rel = Path(inside_tmp_path).relative_to("/tmp")
        return self.scratch / "tmp" / rel

    def home_writes(self, rel: str) -> Path:
        """Where the machine's write to ~/rel landed on the host (its $HOME overlay's upper layer)."""
        return self.home_upper / rel

    def run(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str = "/",
            timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
        """Run a command on this machine (as root in its namespaces), capturing its output."""
        cmd = self.nsenter(cwd) + list(argv)
        done = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True,
                              cwd="/", **kw)
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)!r} exited {done.returncode}:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def popen(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str = "/",
              **kw) -> subprocess.Popen:
        """Start a command on this machine without waiting, in a process group of its own on
        the host (``os.killpg(p.pid, ...)`` stops it and what it started there). It hears a
        Ctrl-C as typed at a terminal: ssh keeps SIGINT ignored when it starts ignored, as it does
        under a suite started in the background, and a tunnel then outlived its Ctrl-C."""
        return subprocess.Popen(self.nsenter(cwd) + list(argv), env=env, cwd="/",
                                start_new_session=True, preexec_fn=sigint_as_at_a_terminal, **kw)

    def nsenter(self, cwd: str = "/") -> list[str]:
        """The command prefix that runs what follows on this machine, in `cwd`."""
        # cd inside: a directory opened before entering (nsenter --wd) would resolve paths
        # through the host's mounts, missing what is mounted only on this machine
        return ["nsenter", "-t", str(self.init_pid), "--pid", "--mount", "--net", "--uts", "--",
                "sh", "-c", 'cd "$0" && exec "$@"', cwd]

    def processes(self) -> list[tuple[int, str, str]]:
        """(host pid, name, command line) of every process of this machine but its init."""
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == self.init_pid:
                continue
            try:
                if os.readlink(d / "ns" / "pid") != self.pid_ns:
                    continue
                name = (d / "comm").read_text().strip()
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":  # a zombie runs nothing; init reaps it
                out.append((int(d.name), name, cmdline.strip()))
        return out

    def start_sshd(self, authorized_key: str) -> None:
        """sshd on this machine's lab address, port 22, root login with `authorized_key` only."""
        ip = self.ip
        key = "/tmp/sshd/host_ed25519_key"
        self.run(["mkdir", "-p", "/tmp/sshd"])
        self.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key])
        ssh_dir = Path(os.path.expanduser("~")) / ".ssh"
        script = (f"mkdir -p -m 700 {ssh_dir} && printf '%s\\n' \"$1\" >> {ssh_dir}/authorized_keys"
                  f" && chmod 600 {ssh_dir}/authorized_keys")
        self.run(["sh", "-c", script, "sh", authorized_key])
        config = _SSHD_CONFIG.format(ip=ip, host_key=key, proxy_port=PROXY_PORT)
        self.outside("/tmp/sshd/sshd_config").write_text(config)
        self.run([sshd_path(), "-f", "/tmp/sshd/sshd_config", "-E", "/tmp/sshd/sshd.log"])
        probe = [sys.executable, "-c", f"import socket; socket.create_connection(({ip!r}, 22), 2)"]
        _wait_for(lambda: self.run(probe, check=False).returncode == 0, 30, f"sshd on {ip}:22")


class Lab:
    """Machines in private namespaces on one private network; `close()` removes every trace."""

    def __init__(self, scratch: Path, mirror: Sequence[Path] = ()):
        self.scratch = scratch
        self.mirror = {w.name: w for folder in mirror if folder.is_dir()
                       for w in sorted(folder.glob("*.whl"))}
        """the wheels `http://wheels.lab/` serves (through the proxy), by file name"""
        self.served: list[str] = []
        """each wheel the mirror sent, in full, once per download"""
        self.machines: list[Machine] = []
        self._proxies: list[socket.socket] = []
        self._closing = threading.Event()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def machine(self, name: str, ip: str, *, shared: Path | None = None,
                hide: dict[str, Sequence[str]] | None = None,
                keep: Sequence[Path] = ()) -> Machine:
        """A new machine named `name` (its hostname too) at `ip` on the lab's network.

        `shared` is mounted at /mnt/shared (the lab's NFS, so to speak). `hide` maps a folder to
        names in it that this machine must not have (say, packages in site-packages): they are
        whited out in a copy-on-write view of the folder, as if never installed. `keep`: host
        folders under /tmp that stay visible at their own path on this machine, whose /tmp is
        otherwise its own (a checkout made with `git clone . $(mktemp -d)`).
        """
        scratch = self.scratch / name
        (scratch / "tmp").mkdir(parents=True)
        (scratch / "tmp").chmod(0o1777)
        first = not self.machines
        home = os.path.expanduser("~")
        steps: list[list[str]] = [["ip", "link", "set", "lo", "up"], ["hostname", name]]
        home_upper = scratch
        views = {home: (), "/mnt": (), **{d: tuple(n) for d, n in (hide or {}).items()}}
        for i, (folder, names) in enumerate(sorted(views.items(), key=lambda kv: len(kv[0]))):
            upper, work = scratch / f"view{i}.up", scratch / f"view{i}.work"
            upper.mkdir()
            work.mkdir()
            for n in names:  # an overlay whiteout: a 0/0 character device
                os.mknod(upper / n, stat.S_IFCHR, os.makedev(0, 0))
            steps.append(["mount", "-t", "overlay", "overlay", "-o",
                          f"lowerdir={folder},upperdir={upper},workdir={work}", folder])
            if folder == home:
                home_upper = upper
        if shared is not None:
            steps += [["mkdir", "-p", "/mnt/shared"], ["mount", "--bind", str(shared), "/mnt/shared"]]
        for folder in keep:  # mounted inside the machine's /tmp before that is put in place
            inside = scratch / "tmp" / Path(folder).resolve().relative_to("/tmp")
            inside.mkdir(parents=True)
            steps.append(["mount", "--bind", str(folder), str(inside)])
        steps += [["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run"],
                  ["mkdir", "-m", "755", "/run/sshd"],
                  # last, as scratch may be in /tmp; recursive, to carry the kept folders along
                  ["mount", "--rbind", str(scratch / "tmp"), "/tmp"]]
        cmd = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--mount", "--uts",
               "--propagation", "private", "--kill-child",
               sys.executable, "-c", _INIT, json.dumps(steps)]
        with open(scratch / "init.log", "wb") as log:
            holder = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      preexec_fn=_parent_death_kill, cwd="/")
        try:
            _wait_for(lambda: (scratch / "tmp" / ".machine-ready").exists() or holder.poll() is not None,
                      60, f"machine {name} to start")
            if holder.poll() is not None:
                raise RuntimeError(f"machine {name} did not start: "
                                   f"{(scratch / 'init.log').read_text()[-2000:]}")
            children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
            init_pid = int(_wait_for(lambda: children.read_text().split(), 10, "init")[0])
        except BaseException:
            holder.kill()
            holder.wait()
            raise
        m = Machine(self, name, scratch, holder, init_pid, home_upper)
        self.machines.append(m)
        self._plug_in(m, ip, first)
        self._serve_pip_proxy(init_pid)
        return m

    # --- the lab's network: a bridge in the first machine, a veth pair to each other one ------

    def _plug_in(self, m: Machine, ip: str, first: bool) -> None:
        prefix = NETWORK.split("/")[1]

        def ip_in(machine: Machine, *args: str) -> None:
            subprocess.run(["nsenter", f"--net=/proc/{machine.init_pid}/ns/net", "--", "ip", *args],
                           check=True, capture_output=True, timeout=30)

        if first:
            ip_in(m, "link", "add", "lab", "type", "bridge")
            ip_in(m, "addr", "add", f"{ip}/{prefix}", "dev", "lab")
            ip_in(m, "link", "set", "lab", "up")
        else:
            hub = self.machines[0]
            port = f"lab-{len(self.machines)}"
            # `netns PID`: the host's PID of the machine's init (this runs in the host's PID view)
            ip_in(hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
                  str(m.init_pid))
            ip_in(hub, "link", "set", port, "master", "lab", "up")
            ip_in(m, "addr", "add", f"{ip}/{prefix}", "dev", "eth0")
            ip_in(m, "link", "set", "eth0", "up")
        m.ip = ip

    # --- pip's way out: a CONNECT proxy listening inside the lab network ---------------------

    def _serve_pip_proxy(self, init_pid: int) -> None:
        """Listen on 127.0.0.1:PROXY_PORT of a machine's network; connect out from the host's."""
        box: dict = {}

        def listen_in_lab():  # setns() moves only this thread, which then exits
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY)
                try:
                    if libc.setns(fd, _CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the lab network")
                finally:
                    os.close(fd)
                box["sock"] = socket.create_server(("127.0.0.1", PROXY_PORT))
            except BaseException as e:  # reported in the caller's thread
                box["error"] = e

        t = threading.Thread(target=listen_in_lab)
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]
        self._proxies.append(box["sock"])
        threading.Thread(target=self._accept, args=(box["sock"],), daemon=True,
                         name="lab-pip-proxy").start()

    def _accept(self, proxy: socket.socket) -> None:
        while not self._closing.is_set():
            try:
                client, _ = proxy.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if method in ("GET", "HEAD") and target.startswith(f"http://{MIRROR}/"):
                self._serve_mirror(client, method, target[len(f"http://{MIRROR}/"):])
                return
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or port != "443":  # pip speaks HTTPS; nothing else goes out
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                upstream = socket.create_connection((host, 443), timeout=30)
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            with upstream:
                upstream.settimeout(None)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                rest = head.split(b"\r\n\r\n", 1)[1]
                if rest:
                    upstream.sendall(rest)
                pump = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                pump.start()
                _pipe(client, upstream)
                pump.join()

    def _serve_mirror(self, client: socket.socket, method: str, path: str) -> None:
        """The mirror: its find-links page at /, each wheel at /NAME (a plain HTTP GET)."""
        path = urllib.parse.unquote(path.split("?", 1)[0])  # pip asks for ...%2Bcpu...
        if path == "":
            links = "".join(f'<a href="/{urllib.parse.quote(n)}">{n}</a>\n' for n in self.mirror)
            body, size = f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode(), None
        elif path in self.mirror:
            body, size = None, self.mirror[path].stat().st_size
        else:
            client.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        kind = "text/html" if body is not None else "application/octet-stream"
        length = len(body) if body is not None else size
        client.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n"
                       "Connection: close\r\n\r\n".encode())
        if method == "HEAD":
            return
        with contextlib.suppress(OSError):
            if body is not None:
                client.sendall(body)
            else:
                with open(self.mirror[path], "rb") as fh:
                    client.sendfile(fh)
                self.served.append(path)

    # --- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every machine (PID 1 first: the kernel then kills the rest), stop the proxy."""
        self._closing.set()
        for m in reversed(self.machines):
            with contextlib.suppress(ProcessLookupError):
                os.kill(m.init_pid, signal.SIGKILL)
            m.holder.kill()
            m.holder.wait()
        for m in self.machines:
            _wait_for(lambda m=m: not m.processes() and not Path(f"/proc/{m.init_pid}").exists(),
                      30, f"machine {m.name} to be gone")
        for proxy in self._proxies:
            with contextlib.suppress(OSError):
                proxy.shutdown(socket.SHUT_RDWR)  # wakes the accept() of _accept
            proxy.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def processes_named(machine: Machine, needles: Sequence[str]) -> Iterator[tuple[int, str, str]]:
    for pid, name, cmd in machine.processes():
        if any(n in name or n in cmd for n in needles):
            yield pid, name, cmd


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def session_of(pid: int) -> int | None:
    """The session id of a host process (in the host's numbering), None if it is gone."""
    f = stat_fields(pid)
    return int(f[3]) if f else None


def identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks): names one process, never a later one given its id."""
    f = stat_fields(pid)
    return (pid, int(f[19])) if f and f[0] != "Z" else None


def tcp_listeners(m: Machine, port: int) -> list[tuple[str, int]]:
    """(address, owning host pid) of each socket listening on `port` in machine m's network."""
    owners = {}
    for pid, _, _ in m.processes():
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    owners[link[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{m.init_pid}/net/{table}").read_text().splitlines()[1:]:
            f = row.split()
            addr, hexport = f[1].rsplit(":", 1)
            if f[3] == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                if len(addr) == 8:
                    ip = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
                else:
                    ip = "::" if set(addr) == {"0"} else addr
                out.append((ip, owners.get(f[9], -1)))
    return out
