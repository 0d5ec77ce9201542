"""What benchmarks read about processes: CPU time counts every thread a process ran."""

from __future__ import annotations

import subprocess
import sys

from bench.procstat import process_cpu_s

_CHILD = """
import sys, threading, time
spent = []
def burn():
    began = time.thread_time()
    while time.thread_time() - began < 0.2:
        pass
    spent.append(time.thread_time())
worker = threading.Thread(target=burn)
worker.start()
worker.join()
print(spent[0], flush=True)
sys.stdin.read()
"""


def test_cpu_time_keeps_the_time_of_threads_that_have_exited() -> None:
    """A thread that ran and exited still counts: a gateway running a short thread per request
    (a logging callback) would otherwise read as nearly free. The child's worker thread spent
    at least 0.2 s on the CPU and has exited before the reading."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        thread_cpu_s = float(child.stdout.readline())
        assert process_cpu_s(child.pid) >= thread_cpu_s
    finally:
        child.communicate("")
