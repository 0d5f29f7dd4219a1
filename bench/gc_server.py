#!/usr/bin/env python3
"""triton-ros-server with its garbage collector's pauses measured, and optionally tuned.

CPython's cyclic garbage collector stops the thread that triggers it (holding the GIL) for as
long as a collection takes; a full (generation 2) collection walks every tracked object of the
process: gRPC's, protobuf's, numpy's and ONNX Runtime's modules included. This script runs the
product's ``main`` with the same flags and, through ``gc.callbacks``, records every collection's
duration per generation; it prints a summary to stderr when the server exits. The environment
variable ``GC_MODE`` picks what to change:

- ``measure`` (default): nothing, only measure;
- ``freeze``: ``gc.freeze()`` once the server is up (``GC_FREEZE_AFTER_S``, default 10 s after
  start), so that full collections no longer walk what start-up allocated;
- ``threshold``: ``gc.set_threshold(GC_THRESHOLD0, 10, 10)`` (default 10000), fewer collections;
- ``freeze+threshold``: both.

bench/bench_request_path.py drives it (``--variant-server LABEL:bench/gc_server.py`` with
``--variant-env LABEL:GC_MODE=freeze``). Not a product.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time

from triton_ros import server_main

_pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
_started: list[float] = [0.0]


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _pauses[info["generation"]].append(time.perf_counter() - _started[0])


def summary() -> str:
    parts = []
    for generation, pauses in _pauses.items():
        if pauses:
            ordered = sorted(pauses)
            parts.append(f"gen{generation}: {len(pauses)} collections, total "
                         f"{sum(pauses) * 1e3:.1f} ms, p99 {ordered[int(0.99 * (len(ordered) - 1))] * 1e3:.2f} ms, "
                         f"max {ordered[-1] * 1e3:.2f} ms")
        else:
            parts.append(f"gen{generation}: 0 collections")
    return "gc_server: " + "; ".join(parts)


def main() -> int:
    mode = os.environ.get("GC_MODE", "measure")
    if mode not in ("measure", "freeze", "threshold", "freeze+threshold"):
        raise SystemExit(f"GC_MODE: unknown mode {mode!r}")
    if "threshold" in mode:
        gc.set_threshold(int(os.environ.get("GC_THRESHOLD0", "10000")), 10, 10)
    if "freeze" in mode:
        after = float(os.environ.get("GC_FREEZE_AFTER_S", "10"))

        def freeze() -> None:
            time.sleep(after)
            gc.collect()
            gc.freeze()
            print(f"gc_server: froze {gc.get_freeze_count()} objects", file=sys.stderr,
                  flush=True)
        threading.Thread(target=freeze, daemon=True).start()
    gc.callbacks.append(_on_gc)
    print(f"gc_server: mode {mode}, thresholds {gc.get_threshold()}, tracked objects "
          f"{len(gc.get_objects())}", file=sys.stderr, flush=True)
    try:
        return server_main.main(sys.argv[1:])
    finally:
        print(summary(), file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
