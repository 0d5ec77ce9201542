"""What benchmarks read about processes from /proc: CPU time, memory, and CPU placement.

CPU time comes from the process's CPU-time clock (`clock_gettime` on the clock id Linux gives
every process, `CPUCLOCK_SCHED`: nanoseconds on the CPU of the whole thread group, threads that
have exited included), not from `/proc/PID/stat` (clock ticks of 10 ms: at a few requests per
second that resolution is coarser than the figure measured), nor from summing the live threads'
`/proc/PID/task/TID/schedstat` (a thread that exits between two readings takes its CPU time with
it: a gateway that runs a short thread per request would read close to nothing). Linux only,
like the benchmarks that use it.

Placement: on a 2-core machine the load generator, the upstream simulator and the gateway all
compete for the same cores, so a gateway run pays for the scheduler preempting it in favour of
the load generator; a gateway in production has its own cores. `place_apart` gives the system
under test its own core(s) and leaves the load generator and the upstream on the rest, the same
for every target of a run (the direct baseline included).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path


def group_pids(pgid: int) -> list[int]:
    """Every process in process group `pgid` (a gateway and the workers it forked)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def process_clock_id(pid: int) -> int:
    """Linux's CPU-time clock of process `pid` (`MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`,
    what glibc's `clock_getcpuclockid` returns): every thread's time, exited threads' included."""
    return ((~pid) << 3) | 2


def process_cpu_s(pid: int) -> float:
    """CPU time (s) of `pid`, every thread it ran (those that have exited too), at nanosecond
    resolution; the live threads' sum when the clock cannot be read."""
    try:
        return time.clock_gettime(process_clock_id(pid))
    except OSError:
        return _live_threads_cpu_s(pid)


def _live_threads_cpu_s(pid: int) -> float:
    total = 0
    for tid in threads(pid):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def group_cpu_s(pgid: int) -> float:
    """CPU time (s) of a whole process group."""
    return sum(process_cpu_s(pid) for pid in group_pids(pgid))


async def idle_cpu_per_s(pgids: Sequence[int], seconds: float) -> list[float]:
    """CPU seconds per second of each process group with no requests (timers, exporters,
    housekeeping)."""
    before = [group_cpu_s(pgid) for pgid in pgids]
    await asyncio.sleep(seconds)
    return [(group_cpu_s(pgid) - b) / seconds for pgid, b in zip(pgids, before, strict=True)]


def busy_cpu_ms(cpu_ms_per_request: float, idle_s_per_s: float, seconds: float,
                requests: int) -> float:
    """CPU ms per request less the idle CPU the process would have spent over `seconds`."""
    return cpu_ms_per_request - idle_s_per_s * seconds * 1e3 / max(1, requests)


def group_rss_mb(pgid: int) -> float:
    """Resident memory (MB) of a whole process group."""
    total_kb = 0
    for pid in group_pids(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets `pid` holds open."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = fd.readlink().name
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def established_inodes(pid: int, remote_port: int | None = None) -> set[str]:
    """Socket inodes of the established TCP connections in `pid`'s network namespace (to
    `remote_port` only, when given): /proc/net/tcp{,6}, whose rows hold the remote address with
    its port in hex after the colon, the state (`01`: established) and the inode."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "01" and (
                    remote_port is None or int(fields[2].rsplit(":", 1)[1], 16) == remote_port):
                inodes.add(fields[9])
    return inodes


def send_queue_bytes(local_port: int, remote_ports: set[int]) -> int:
    """The largest send queue (unsent bytes, `tx_queue` in /proc/net/tcp) of the loopback
    connections from `local_port` to any of `remote_ports`; 0 when none is found."""
    most = 0
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if (int(fields[1].rsplit(":", 1)[1], 16) == local_port
                and int(fields[2].rsplit(":", 1)[1], 16) in remote_ports):
            most = max(most, int(fields[4].split(":")[0], 16))
    return most


def open_fds(pid: int) -> int:
    try:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return 0


def pin(pids: Iterable[int], cpus: set[int]) -> None:
    """Restrict every thread of `pids` to `cpus` (threads started later inherit it)."""
    for pid in pids:
        for tid in threads(pid):
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                continue


def split_cores() -> tuple[set[int], set[int]] | None:
    """(cores for the load generator and upstream, cores for the gateway), or None on 1 core."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, set(cpus[1:])


def place_apart(driver_pids: Iterable[int], gateway_pgids: Iterable[int]) -> str:
    """Pin drivers (this process, the simulator) apart from the gateways; a line saying how."""
    split = split_cores()
    if split is None:
        return "one core: nothing pinned"
    drivers, gateway = split
    pin(driver_pids, drivers)
    for pgid in gateway_pgids:
        pin(group_pids(pgid), gateway)
    return (f"load generator and simulator on CPU {sorted(drivers)}, gateway under test on "
            f"CPU {sorted(gateway)}")


def share_all(pids: Iterable[int]) -> str:
    """Let every thread of `pids` run on every core again; a line saying so."""
    cpus = set(range(os.cpu_count() or 1))
    pin(pids, cpus)
    return f"all processes share CPU {sorted(cpus)}"
