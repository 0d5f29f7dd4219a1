"""The same server, the same model, in one run: requests over Kafka (request topic -> the Kafka
frontend -> reply topic) against requests over gRPC, closed loop at fixed concurrencies.

One ``triton-ros-server`` serves the bundled ``simple`` model (INT32 [1,16] add/sub) on gRPC and
on Kafka (a Tansu broker, test/kafka_broker.py, topic of 4 partitions). For each concurrency C
and round, alternating: gRPC (tritonclient.grpc ``async_infer``, C requests outstanding, the
next sent from each completion callback) and Kafka (confluent-kafka: C requests outstanding,
keyed over 16 keys, the next sent as each reply arrives, replies matched by correlation id),
each for ``--seconds``. Reported: requests/s, p50 and p99 from send to reply, CPU per request
of the server, the broker and the load generator (/proc, getrusage), and Kafka / gRPC ratios.
Every reply is checked (OUTPUT0 = INPUT0 + INPUT1); the script exits non-zero when one is wrong
or missing.

Tansu answers a fetch that finds no data only at the end of its wait (Kafka answers when data
arrives): both consumers here (the server's and the client's) ask for 5 ms
(``--kafka-fetch-wait-max-ms 5``), a few ms of each round trip that a Kafka cluster would not
add.

    .venv/bin/python -m bench.kafka.kafka_vs_grpc --concurrency 1 16 --seconds 8 --rounds 2
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test"))

FETCH_WAIT_MS = 5
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def client_cpu() -> float:
    """This process's CPU seconds, every thread (the load generator's own cost)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class Run:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def done(self, latency: float, error: str | None) -> None:
        with self.lock:
            if error:
                self.errors.append(error)
            else:
                self.latencies.append(latency)


def run_grpc(url: str, concurrency: int, seconds: float) -> Run:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    run, stop = Run(), threading.Event()
    finished = threading.Semaphore(0)

    def send():
        sent = time.perf_counter()

        def callback(result, error):
            latency = time.perf_counter() - sent
            if error is not None:
                run.done(0, str(error))
            elif not np.array_equal(result.as_numpy("OUTPUT0"), A + B):
                run.done(0, "wrong OUTPUT0")
            else:
                run.done(latency, None)
            if stop.is_set():
                finished.release()
            else:
                send()

        client.async_infer("simple", inputs, callback)

    for _ in range(concurrency):
        send()
    time.sleep(seconds)
    stop.set()
    for _ in range(concurrency):
        finished.acquire(timeout=10)
    client.close()
    return run


def run_kafka(bootstrap: str, topic: str, concurrency: int, seconds: float) -> Run:
    import tritonclient.http as httpclient
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    from kafka_broker import create_topic

    reply_topic = f"bench-replies-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, reply_topic, 1)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(A, binary_data=True)
    inputs[1].set_data_from_numpy(B, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    base_headers = [
        ("model-name", b"simple"),
        ("reply-topic", reply_topic.encode()),
        ("inference-header-content-length", str(json_size).encode()),
    ]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(reply_topic, 0, OFFSET_BEGINNING)])
    run = Run()
    outstanding: dict[bytes, float] = {}
    counter = [0]

    def send():
        i = counter[0]
        counter[0] += 1
        corr = str(i).encode()
        outstanding[corr] = time.perf_counter()
        producer.produce(
            topic,
            body,
            key=f"k{i % 16}".encode(),
            headers=base_headers + [("correlation-id", corr)],
        )
        producer.poll(0)

    for _ in range(concurrency):
        send()
    end = time.monotonic() + seconds
    drain_end = end + 15
    while outstanding and time.monotonic() < drain_end:
        message = consumer.poll(0.05)
        if message is None or message.error() is not None:
            continue
        headers = dict(message.headers() or [])
        sent = outstanding.pop(headers.get("correlation-id"), None)
        if sent is None:
            continue  # a duplicate (at-least-once)
        latency = time.perf_counter() - sent
        if headers.get("triton-status") != b"OK":
            run.done(0, message.value().decode(errors="replace"))
        else:
            length = headers.get("inference-header-content-length")
            result = httpclient.InferenceServerClient.parse_response_body(
                message.value(), header_length=int(length) if length else None
            )
            run.done(
                latency,
                None if np.array_equal(result.as_numpy("OUTPUT0"), A + B) else "wrong OUTPUT0",
            )
        if time.monotonic() < end:
            send()
    for corr in outstanding:
        run.done(0, f"no reply to {corr!r}")
    producer.flush(5)
    consumer.close()
    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="")
    p.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="a further triton-ros-server argument (repeatable), e.g. "
        "--server-arg=--kafka-linger-ms=0",
    )
    args = p.parse_args()

    from bench.common import cpu_seconds, machine_lines
    from kafka_broker import TEST_SESSION_TIMEOUT_MS, KafkaBroker
    from server_process import MODEL_REPOSITORY, ServerProcess

    failures = []
    results: dict[tuple[str, int], list[tuple[Run, float, float]]] = {}
    with KafkaBroker() as broker:
        broker.create_topic("bench-requests", 4)
        import shutil
        import tempfile

        repo = Path(tempfile.mkdtemp(prefix="kafka_bench_"))
        shutil.copytree(MODEL_REPOSITORY / "simple", repo / "simple")
        server = ServerProcess(
            "--model-repository",
            str(repo),
            "--allow-http",
            "false",
            "--kafka-brokers",
            broker.bootstrap,
            "--kafka-request-topics",
            "bench-requests",
            "--kafka-session-timeout-ms",
            str(TEST_SESSION_TIMEOUT_MS),
            "--kafka-fetch-wait-max-ms",
            str(FETCH_WAIT_MS),
            *args.server_arg,
        )
        try:
            server.wait_live()
            deadline = time.monotonic() + 30
            while "Kafka partitions assigned" not in server.log():
                if time.monotonic() > deadline:
                    raise TimeoutError(server.log())
                time.sleep(0.1)
            run_kafka(broker.bootstrap, "bench-requests", 1, 1.0)  # warm both paths
            run_grpc(server.url, 1, 1.0)
            for r in range(args.rounds):
                for c in args.concurrency:
                    order = ("grpc", "kafka") if r % 2 == 0 else ("kafka", "grpc")
                    for transport in order:
                        cpu0, t0 = cpu_seconds(server.proc.pid), time.perf_counter()
                        broker0, client0 = cpu_seconds(broker.proc.pid), client_cpu()
                        if transport == "grpc":
                            run = run_grpc(server.url, c, args.seconds)
                        else:
                            run = run_kafka(broker.bootstrap, "bench-requests", c, args.seconds)
                        wall = time.perf_counter() - t0
                        cpu = cpu_seconds(server.proc.pid) - cpu0
                        others = (cpu_seconds(broker.proc.pid) - broker0, client_cpu() - client0)
                        results.setdefault((transport, c), []).append((run, wall, cpu, others))
                        failures += [f"{transport} c={c}: {e}" for e in run.errors[:3]]
                        print(
                            f"round {r} {transport} c={c}: {len(run.latencies) / wall:.0f}/s "
                            f"p50 {1e3 * percentile(run.latencies, 50):.2f} ms, "
                            f"{len(run.errors)} errors",
                            file=sys.stderr,
                        )
        finally:
            server.stop()
            shutil.rmtree(repo, ignore_errors=True)

    lines = [
        f"{args.rounds} alternating rounds of {args.seconds:.0f} s per transport and "
        f"concurrency; medians of the rounds (latencies pooled).",
        "",
        "| concurrency | transport | requests/s | p50 ms | p99 ms | server CPU us/request "
        "| broker CPU us/request | client CPU us/request |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for c in args.concurrency:
        for transport in ("grpc", "kafka"):
            rs = results[(transport, c)]
            lat = [x for run, *_ in rs for x in run.latencies]
            rate = statistics.median(len(run.latencies) / wall for run, wall, *_ in rs)

            def per_request(pick) -> float:
                return statistics.median(1e6 * pick(r) / max(1, len(r[0].latencies)) for r in rs)

            cpu = per_request(lambda r: r[2])
            broker_cpu = per_request(lambda r: r[3][0])
            client = per_request(lambda r: r[3][1])
            summary[(transport, c)] = (
                rate,
                percentile(lat, 50) * 1e3,
                percentile(lat, 99) * 1e3,
                cpu,
            )
            lines.append(
                f"| {c} | {transport} | {rate:.0f} | {summary[(transport, c)][1]:.2f} | "
                f"{summary[(transport, c)][2]:.2f} | {cpu:.0f} | "
                f"{broker_cpu if transport == 'kafka' else 0:.0f} | {client:.0f} |"
            )
        k, g = summary[("kafka", c)], summary[("grpc", c)]
        lines.append(
            f"| {c} | kafka / grpc | {k[0] / g[0]:.2f}x | {k[1] / g[1]:.2f}x | "
            f"{k[2] / g[2]:.2f}x | {k[3] / g[3]:.2f}x | | |"
        )
    lines += [
        "",
        machine_lines(),
        f"- load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if failures:
        print("FAILED:\n" + "\n".join(failures[:20]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
