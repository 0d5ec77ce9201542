"""The test harness itself: a child process is ready only once it holds its own port."""

from __future__ import annotations

import os
import socket

from tests.support.procs import free_port, listens


def test_a_port_another_process_holds_is_not_the_childs() -> None:
    """`free_port` hands out a port another worker's process may take before the child binds
    it; answered by that process, the child (which then failed to bind, exit 3) looked ready,
    and its test met "connection refused" later on (a full-suite run of 2026-12-06). Readiness
    now asks whose socket listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert listens(os.getpid(), port)
        assert not listens(os.getppid(), port)  # another process: not the one holding it
        assert not listens(os.getpid(), free_port())
