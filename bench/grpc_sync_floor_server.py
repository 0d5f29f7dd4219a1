#!/usr/bin/env python3
"""The floor under a synchronous gRPC servicer: ``bench/grpc_sync_server.py`` with inference
answered from a cache (each request size's first answer), so what perf_analyzer measures is
grpcio's synchronous server alone. The ``grpc.aio`` counterpart is ``bench/grpc_floor_server.py``:

    .venv/bin/python bench/bench_request_path.py --checkout . --label aio-floor \\
        --checkout . --label sync-floor --variant-server aio-floor:bench/grpc_floor_server.py \\
        --variant-server sync-floor:bench/grpc_sync_floor_server.py --cases simple:grpc:1

Flags: ``bench/grpc_sync_server.py``'s. Not a product: answers are stale by design.
"""
from __future__ import annotations

import grpc_sync_server   # this folder (run as a script)

if __name__ == "__main__":
    raise SystemExit(grpc_sync_server.main(floor=True))
