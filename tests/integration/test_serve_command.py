"""`slorouter serve` as a process: refusing unsafe binds, reporting bad configs at once, idling
without being woken (a current `date` header all the same) and stopping promptly on SIGTERM.
Every router here is started from scratch (`start_cold_router`), not forked from the warm
launcher: what the command inherits from its parent (SIGHUP ignored under `nohup`) is under
test."""

from __future__ import annotations

import contextlib
import email.utils
import functools
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.procs import PYTHON, ManagedProcess, free_port
from tests.support.services import MINIMAL_CONFIG as CONFIG
from tests.support.services import Running, finished_requests, start_router, start_simulator

# what the command inherits from its parent is under test: never forked from the warm launcher
start_cold_router = functools.partial(start_router, warm=False)


def _serve(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    return subprocess.run([PYTHON, "-m", "router.cli", "serve", "--config", str(path), *args],
                          capture_output=True, text=True, timeout=120)


def test_without_api_keys_it_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    """No api_keys and --host 0.0.0.0: exit 2 with the reason, before binding anything."""
    result = _serve(tmp_path, CONFIG, "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 2
    assert "only binds to loopback" in result.stderr


def test_a_port_in_use_on_ipv6_names_the_address_in_brackets(tmp_path: Path) -> None:
    """`--host ::1` on a taken port: the line writes `[::1]:PORT`, as a URL does (it wrote
    `::1:PORT`, an address with no port to read)."""
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tmp_path, CONFIG, "--host", "::1", "--port", str(port))
    assert result.returncode == 3
    assert f"slorouter: cannot listen on [::1]:{port}: " in result.stderr


@pytest.mark.parametrize("log_level", ["info", "critical"])
def test_a_port_in_use_is_one_line_and_exit_3_at_any_log_level(tmp_path: Path,
                                                               log_level: str) -> None:
    """Another process listens on the port: one line naming the address and the reason, exit
    3 (as `slorouter sim`), before the app starts. It used to be uvicorn's log line alone, after
    the app's start-up and shut-down, and nothing at all at `--log-level critical`."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tmp_path, CONFIG, "--port", str(port), "--log-level", log_level)
    assert result.returncode == 3
    assert f"slorouter: cannot listen on 127.0.0.1:{port}: " in result.stderr
    assert "in use" in result.stderr
    assert "Application startup complete" not in result.stderr


def _bound_port(log: Path, proc: subprocess.Popen[bytes]) -> tuple[int, dict[str, Any]]:
    """The port in the "running on" line `serve` writes once it listens, with its `starting`
    event; waits for the line while the process runs (60 s at most: start-up, not timing)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        lines = log.read_text(errors="replace").splitlines()
        running = [json.loads(line)["event"] for line in lines
                   if "Uvicorn running on " in line]
        if running:
            starting = next(json.loads(line) for line in lines if '"starting"' in line)
            return int(running[0].split(":")[-1].split()[0]), starting
        time.sleep(0.1)
    raise AssertionError(f"no 'running on' line:\n{log.read_text(errors='replace')}")


def test_port_0_listens_on_a_free_port_that_the_log_names(tmp_path: Path) -> None:
    """`--port 0`: the kernel picks a free port, and the log says which (uvicorn's
    `running on http://127.0.0.1:PORT` line, and the `starting` event's port). Since `serve`
    binds its socket itself, uvicorn wrote no such line and `starting` said port 0: a service
    nobody could find."""
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([PYTHON, "-m", "router.cli", "serve", "--config", str(path),
                                 "--port", "0"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        port, starting = _bound_port(log, proc)
        assert port != 0
        assert starting["port"] == port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_invalid_config_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    """Two independent mistakes are both reported in one run."""
    broken = CONFIG.replace("openai_passthrough", "pigeon").replace("default_model: m",
                                                                      "default_model: zz")
    result = _serve(tmp_path, broken + "surprise: 1\n")
    assert result.returncode == 2
    assert "adapter" in result.stderr and "surprise" in result.stderr


def _scheduled_in(pid: int) -> int:
    """How many times the process's threads were put on a CPU (schedstat's third field)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[2])
        except (OSError, IndexError, ValueError):
            continue
    return total


def test_an_idle_router_is_not_woken(tmp_path: Path) -> None:
    """uvicorn's own loop ticks ten times a second to refresh its `date` header and notice a
    stop; slorouter's server formats the date as a response starts and sleeps until told to stop
    (router/quiet_server.py), and its refreshers (statistics, SLO penalties) park when nothing is
    read, so an idle router is not woken at all (each wake-up costs an idle core 0.2-1 ms of CPU
    on a VM). Counted over 4 s: a once-a-second poller (4 wake-ups) fails it."""
    router = start_cold_router(tmp_path, CONFIG)
    try:
        time.sleep(1.0)  # let start-up work settle
        before = _scheduled_in(router.proc.pid)
        time.sleep(4.0)
        wakes = _scheduled_in(router.proc.pid) - before
        assert wakes <= 1, wakes
    finally:
        router.stop()


def _date_headers(url: str, body: bytes | None = None) -> tuple[int, list[str]]:
    """The answer's status and its `date` headers."""
    request = urllib.request.Request(url, data=body,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
            return response.status, response.headers.get_all("date") or []
    except urllib.error.HTTPError as error:  # 4xx answers carry one too
        return error.code, error.headers.get_all("date") or []


def test_every_answer_has_one_current_date_header_after_idling(tmp_path: Path) -> None:
    """RFC 9110: an origin server with a clock sends `date` in its 2xx and 4xx answers. With no
    timer refreshing it, the value is formatted when a response starts: after the router has
    slept for 2.5 s, a completion, a stream, the model list and a 404 each carry exactly one
    `date` header, within 2 s of this clock."""
    with ExitStack() as started:
        sim = start_simulator(tmp_path, {"m": {"ttft_p50_ms": 5, "ttft_p99_ms": 5}})
        started.callback(sim.stop)
        router = start_cold_router(tmp_path, CONFIG.replace("http://127.0.0.1:9/v1",
                                                            f"{sim.base_url}/v1"))
        started.callback(router.stop)
        chat = f"{router.base_url}/v1/chat/completions"
        asked = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]'
        for url, body, expected in ((chat, asked + b"}", 200),
                                    (chat, asked + b', "stream": true}', 200),
                                    (f"{router.base_url}/v1/models", None, 200),
                                    (f"{router.base_url}/v1/nowhere", None, 404)):
            time.sleep(2.5)
            status, dates = _date_headers(url, body)
            assert status == expected and len(dates) == 1, (url, status, dates)
            sent = email.utils.parsedate_to_datetime(dates[0]).timestamp()
            assert abs(sent - time.time()) < 2.0, (url, dates)


def _alive(pid: int) -> bool:
    """Running: not gone, and not a zombie (an orphan waits for whoever reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _embedded(tmp_path: Path) -> tuple[ManagedProcess, int]:
    """`serve` on the embedded default (no provider keys: the simulator as its one child),
    started; with the simulator's pid."""
    port = free_port()
    router = ManagedProcess([PYTHON, "-m", "router.cli", "serve", "--port", str(port)], port,
                            ready_url=f"http://127.0.0.1:{port}/healthz",
                            env={"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""},
                            log_path=tmp_path / "serve.log", startup_timeout_s=60,
                            cwd=tmp_path).start()
    children = Path(f"/proc/{router.pid}/task/{router.pid}/children").read_text().split()
    assert len(children) == 1, children
    return router, int(children[0])


def test_sigterm_also_stops_the_embedded_simulator(tmp_path: Path) -> None:
    """With no config and no provider keys, `serve` starts the simulator as a child; SIGTERM
    must stop it too (uvicorn re-raises the signal after its shutdown, which ends the process
    before any code after the server's run could stop the child)."""
    router, simulator = _embedded(tmp_path)
    try:
        assert _alive(simulator)
        os.kill(router.pid, signal.SIGTERM)
        assert router.wait(timeout_s=8.0) == -signal.SIGTERM
        deadline = time.monotonic() + 5.0
        while _alive(simulator) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(simulator), router.log_text()
    finally:
        router.stop()
        if _alive(simulator):
            os.kill(simulator, signal.SIGKILL)


def test_the_embedded_default_started_from_scratch_answers_through_both_adapters(
        tmp_path: Path) -> None:
    """`./dev serve`'s process as a user starts it, not forked from the tests' warm launcher: a
    fresh interpreter that imports litellm only for its deployments. Each demo model answers a
    whole and a streamed request through the real `openai` client: `fast` over the pass-through
    adapter, `balanced` over litellm's OpenAI client and `large` over its Anthropic one."""
    router, simulator = _embedded(tmp_path)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{router.port}/v1", api_key="unused",
                               max_retries=0, timeout=30)
        messages: list[Any] = [{"role": "user", "content": "Name three colours."}]
        for model in ("fast", "balanced", "large"):
            whole = client.chat.completions.with_raw_response.create(
                model=model, messages=messages, max_tokens=16)
            assert whole.parse().choices[0].message.content, model
            assert whole.headers["x-slorouter-model"] == f"sim-{model}"
            stream = client.chat.completions.create(model=model, messages=messages,
                                                    max_tokens=16, stream=True)
            text = "".join(chunk.choices[0].delta.content or ""
                           for chunk in stream if chunk.choices)
            assert text, model
    finally:
        router.stop()
        if _alive(simulator):
            os.kill(simulator, signal.SIGKILL)


def test_the_embedded_simulator_does_not_outlive_a_killed_router(tmp_path: Path) -> None:
    """SIGKILL (or a signal during start-up, or SIGHUP) ends `serve` with no chance to stop its
    child: the simulator notices it has lost its parent and stops by itself."""
    router, simulator = _embedded(tmp_path)
    try:
        router.kill()
        deadline = time.monotonic() + 10.0
        while _alive(simulator) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(simulator)
    finally:
        router.stop()
        if _alive(simulator):
            os.kill(simulator, signal.SIGKILL)


def test_a_simulator_whose_starter_died_before_it_ran_stops_by_itself() -> None:
    """`serve` stopped by a signal in its first second (before its simulator child had finished
    importing) left the simulator running for good: the child read its parent once running,
    found init, and watched init. The starter now gives its own pid, so a child whose starter
    is already gone stops (here: a pid that has exited)."""
    gone = subprocess.Popen([PYTHON, "-c", "pass"])
    gone.wait()
    simulator = subprocess.Popen([PYTHON, "-m", "router.cli", "sim", "--port", str(free_port()),
                                  "--exit-with-parent", str(gone.pid)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert simulator.wait(timeout=30) == 0
    finally:
        if simulator.poll() is None:
            simulator.kill()
            simulator.wait()


def _slow_stream_setup(tmp_path: Path, grace_s: int, started: ExitStack,
                       extra_args: tuple[str, ...] = ()) -> Running:
    """A simulator model streaming 50 tokens 0.1 s apart (5 s) and a router with the grace;
    both are stopped when `started` closes."""
    tmp_path.mkdir()
    sim = start_simulator(tmp_path, {"slow": {
        "ttft_p50_ms": 20, "ttft_p99_ms": 20, "tpot_p50_ms": 100, "tpot_p99_ms": 100,
        "output_tokens_p50": 50, "output_tokens_p99": 50, "output_tokens_max": 50}})
    config = (f"version: 1\ndeployments:\n  - {{name: d, model: openai/slow, adapter: "
              f"openai_passthrough, api_base: {sim.base_url}/v1, input_price_per_mtok: 1, "
              f"output_price_per_mtok: 1}}\nmodels: [{{name: slow, deployments: [d]}}]\n"
              f"routes: {{default_model: slow}}\nserver: {{shutdown_grace_s: {grace_s}}}\n")
    started.callback(sim.stop)
    router = start_cold_router(tmp_path, config, extra_args=extra_args)
    started.callback(router.stop)
    return router


def _stream_through_sigterm(tmp_path: Path, grace_s: int,
                            extra_args: tuple[str, ...] = ()) -> tuple[bytes | None, float]:
    """Start a stream, SIGTERM the router once content flows; (the rest of the stream as the
    client read it, None if it was cut off; seconds from the signal until the process exited)."""
    with ExitStack() as started:
        return _drain(_slow_stream_setup(tmp_path, grace_s, started, extra_args))


def _drain(router: Running) -> tuple[bytes | None, float]:
    body = b'{"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    request = urllib.request.Request(f"{router.base_url}/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
    rest: bytes | None = None
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        response.readline()
        signalled = time.monotonic()
        os.kill(router.proc.pid, signal.SIGTERM)
        try:
            rest = response.read()
        except (http.client.HTTPException, OSError):  # cut off: the stream did not end
            rest = None
    router.proc.wait(timeout_s=15.0)
    return rest, time.monotonic() - signalled


def test_sigterm_lets_streams_finish_within_the_configured_grace(tmp_path: Path) -> None:
    """`server.shutdown_grace_s` bounds the drain: a 5 s stream finishes under a 10 s grace."""
    rest, _ = _stream_through_sigterm(tmp_path / "long", 10)
    assert rest is not None and rest.endswith(b"data: [DONE]\n\n")


def test_a_stream_still_running_when_the_grace_ends_gets_an_error_event_then_ends(
        tmp_path: Path) -> None:
    """Under a 1 s grace the 5 s stream is ended by the router, not cut off: its last event is
    OpenAI's error shape with code `server_shutting_down` (the SDKs raise it), the response
    ends properly, the process exits promptly, and the outcome is recorded as that error."""
    rest, exited_after_s = _stream_through_sigterm(tmp_path / "short", 1,
                                                   ("--log-level", "debug"))
    assert rest is not None and b"[DONE]" not in rest
    last = rest.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"data: ")
    error = json.loads(last[len(b"data: "):])["error"]
    assert error["code"] == "server_shutting_down" and error["type"] and error["message"]
    assert exited_after_s < 3.5
    finished = finished_requests(tmp_path / "short" / "router.log")
    assert [(f["status"], f["error_code"]) for f in finished] == [(503, "server_shutting_down")]


def test_a_whole_answer_still_awaited_when_the_grace_ends_gets_a_503_in_openais_shape(
        tmp_path: Path) -> None:
    """Under a 1 s grace, a non-streamed request whose upstream takes 5 s is answered by the
    router when the grace is over (not cut off by the server a second later with a plain-text
    500): a 503 with OpenAI's error JSON, code `server_shutting_down` (the SDKs retry it), and
    its outcome recorded as that error; the process exits promptly."""
    with ExitStack() as started:
        router = _slow_stream_setup(tmp_path / "whole", 1, started, ("--log-level", "debug"))
        body = b'{"model": "slow", "messages": [{"role": "user", "content": "hi"}]}'
        request = urllib.request.Request(f"{router.base_url}/v1/chat/completions", data=body,
                                         headers={"content-type": "application/json"})
        answered: list[tuple[int, bytes, float]] = []

        def call() -> None:
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    answered.append((response.status, response.read(), time.monotonic()))
            except urllib.error.HTTPError as error:
                answered.append((error.code, error.read(), time.monotonic()))

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.5)  # the upstream call is under way (its answer is 5 s long)
        signalled = time.monotonic()
        os.kill(router.proc.pid, signal.SIGTERM)
        caller.join(timeout=15)
        router.proc.wait(timeout_s=15.0)
        exited_after_s = time.monotonic() - signalled
    assert len(answered) == 1, answered
    status, text, at = answered[0]
    assert status == 503, (status, text)
    assert json.loads(text)["error"]["code"] == "server_shutting_down"
    assert 0.8 < at - signalled < 2.0 and exited_after_s < 3.5
    finished = finished_requests(tmp_path / "whole" / "router.log")
    assert [(f["status"], f["error_code"]) for f in finished] == [(503, "server_shutting_down")]


def test_a_side_effect_still_awaited_when_the_grace_ends_is_an_unknown_commit(
        tmp_path: Path) -> None:
    """An `action` with tools, its upstream call under way (5 s) when a 1 s grace ends: the
    upstream had it and may act on it, so the answer is the 504 `unknown_commit` with
    `x-should-retry: false` that any other interrupted side effect gets, and the OpenAI SDK
    (two retries by default) does not send it again. It was a 503 `server_shutting_down`,
    which the SDK retries: behind a load balancer, at another replica, the action ran twice
    (here, with no other replica, the SDK's retries find the port closed)."""
    with ExitStack() as started:
        directory = tmp_path / "action"
        directory.mkdir()
        sim = start_simulator(directory, {"slow": {"ttft_p50_ms": 5000, "ttft_p99_ms": 5000}})
        started.callback(sim.stop)
        config = (f"version: 1\ndeployments:\n  - {{name: d, model: openai/slow, adapter: "
                  f"openai_passthrough, api_base: {sim.base_url}/v1, input_price_per_mtok: 1, "
                  f"output_price_per_mtok: 1}}\nmodels: [{{name: slow, deployments: [d]}}]\n"
                  f"routes: {{default_model: slow}}\nserver: {{shutdown_grace_s: 1}}\n")
        router = start_cold_router(directory, config)
        started.callback(router.stop)
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused",
                               max_retries=2, timeout=30)
        raised: list[BaseException] = []

        def call() -> None:
            try:
                client.chat.completions.create(
                    model="slow", extra_headers={"x-slorouter-task": "action"},
                    tools=[{"type": "function", "function": {"name": "send_payment",
                                                             "parameters": {"type": "object"}}}],
                    messages=[{"role": "user", "content": "Send 100 dollars to account 42"}])
            except Exception as error:  # what the SDK raises, once its retries are done
                raised.append(error)

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.5)  # the upstream call is under way (its answer is 5 s long)
        os.kill(router.proc.pid, signal.SIGTERM)
        caller.join(timeout=30)
        router.proc.wait(timeout_s=15.0)
    assert len(raised) == 1 and isinstance(raised[0], openai.APIStatusError), raised
    assert raised[0].status_code == 504 and raised[0].code == "unknown_commit"
    assert raised[0].response.headers.get("x-should-retry") == "false"


def test_a_side_effect_streaming_when_the_grace_ends_ends_with_an_unknown_commit(
        tmp_path: Path) -> None:
    """An `action` stream under way (5 s of content) when a 1 s grace ends: its last event is
    `unknown_commit` (504), as a whole answer's is, and says to check before sending it again
    (no Idempotency-Key was sent); the access line records the 504 and that it may have taken
    effect. It ended with `server_shutting_down`, the error the SDKs retry, and the line said
    `may_have_taken_effect: false` (found by an audit, 2026-12-05)."""
    with ExitStack() as started:
        router = _slow_stream_setup(tmp_path / "action-stream", 1, started,
                                    ("--log-level", "debug"))
        body = (b'{"model": "slow", "stream": true, "messages": [{"role": "user", '
                b'"content": "Send 100 dollars to account 42"}]}')
        request = urllib.request.Request(
            f"{router.base_url}/v1/chat/completions", data=body,
            headers={"content-type": "application/json", "x-slorouter-task": "action"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            response.readline()
            os.kill(router.proc.pid, signal.SIGTERM)
            rest = response.read()
        router.proc.wait(timeout_s=15.0)
    last = rest.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    error = json.loads(last[len(b"data: "):])["error"]
    assert error["code"] == "unknown_commit", error
    assert "Idempotency-Key" not in error["message"] and "check" in error["message"]
    finished = finished_requests(tmp_path / "action-stream" / "router.log")
    assert [(f["status"], f["error_code"], f["may_have_taken_effect"]) for f in finished] == [
        (504, "unknown_commit", True)]


def test_a_collector_that_is_down_does_not_hold_the_exit(tmp_path: Path) -> None:
    """OTLP export to a port nothing listens on, exports failing every second: SIGTERM with
    nothing in flight exits within a few seconds (each export's timeout is 3 s and the last
    metrics export is skipped once exports fail; it took ~20 s with the exporters' defaults)."""
    closed = free_port()
    config = CONFIG + (f"telemetry: {{exporter: otlp, otlp_endpoint: 'http://127.0.0.1:{closed}',"
                       " sample_ratio: 1.0, metrics_export_interval_s: 1}\n")
    router = start_cold_router(tmp_path, config)
    try:
        chat = urllib.request.Request(  # its upstream is closed too: a 5xx, a span, metrics
            f"{router.base_url}/v1/chat/completions", method="POST",
            data=b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
            headers={"content-type": "application/json"})
        try:
            urllib.request.urlopen(chat, timeout=10).read()
        except urllib.error.HTTPError as answered:
            assert answered.code >= 500
        time.sleep(2.5)  # two metrics exports have failed
        started = time.monotonic()
        os.kill(router.proc.pid, signal.SIGTERM)
        assert router.proc.wait(timeout_s=30.0) == -signal.SIGTERM
        assert time.monotonic() - started < 8.0
    finally:
        router.stop()


def _signalled_mid_stream(router: Running, sig: signal.Signals) -> tuple[bytes, int, str]:
    """Start a stream, send `sig` once content flows, read the stream to its end: (the rest
    of it, the exit code, the log)."""
    body = b'{"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    request = urllib.request.Request(f"{router.base_url}/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.readline()
        os.kill(router.proc.pid, sig)
        rest = response.read()
    return rest, router.proc.wait(timeout_s=15.0), router.proc.log_text()


def test_sigint_drains_like_sigterm_and_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl+C (SIGINT) drains as SIGTERM does: a stream in flight finishes. uvicorn re-raises
    the signal once it has stopped, which the asyncio runner turned into a KeyboardInterrupt
    traceback in the log; the process ends with 130 (128 + SIGINT) and no traceback."""
    with ExitStack() as started:
        router = _slow_stream_setup(tmp_path / "int", 10, started)
        rest, code, log = _signalled_mid_stream(router, signal.SIGINT)
    assert rest.endswith(b"data: [DONE]\n\n")
    assert code == 130, log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log


def test_sighup_drains_like_sigterm_then_ends_as_a_hangup(tmp_path: Path) -> None:
    """There is no reload: a hangup (a closed terminal, `kill -HUP` expecting nginx's reload)
    used to end the process at once, cutting the stream in flight. It now drains as SIGTERM
    does, then the process ends by SIGHUP, which a supervisor restarts like any exit."""
    with ExitStack() as started:
        with _sighup_inherited(signal.SIG_DFL):  # not as ignored as a `nohup` test run has it
            router = _slow_stream_setup(tmp_path / "hup", 10, started)
        rest, code, log = _signalled_mid_stream(router, signal.SIGHUP)
    assert rest.endswith(b"data: [DONE]\n\n")
    assert code == -signal.SIGHUP, log
    assert "Traceback" not in log, log


def test_under_nohup_a_hangup_changes_nothing(tmp_path: Path) -> None:
    """Started with SIGHUP ignored (`nohup`, a detached job), the router keeps it ignored: a
    hangup neither ends nor drains it."""
    with ExitStack() as started:
        with _sighup_inherited(signal.SIG_IGN):
            router = _slow_stream_setup(tmp_path / "nohup", 10, started)
        os.kill(router.proc.pid, signal.SIGHUP)
        time.sleep(0.5)
        with urllib.request.urlopen(f"{router.base_url}/healthz", timeout=5) as response:
            assert response.status == 200
        assert _alive(router.proc.pid)


def _can_be_pid_1() -> bool:
    """Whether a command can run as PID 1 of a new PID namespace here (`unshare` as root)."""
    return shutil.which("unshare") is not None and os.geteuid() == 0 and subprocess.run(
        ["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=10).returncode == 0


@pytest.mark.skipif(not _can_be_pid_1(), reason="needs `unshare --pid` (root)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_as_pid_1_a_drain_ends_with_the_status_of_its_signal(tmp_path: Path,
                                                               sig: signal.Signals) -> None:
    """The Docker image's CMD runs as PID 1 (no init), for which the kernel drops a signal
    whose action is the default: re-raised after the drain, SIGTERM and SIGHUP left the process
    running on to `return 0`, and Docker reported 0 where the README promises 143 (129). Now it
    exits with 128 + the signal's number, what a shell reports for a process the signal ended."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    port = free_port()
    log = tmp_path / "router.log"
    with log.open("wb") as out:
        outer = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child=SIGKILL", PYTHON, "-m", "router.cli",
             "serve", "--config", str(config), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        waited_until = time.monotonic() + 60
        while True:
            assert outer.poll() is None, log.read_text()
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/healthz", timeout=2):
                break
            assert time.monotonic() < waited_until, log.read_text()
            time.sleep(0.1)
        inner = int(Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()[0])
        pids = next(line for line in Path(f"/proc/{inner}/status").read_text().splitlines()
                    if line.startswith("NSpid:"))
        assert pids.split()[-1] == "1", pids  # PID 1 in its own namespace
        os.kill(inner, sig)  # from outside, as `docker stop` sends it
        code = outer.wait(timeout=30)
    finally:
        if outer.poll() is None:
            os.killpg(outer.pid, signal.SIGKILL)
            outer.wait(timeout=10)
    assert code == 128 + sig, log.read_text()
    assert "Traceback" not in log.read_text()


@contextlib.contextmanager
def _sighup_inherited(disposition: signal.Handlers) -> Iterator[None]:
    """Start children with SIGHUP `disposition` (an ignored signal stays ignored across exec;
    a default one is default there)."""
    previous = signal.signal(signal.SIGHUP, disposition)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_deployment_health_lists_every_configured_deployment_before_any_traffic(
        tmp_path: Path) -> None:
    """`/v1/health/deployments` of a router that has served nothing yet lists each configured
    deployment's breaker (closed), as it lists each one's `in_flight`; it used to answer
    `"deployments": []` until traffic reached them, which a dashboard reads as none."""
    config = CONFIG.replace("models: [{name: m, deployments: [d]}]",
                            "  - {name: e, model: openai/m, adapter: openai_passthrough, "
                            "api_base: http://127.0.0.1:9/v1, input_price_per_mtok: 1, "
                            "output_price_per_mtok: 1}\nmodels: [{name: m, deployments: [d, e]}]")
    router = start_cold_router(tmp_path, config)
    try:
        with urllib.request.urlopen(f"{router.base_url}/v1/health/deployments",
                                    timeout=10) as response:
            body = json.loads(response.read())
    finally:
        router.stop()
    assert [(d["deployment"], d["state"]) for d in body["deployments"]] == [
        ("d", "closed"), ("e", "closed")]
    assert body["in_flight"] == {"d": 0, "e": 0}


def test_the_access_log_writes_one_text_free_line_per_request_only_when_asked(
        tmp_path: Path) -> None:
    """`--access-log` at the default level writes one INFO `request_finished` line per
    request, whole or streamed, with its request id and no prompt text; without it, none."""
    canary = "access-log-canary-7c1f"
    lines: dict[bool, list[dict[str, object]]] = {}
    for asked in (False, True):
        with ExitStack() as started:
            directory = tmp_path / ("on" if asked else "off")
            router = _slow_stream_setup(directory, 1, started,
                                        ("--access-log",) if asked else ())
            client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused")
            messages = [{"role": "user", "content": f"say {canary}"}]
            whole = client.chat.completions.with_raw_response.create(
                model="slow", messages=messages, max_tokens=3)  # type: ignore[arg-type]
            stream = client.chat.completions.create(
                model="slow", messages=messages, max_tokens=3,  # type: ignore[arg-type]
                stream=True)
            assert sum(1 for _ in stream) > 0
            request_id = whole.headers["x-request-id"]
            router.stop()
            log = (directory / "router.log").read_text(encoding="utf-8", errors="replace")
            assert canary not in log
            lines[asked] = [json.loads(line) for line in log.splitlines()
                            if '"request_finished"' in line]
    assert lines[False] == []
    assert len(lines[True]) == 2, lines[True]
    assert {line["level"] for line in lines[True]} == {"info"}
    assert request_id in {line.get("request_id") for line in lines[True]}
    assert {line["status"] for line in lines[True]} == {200}


def test_a_second_ctrl_c_answers_requests_in_flight_in_openais_error_shape(
        tmp_path: Path) -> None:
    """Ctrl+C twice (uvicorn's force exit) under a 30 s grace, with a whole answer awaited (its
    upstream takes 10 s) and a stream running: neither waits for the grace, and neither is cut
    off with uvicorn's plain-text 500 or no reason. The whole answer is a 503 in OpenAI's
    error JSON, code `server_shutting_down` (an SDK retries it elsewhere), the stream's last
    event is that error, and the process exits at once with 130, with no traceback in its log
    (the app's shutdown, which uvicorn skips at a force exit, was cancelled with one)."""
    with ExitStack() as started:
        directory = tmp_path / "force"
        directory.mkdir()
        sim = start_simulator(directory, {
            "slow": {"ttft_p50_ms": 10_000, "ttft_p99_ms": 10_000},
            "long": {"ttft_p50_ms": 20, "ttft_p99_ms": 20, "tpot_p50_ms": 100,
                     "tpot_p99_ms": 100, "output_tokens_p50": 100, "output_tokens_p99": 100,
                     "output_tokens_max": 100}})
        started.callback(sim.stop)
        deployments = "".join(
            f"  - {{name: {name}, model: openai/{name}, adapter: openai_passthrough, "
            f"api_base: {sim.base_url}/v1, input_price_per_mtok: 1, output_price_per_mtok: 1}}\n"
            for name in ("slow", "long"))
        config = (f"version: 1\ndeployments:\n{deployments}"
                  "models: [{name: slow, deployments: [slow]}, {name: long, deployments: [long]}]\n"
                  "routes: {default_model: slow}\nserver: {shutdown_grace_s: 30}\n")
        router = start_cold_router(directory, config)
        started.callback(router.stop)
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused",
                               max_retries=0, timeout=30)
        messages: Any = [{"role": "user", "content": "hi"}]
        raised: list[BaseException] = []

        def whole() -> None:
            try:
                client.chat.completions.create(model="slow", messages=messages)
            except Exception as error:
                raised.append(error)

        caller = threading.Thread(target=whole)
        caller.start()
        stream = client.chat.completions.create(model="long", messages=messages, stream=True)
        chunks = iter(stream)
        next(chunks)
        time.sleep(0.5)  # the whole answer's upstream call is under way too
        os.kill(router.proc.pid, signal.SIGINT)
        time.sleep(0.5)  # draining: both still in flight
        signalled = time.monotonic()
        os.kill(router.proc.pid, signal.SIGINT)
        with pytest.raises(openai.APIError) as stream_error:
            for _ in chunks:
                pass
        caller.join(timeout=15)
        code = router.proc.wait(timeout_s=15.0)
        exited_after_s = time.monotonic() - signalled
        log = router.proc.log_text()
    assert len(raised) == 1 and isinstance(raised[0], openai.APIStatusError), raised
    answer = raised[0]
    assert answer.status_code == 503, (answer.status_code, answer.response.text)
    body = answer.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == "server_shutting_down"
    assert stream_error.value.code == "server_shutting_down", stream_error.value
    assert code == 130 and exited_after_s < 3.0, (code, exited_after_s)
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
