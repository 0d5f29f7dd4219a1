"""Which HTTP stack, and is the new HTTP endpoint at least as fast as the old one? One run.

Part 1, the stack choice: the same two routes (``GET /v2/health/live``; ``POST /echo`` that reads
a 16 KiB body and answers a small JSON) on aiohttp's low-level server and on uvicorn with
httptools (ASGI), each in its own process, loaded alternately by the same raw-socket keep-alive
load generator (``--connections`` connections, ``--seconds`` per run).

Part 2, old vs new: ``triton-ros-server`` from a checkout of another commit (``--old``, e.g. a
``git worktree add --detach /tmp/old main``: the hand-written HTTP/1.1 server) and from this
tree (aiohttp), alternately, on the bundled ``simple`` model with perf_analyzer ``-i http``
(batch 1, concurrency ``--concurrency``) and with the load generator on ``/v2/health/live``.

    .venv/bin/pip install uvicorn httptools     # part 1 only; not a runtime dependency
    .venv/bin/python bench/http_stack.py --old /tmp/old [--rounds 2]

Writes ``bench/results_http_stack.md`` (machine, every run, medians and ratios).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_vs_grpc import PERF_ANALYZER, free_port, machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))     # this tree's triton_ros, whatever the environment installed
OUT = ROOT / "bench" / "out"
BODY = b"x" * 16384


# ------------------------------------------------------------------------------------------
# Part 1 servers
# ------------------------------------------------------------------------------------------

def serve_aiohttp(port: int) -> None:
    from aiohttp import web

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/v2/health/live":
            return web.Response(status=200)
        body = await request.read()
        return web.Response(body=json.dumps({"size": len(body)}).encode(),
                            content_type="application/json")

    async def main() -> None:
        server = web.Server(handle, access_log=None)
        await asyncio.get_running_loop().create_server(server, "127.0.0.1", port, backlog=1024)
        await asyncio.Event().wait()

    # the endpoint's own loop (uvloop where installed), as uvicorn picks uvloop where installed
    from triton_ros.frontend.http_transport import new_http_loop
    loop = new_http_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(main())


def serve_uvicorn(port: int) -> None:
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/v2/health/live":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        size = 0
        more = True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        body = json.dumps({"size": size}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, http="httptools", loop="asyncio",
                log_level="warning", access_log=False, lifespan="off")


# ------------------------------------------------------------------------------------------
# Load generator: keep-alive connections, one request in flight on each
# ------------------------------------------------------------------------------------------

async def _one_connection(port: int, request: bytes, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?i)content-length: *(\d+)", head)
            if match and int(match.group(1)):
                await reader.readexactly(int(match.group(1)))
            if not head.startswith(b"HTTP/1.1 200"):
                counts[1] += 1
            counts[0] += 1
    finally:
        writer.close()


def load(port: int, request: bytes, connections: int, seconds: float) -> float:
    """Requests per second over ``seconds`` with ``connections`` keep-alive connections."""
    async def run() -> tuple[int, int]:
        counts = [0, 0]
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(_one_connection(port, request, deadline, counts)
                               for _ in range(connections)))
        return counts[0], counts[1]

    started = time.monotonic()
    done, errors = asyncio.run(run())
    if errors:
        raise RuntimeError(f"{errors} non-200 answers")
    return done / (time.monotonic() - started)


def wait_port(port: int, timeout: float = 60.0) -> None:
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


HEALTH = b"GET /v2/health/live HTTP/1.1\r\nHost: b\r\n\r\n"
ECHO = (b"POST /echo HTTP/1.1\r\nHost: b\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY


def part1(args) -> list[tuple[str, str, float]]:
    rows = []
    for _ in range(args.rounds):
        for stack, target in (("aiohttp", serve_aiohttp), ("uvicorn+httptools", serve_uvicorn)):
            port = free_port()
            proc = multiprocessing.Process(target=target, args=(port,), daemon=True)
            proc.start()
            try:
                wait_port(port)
                for what, request in (("health GET", HEALTH), ("16 KiB POST", ECHO)):
                    rows.append((stack, what, load(port, request, args.connections,
                                                   args.seconds)))
            finally:
                proc.terminate()
                proc.join(10)
    return rows


# ------------------------------------------------------------------------------------------
# Part 2: old and new triton-ros-server
# ------------------------------------------------------------------------------------------

class Server:
    def __init__(self, tree: Path, tag: str) -> None:
        self.grpc_port, self.http_port, metrics_port = free_port(), free_port(), free_port()
        OUT.mkdir(parents=True, exist_ok=True)
        self.log_path = OUT / f"server-{tag}.log"
        self._log = open(self.log_path, "w")
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "triton_ros.server_main", "--model-repository",
             str(ROOT / "model_repository"), "--grpc-port", str(self.grpc_port), "--http-port",
             str(self.http_port), "--metrics-port", str(metrics_port)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(tree), env=env)
        deadline = time.monotonic() + 120
        while "Started Metrics Service" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start: see {self.log_path}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)
        self._log.close()


def perf(port: int, concurrency: int, interval_ms: int, tag: str) -> float:
    cmd = [str(PERF_ANALYZER), "-m", "simple", "-i", "http", "-u", f"127.0.0.1:{port}",
           "--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms),
           "--max-trials", "3", "-s", "100000", "--input-data", "zero"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=interval_ms / 1000 * 6 + 120)
    (OUT / f"http-stack-{tag}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed:\n{proc.stdout}{proc.stderr}")
    return float(re.search(r"Throughput: ([\d.]+) infer/sec", proc.stdout).group(1))


def part2(args) -> list[tuple[str, str, float]]:
    rows = []
    for r in range(args.rounds):
        for tag, tree in (("old", Path(args.old)), ("new", ROOT)):
            server = Server(tree, f"{tag}{r}")
            try:
                rows.append((tag, "perf_analyzer simple infer/s",
                             perf(server.http_port, args.concurrency, args.interval_ms,
                                  f"{tag}{r}")))
                rows.append((tag, "health GET req/s",
                             load(server.http_port, HEALTH, args.connections, args.seconds)))
            finally:
                server.stop()
    return rows


def median_table(rows, a: str, b: str) -> list[str]:
    lines = [f"| measure | {a} (median) | {b} (median) | {b} / {a} |", "|---|---|---|---|"]
    for what in dict.fromkeys(r[1] for r in rows):
        x = statistics.median(v for s, w, v in rows if s == a and w == what)
        y = statistics.median(v for s, w, v in rows if s == b and w == what)
        lines.append(f"| {what} | {x:.0f} | {y:.0f} | {y / x:.2f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="checkout of the commit to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--skip-stack", action="store_true", help="part 2 only")
    args = parser.parse_args()
    old_rev = subprocess.run(["git", "-C", args.old, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    new_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    import aiohttp
    from triton_ros.frontend.http_transport import new_http_loop
    probe = new_http_loop()
    loop_kind = type(probe).__module__.split(".")[0]
    probe.close()
    try:
        import httptools
        import uvicorn
        stacks = [] if args.skip_stack else part1(args)
        versions = (f"aiohttp {aiohttp.__version__}, uvicorn {uvicorn.__version__}, httptools "
                    f"{httptools.__version__}; event loop of the aiohttp servers: {loop_kind}")
    except ImportError:
        stacks, versions = [], (f"aiohttp {aiohttp.__version__} on {loop_kind}'s event loop "
                                f"(uvicorn not installed: part 1 skipped)")
    servers = part2(args)

    lines = ["# HTTP stack: aiohttp vs uvicorn+httptools; old vs new HTTP endpoint (one run)", "",
             f"Machine: {machine()}. Load generator: asyncio raw sockets, {args.connections} "
             f"keep-alive connections, {args.seconds:.0f} s per run; perf_analyzer 2.50.0 "
             f"`-i http`, batch 1, concurrency {args.concurrency}, `--input-data zero`. "
             f"{args.rounds} alternating rounds; the generators share the CPU with the server: "
             f"read the ratios.", "", f"Versions: {versions}. Old tree {old_rev}, new tree "
             f"{new_rev} (+ working changes).", ""]
    if stacks:
        lines += ["## Part 1: the stack (same two routes, same generator)", ""]
        lines += median_table(stacks, "uvicorn+httptools", "aiohttp")
        lines += ["", "Every run: " + "; ".join(f"{s} {w} {v:.0f}" for s, w, v in stacks), ""]
        ratios = [statistics.median(v for s, w, v in stacks if s == "aiohttp" and w == what) /
                  statistics.median(v for s, w, v in stacks if s != "aiohttp" and w == what)
                  for what in dict.fromkeys(r[1] for r in stacks)]
        spread = max(max(v for s, w, v in stacks if w == what) /
                     min(v for s, w, v in stacks if w == what)
                     for what in dict.fromkeys(r[1] for r in stacks))
        lines += [f"Choice: aiohttp. Its throughput is {min(ratios):.2f}-{max(ratios):.2f} times "
                  f"uvicorn+httptools' here (runs of one measure differ by up to "
                  f"{spread:.1f}x on this shared machine); it is already installed with "
                  f"tritonclient[http] (no new dependency), its C parser (llhttp) refuses "
                  f"malformed framing, and its low-level server is an asyncio protocol "
                  f"factory, so the connection limit and header timeout are added without "
                  f"patching it; the metrics endpoint runs on the same stack.", ""]
    lines += ["## Part 2: triton-ros-server old (hand-written HTTP/1.1) vs new (aiohttp)", ""]
    lines += median_table(servers, "old", "new")
    lines += ["", "Every run: " + "; ".join(f"{s} {w} {v:.0f}" for s, w, v in servers), ""]
    (ROOT / "bench" / "results_http_stack.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
