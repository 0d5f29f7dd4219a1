#!/usr/bin/env python3
"""triton-ros-server with extra gRPC core channel arguments, for measuring transport settings.

The product's gRPC endpoint builds its channel arguments in ``GrpcOptions.channel_options``
(``triton_ros/frontend/options.py``). This script appends the integer arguments named in the
environment variable ``GRPC_CHANNEL_ARGS`` (``name=value,name=value``, gRPC core's own names,
e.g. ``grpc.http2.max_frame_size=4194304`` or ``grpc.experimental.tcp_read_chunk_size=1048576``)
and then runs the product's ``main`` with the same flags. bench/bench_request_path.py drives it:

    .venv/bin/python bench/bench_request_path.py --checkout . --label base --checkout . \\
        --label frame --variant-server frame:bench/grpc_channel_args_server.py \\
        --variant-env frame:GRPC_CHANNEL_ARGS=grpc.http2.max_frame_size=4194304

Results: bench/results_grpc_channel_args.md. Not a product: the arguments are not validated
beyond being integers.
"""
from __future__ import annotations

import os
import sys

from triton_ros import server_main
from triton_ros.frontend import options


def parse(text: str) -> list[tuple[str, int]]:
    """``a=1,b=2`` -> [("a", 1), ("b", 2)]; raises ValueError naming a malformed item."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"GRPC_CHANNEL_ARGS: expected name=value, got {item!r}")
        pairs.append((name, int(value)))
    return pairs


def main() -> int:
    extra = parse(os.environ.get("GRPC_CHANNEL_ARGS", ""))
    product = options.GrpcOptions.channel_options
    options.GrpcOptions.channel_options = lambda self: product(self) + extra
    print(f"grpc_channel_args_server: extra channel arguments {extra}", file=sys.stderr)
    return server_main.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
