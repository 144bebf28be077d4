"""``exit_now``: a command ends as Python would end it, without the teardown of its imports."""

from __future__ import annotations

EXIT_PROBE = """
import atexit, sys, tempfile, threading, time
from pathlib import Path
from trainables.runtime.command_line import exit_now

out = Path(sys.argv[1])
def late():
    time.sleep(0.3)
    (out / "thread").write_text(str(time.monotonic()))
threading.Thread(target=late).start()  # not a daemon: the exit waits for it
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(2)  # idle workers until the pool's exit hook stops them (MLflow's)
pool.submit(time.sleep, 0.01).result()
atexit.register(lambda: (out / "atexit").write_text(str(time.monotonic())))
tmp = tempfile.mkdtemp(dir=out)
import weakref
class Holder: pass
h = Holder()
weakref.finalize(h, lambda p=tmp: __import__("shutil").rmtree(p))  # runs at exit if still alive
print("last line", end="")  # buffered (stdout is a pipe), never flushed by the script
exit_now(3)
"""


def test_exit_now_ends_with_the_code_after_threads_atexit_and_buffered_output(tmp_path):
    import subprocess
    import sys

    from tests.test_imports import ROOT

    done = subprocess.run([sys.executable, "-c", EXIT_PROBE, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout == "last line"
    thread, handler = (float((tmp_path / n).read_text()) for n in ("thread", "atexit"))
    assert thread <= handler  # the thread was joined before the atexit handlers ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atexit", "thread"]  # the temp dir went
