"""Which Kafka client library the Kafka frontend uses: confluent-kafka (librdkafka, C) against
aiokafka (asyncio, pure Python), each in a process of its own against the same real broker
(Tansu, test/kafka_broker.py), alternating, in one run.

For each library and round:

- produce: N messages of S bytes to a one-partition topic, acks=all, linger 5 ms, until every
  delivery is acknowledged: messages/s and the process's CPU (user + system, every thread,
  librdkafka's included) per message;
- consume: the same N messages back from offset 0 (partition assigned, no group): messages/s
  and CPU per message;
- round trip: P messages, one every 10 ms from a producer of its own (a thread, or a task on
  the loop), each stamped when produced (linger 0) and timed until the consumer, waiting all
  along, holds it: p50 and p99.

Exits non-zero when a worker fails or a message is missing.

    .venv/bin/python -m bench.kafka.clients --rounds 3 --out /tmp/clients.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test"))

LIBRARIES = ("confluent-kafka", "aiokafka")
# Tansu holds a fetch that finds no data for its whole max wait (below 250 ms), without waking
# when data arrives (a Kafka broker wakes it): the consumers of both libraries ask for 5 ms, so
# the broker's polling period is the same small share of either round trip.
FETCH_WAIT_MS = 5
period = 0.01  # seconds between two timed messages
WARM_UP = 10  # the first timed messages (a new producer's connection) are not counted


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return r.ru_utime + r.ru_stime


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


# ------------------------------------------------------------------------------------------
# Workers (one process each)
# ------------------------------------------------------------------------------------------


def worker_confluent(
    bootstrap: str, topic: str, ping_topic: str, n: int, size: int, pings: int
) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    value = os.urandom(size)
    delivered = [0, 0]

    def on_delivery(err, msg):
        delivered[1 if err else 0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    c0, t0 = _cpu(), time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, key=str(i).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(60)
    produce_s, produce_cpu = time.perf_counter() - t0, _cpu() - c0
    if delivered != [n, 0]:
        raise RuntimeError(f"produced {delivered[0]} of {n}, {delivered[1]} failed")

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-clients",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": FETCH_WAIT_MS,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    c0, t0 = _cpu(), time.perf_counter()
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=1000, timeout=1.0):
            if msg.error() is None:
                got += 1
    consume_s, consume_cpu = time.perf_counter() - t0, _cpu() - c0
    if got != n:
        raise RuntimeError(f"consumed {got} of {n}")

    ping_producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    consumer.assign([TopicPartition(ping_topic, 0, OFFSET_BEGINNING)])  # a new, empty topic

    def pinger():
        for i in range(pings):
            ping_producer.produce(
                ping_topic, struct.pack("<d", time.monotonic()), key=str(i).encode()
            )
            ping_producer.poll(0)
            time.sleep(period)
        ping_producer.flush(10)

    # the consumer's new assignment first fetches once (its start-up is not a round trip)
    ping_producer.produce(ping_topic, b"sync")
    ping_producer.flush(10)
    while (msg := consumer.poll(5.0)) is None or msg.error() is not None:
        pass
    thread = threading.Thread(target=pinger)
    thread.start()
    rtts = []
    deadline = time.monotonic() + pings * period + 30
    while len(rtts) < pings and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            rtts.append(time.monotonic() - struct.unpack("<d", msg.value())[0])
    thread.join()
    rtts = rtts[WARM_UP:]
    consumer.close()
    if len(rtts) != pings - WARM_UP:
        raise RuntimeError(f"received {len(rtts)} of {pings} timed messages")
    return {
        "produce_s": produce_s,
        "produce_cpu": produce_cpu,
        "consume_s": consume_s,
        "consume_cpu": consume_cpu,
        "rtts": rtts,
    }


def worker_aiokafka(
    bootstrap: str, topic: str, ping_topic: str, n: int, size: int, pings: int
) -> dict:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> dict:
        value = os.urandom(size)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        c0, t0 = _cpu(), time.perf_counter()
        futures = []
        for i in range(n):
            futures.append(await producer.send(topic, value, key=str(i).encode()))
        await producer.flush()
        results = await asyncio.gather(*futures, return_exceptions=True)
        produce_s, produce_cpu = time.perf_counter() - t0, _cpu() - c0
        failed = sum(isinstance(r, BaseException) for r in results)
        if failed:
            raise RuntimeError(f"{failed} of {n} produced messages failed")

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=FETCH_WAIT_MS,
        )
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = 0
        c0, t0 = _cpu(), time.perf_counter()
        deadline = time.monotonic() + 60
        while got < n and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=1000)
            got += sum(len(b) for b in batches.values())
        consume_s, consume_cpu = time.perf_counter() - t0, _cpu() - c0
        if got != n:
            raise RuntimeError(f"consumed {got} of {n}")

        ping_producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        await ping_producer.start()
        ptp = TopicPartition(ping_topic, 0)
        consumer.assign([ptp])
        await consumer.seek_to_beginning(ptp)  # a new, empty topic

        async def pinger():
            for i in range(pings):
                await ping_producer.send(
                    ping_topic, struct.pack("<d", time.monotonic()), key=str(i).encode()
                )
                await asyncio.sleep(period)
            await ping_producer.flush()

        await ping_producer.send_and_wait(ping_topic, b"sync")
        await asyncio.wait_for(consumer.getone(), 10)
        task = asyncio.ensure_future(pinger())
        rtts = []
        deadline = time.monotonic() + pings * period + 30
        while len(rtts) < pings and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            now = time.monotonic()
            for batch in batches.values():
                rtts.extend(now - struct.unpack("<d", m.value)[0] for m in batch)
        await task
        rtts = rtts[WARM_UP:]
        if len(rtts) != pings - WARM_UP:
            raise RuntimeError(f"received {len(rtts)} of {pings} timed messages")
        await ping_producer.stop()
        await producer.stop()
        await consumer.stop()
        return {
            "produce_s": produce_s,
            "produce_cpu": produce_cpu,
            "consume_s": consume_s,
            "consume_cpu": consume_cpu,
            "rtts": rtts,
        }

    return asyncio.run(run())


# ------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------


def run_worker(library: str, bootstrap: str, tag: str, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        library,
        "--bootstrap",
        bootstrap,
        "--tag",
        tag,
        "--messages",
        str(args.messages),
        "--size",
        str(args.size),
        "--pings",
        str(args.pings),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{library} worker failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--pings", type=int, default=500)
    p.add_argument("--out", default="")
    p.add_argument("--worker", choices=LIBRARIES)
    p.add_argument("--bootstrap")
    p.add_argument("--tag", default="")
    args = p.parse_args()

    if args.worker:
        fn = worker_confluent if args.worker == "confluent-kafka" else worker_aiokafka
        result = fn(
            args.bootstrap,
            f"bulk-{args.tag}",
            f"ping-{args.tag}",
            args.messages,
            args.size,
            args.pings,
        )
        print(json.dumps(result))
        return 0

    from bench.common import machine_lines
    from kafka_broker import KafkaBroker

    results: dict[str, list[dict]] = {lib: [] for lib in LIBRARIES}
    with KafkaBroker() as broker:
        for r in range(args.rounds):
            for lib in LIBRARIES if r % 2 == 0 else LIBRARIES[::-1]:
                tag = f"{lib}-{r}"
                broker.create_topic(f"bulk-{tag}")
                broker.create_topic(f"ping-{tag}")
                res = run_worker(lib, broker.bootstrap, tag, args)
                results[lib].append(res)
                print(
                    f"round {r} {lib}: produce {args.messages / res['produce_s']:.0f}/s, "
                    f"consume {args.messages / res['consume_s']:.0f}/s, rtt p50 "
                    f"{1e3 * _percentile(res['rtts'], 50):.2f} ms",
                    file=sys.stderr,
                )

    def row(lib: str) -> dict:
        rs = results[lib]
        rtts = [x for res in rs for x in res["rtts"]]
        return {
            "produce": statistics.median(args.messages / x["produce_s"] for x in rs),
            "produce_cpu": statistics.median(1e6 * x["produce_cpu"] / args.messages for x in rs),
            "consume": statistics.median(args.messages / x["consume_s"] for x in rs),
            "consume_cpu": statistics.median(1e6 * x["consume_cpu"] / args.messages for x in rs),
            "p50": 1e3 * _percentile(rtts, 50),
            "p99": 1e3 * _percentile(rtts, 99),
        }

    rows = {lib: row(lib) for lib in LIBRARIES}
    a, b = rows["confluent-kafka"], rows["aiokafka"]
    lines = [
        f"{args.rounds} alternating rounds; {args.messages} messages of {args.size} bytes; "
        f"{args.pings} round trips a round; medians of the rounds (round trips pooled).",
        "",
        "| library | produce msg/s | CPU us/msg produced | consume msg/s | CPU us/msg consumed "
        "| round trip p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for lib, x in rows.items():
        lines.append(
            f"| {lib} | {x['produce']:.0f} | {x['produce_cpu']:.1f} | "
            f"{x['consume']:.0f} | {x['consume_cpu']:.1f} | {x['p50']:.2f} | "
            f"{x['p99']:.2f} |"
        )
    lines.append(
        f"| confluent / aiokafka | {a['produce'] / b['produce']:.2f}x | "
        f"{a['produce_cpu'] / b['produce_cpu']:.2f}x | {a['consume'] / b['consume']:.2f}x "
        f"| {a['consume_cpu'] / b['consume_cpu']:.2f}x | {a['p50'] / b['p50']:.2f}x | "
        f"{a['p99'] / b['p99']:.2f}x |"
    )
    lines += ["", machine_lines()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
