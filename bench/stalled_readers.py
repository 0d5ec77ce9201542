"""What clients that stop reading their streams cost the others, through litellm and the
pass-through.

    python -m bench.stalled_readers [--stalled 10] [--seconds 8] [--model ll-stub]

Starts an upstream in a process of its own (it streams 20,000 chunks of about 200 bytes as fast
as its reader takes them to a prompt starting `stall`, 20 chunks to any other) and a router on
it, then measures a fast client side by side in one run:

* **alone**: the fast client streams a short answer every 100 ms, nothing else running (one
  at a time: a slow answer delays the next, so a slow phase serves fewer, and its p99 is then
  close to its maximum);
* **beside N stalled**: the same, while `--stalled` clients that asked for the long answer read
  nothing (raw sockets with an 8 KB receive buffer) for the whole phase.

For each phase it prints the fast client's TTFT and end-to-end p50/p99/max, the router's CPU
time and resident memory at the phase's end, and the most the router's kernel queued toward a
single stalled client (its send queue, `tx_queue` in /proc/net/tcp). Before 2026-12-07 a stalled
client's stream through litellm was relayed at full speed into an autotuned send buffer of about
3 MB, and chunks at hand never made the relay wait: ten of them held the event loop up to 25 s
(the slow-consumer audit; the fast client's TTFT p99 26 s).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench.procstat import group_rss_mb, process_cpu_s, send_queue_bytes
from tests.support.fake_upstream import stub_router_config
from tests.support.procs import free_port
from tests.support.services import start_router

LONG_CHUNKS = 20000
SHORT_CHUNKS = 20
PROBE_EVERY_S = 0.1


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers["content-length"])))
        stalls = asked["messages"][-1]["content"].startswith("stall")
        count = LONG_CHUNKS if stalls else SHORT_CHUNKS
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        piece: dict[str, Any] = {
            "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "stub",
            "choices": [{"index": 0, "delta": {"content": "x" * 100}, "finish_reason": None}]}
        data = b"data: " + json.dumps(piece).encode() + b"\n\n"
        try:
            for _ in range(count):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            piece["choices"][0].update(delta={}, finish_reason="stop")
            last = b"data: " + json.dumps(piece).encode() + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(last), last))
            self.wfile.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass

    def log_message(self, *_: object) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, *_: object) -> None:  # connections the router reset at its stop
        pass


def _serve_upstream(port: int) -> None:
    _QuietServer(("127.0.0.1", port), _Upstream).serve_forever()


def _wait_for(port: int, timeout_s: float = 30.0) -> None:
    until = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > until:
                raise
            time.sleep(0.05)


def _config(base_url: str) -> str:
    """The tests' stub config (models `pt-stub`, `ll-stub`), with time for a long phase."""
    config = stub_router_config(base_url)
    assert "request_timeout_s: 10\n" in config
    return config.replace("request_timeout_s: 10\n", "request_timeout_s: 120\n")


def _stalled_client(base_url: str, model: str, index: int) -> socket.socket:
    """A connection that asked for the long answer and will read nothing more than its head."""
    url = httpx.URL(base_url)
    body = json.dumps({"model": model, "stream": True, "messages": [
        {"role": "user", "content": f"stall {index}"}]}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    sock.settimeout(30)
    sock.connect((url.host, url.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n"
                 b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                 % (len(body), body))
    return sock


def _probe(client: httpx.Client, model: str, index: int) -> tuple[float, float] | str:
    """One short streamed answer: (TTFT, end to end) in seconds, or the error's code."""
    started = time.perf_counter()
    first = None
    body = {"model": model, "stream": True,
            "messages": [{"role": "user", "content": f"probe {index}"}]}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            return str(json.loads(response.read())["error"]["code"])
        for line in response.iter_lines():
            if first is None and line.startswith("data: {"):
                first = time.perf_counter() - started
            if line.startswith("data: {") and '"error"' in line:
                return str(json.loads(line[6:])["error"]["code"])
    if first is None:
        return "no_content"
    return first, time.perf_counter() - started


def _phase(base_url: str, model: str, seconds: float, stalled: int,
           router_pid: int) -> dict[str, Any]:
    port = int(httpx.URL(base_url).port or 80)
    sockets = [_stalled_client(base_url, model, i) for i in range(stalled)]
    client_ports = {s.getsockname()[1] for s in sockets}
    ttfts: list[float] = []
    e2es: list[float] = []
    errors: dict[str, int] = {}
    most_queued = 0
    cpu_before = process_cpu_s(router_pid)
    with httpx.Client(base_url=base_url, timeout=60) as client:
        until, index = time.monotonic() + seconds, 0
        while time.monotonic() < until:
            next_at = time.monotonic() + PROBE_EVERY_S
            timed = _probe(client, model, index)
            if isinstance(timed, str):
                errors[timed] = errors.get(timed, 0) + 1
            else:
                ttfts.append(timed[0])
                e2es.append(timed[1])
            most_queued = max(most_queued, send_queue_bytes(port, client_ports))
            index += 1
            time.sleep(max(0.0, next_at - time.monotonic()))
    cpu = process_cpu_s(router_pid) - cpu_before
    rss = group_rss_mb(router_pid)
    for sock in sockets:
        sock.close()

    def q(samples: list[float], p: int) -> float:
        if len(samples) < 2:
            return float("nan")
        return statistics.quantiles(samples, n=100, method="inclusive")[p - 1] * 1000

    return {"served": len(ttfts), "errors": errors, "ttft_p50": q(ttfts, 50),
            "ttft_p99": q(ttfts, 99), "ttft_max": max(ttfts, default=float("nan")) * 1000,
            "e2e_p50": q(e2es, 50), "e2e_p99": q(e2es, 99), "cpu_s": cpu, "rss_mb": rss,
            "queued_kb": most_queued / 1024}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stalled", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--model", choices=["ll-stub", "pt-stub"], default="ll-stub")
    parser.add_argument("--upstream-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.upstream_port:
        _serve_upstream(args.upstream_port)
        return
    upstream_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.stalled_readers",
                                 "--upstream-port", str(upstream_port)])
    try:
        _wait_for(upstream_port)
        with tempfile.TemporaryDirectory() as directory:
            router = start_router(Path(directory), _config(f"http://127.0.0.1:{upstream_port}"),
                                  env={"STUB_KEY": "stub-key"})
            try:
                pid = router.proc.pid
                _phase(router.base_url, args.model, 1.0, 0, pid)  # warm: litellm's first call
                rows = [("alone", _phase(router.base_url, args.model, args.seconds, 0, pid)),
                        (f"beside {args.stalled} stalled",
                         _phase(router.base_url, args.model, args.seconds, args.stalled, pid))]
            except Exception:
                print(router.proc.log_text()[-3000:], file=sys.stderr)
                raise
            finally:
                router.stop()
    finally:
        upstream.terminate()
        upstream.wait()
    print(f"model {args.model}, a probe every {PROBE_EVERY_S * 1000:.0f} ms for "
          f"{args.seconds:.0f} s per phase (ms; router CPU s and RSS MB; the most queued "
          "toward one stalled client, KB)")
    print(f"{'phase':<20}{'served':>7}{'TTFT p50':>10}{'p99':>8}{'max':>8}{'E2E p50':>9}"
          f"{'p99':>8}{'CPU s':>7}{'RSS':>7}{'queued':>8}  errors")
    for name, row in rows:
        errors = ", ".join(f"{code} {n}" for code, n in sorted(row["errors"].items())) or "-"
        print(f"{name:<20}{row['served']:>7}{row['ttft_p50']:>10.1f}{row['ttft_p99']:>8.1f}"
              f"{row['ttft_max']:>8.1f}{row['e2e_p50']:>9.1f}{row['e2e_p99']:>8.1f}"
              f"{row['cpu_s']:>7.2f}{row['rss_mb']:>7.0f}{row['queued_kb']:>8.0f}  {errors}")


if __name__ == "__main__":
    main()
