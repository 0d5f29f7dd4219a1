"""``triton-ros-server``: serve a Triton model repository over KServe v2 gRPC and HTTP/REST, with
Prometheus metrics, like tritonserver.

Flags keep tritonserver's names for what exists here (``--model-repository``,
``--model-control-mode``, ``--load-model``, ``--repository-poll-secs``, ``--strict-model-config``,
``--exit-on-error``, ``--grpc-address``, ``--grpc-port``, ``--http-address``, ``--http-port``,
``--metrics-address``, ``--metrics-port``, ``--cache-config``,
``--log-verbose``, ``--trace-config``, ``--backend-directory``, ``--http-max-input-size``,
``--grpc-use-ssl``, ``--grpc-restricted-protocol``,
``--http-restricted-api``, ``--grpc-keepalive-*``...); the endpoints' flags come from their
settings (``frontend/options.py``), which the ROS node declares as parameters, and the
endpoints start through ``frontend/endpoints.py``, as in the node. At start it prints the table of
models and their states, then "Started GRPCInferenceService at ...", "Started HTTPService at ..."
and "Started Metrics Service at ...", as tritonserver does. SIGINT or SIGTERM stops accepting
requests, lets in-flight ones finish, unloads the models and exits 0.

Two deliberate differences: ``--exit-on-error`` defaults to false, so that a model that fails to
load is listed with its reason while every other model keeps serving (a robot should not lose
all perception for one bad model); pass ``--exit-on-error=true`` for tritonserver's behaviour.
And ``--allow-client-shm`` is this server's own flag (tritonserver has none and always lets
clients register system shared memory), off by default (docs/shared_memory.md says why).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from .core.backend_model import registry as backend_registry
from .core.cache_manager import parse_cache_config
from .core.errors import TritonRosError
from .core.log_settings import LogSettings
from .core.memory import SERVER_KEEP_AT_TOP, keep_freed_buffers, limit_malloc_arenas
from .core.model_repository_manager import CONTROL_MODES, RepositoryEntry
from .core.server import InferenceServer, ServerOptions
from .core.tracer import parse_trace_config
from .frontend.options import add_arguments as add_endpoint_arguments
from .frontend.options import options_from_args
from .settings import parse_bool

_log = logging.getLogger("triton_ros")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="triton-ros-server",
        description="Serve a Triton model repository (ONNX Runtime, TensorRT, PyTorch, OpenVINO, "
        "Python, ensembles and plugin backends) "
        "over Triton's KServe v2 gRPC and HTTP/REST protocols, with Prometheus "
        "metrics.",
    )
    p.add_argument(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        required=True,
        metavar="PATH",
        help="model repository path (repeatable)",
    )
    p.add_argument(
        "--model-control-mode",
        choices=CONTROL_MODES,
        default="none",
        help="none: load all at start; poll: also rescan; explicit: load/unload via API",
    )
    p.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="with explicit control, a model to load at start ('*' for all; repeatable)",
    )
    p.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        help="poll interval with --model-control-mode=poll (default 15)",
    )
    p.add_argument(
        "--backend-directory",
        action="append",
        default=[],
        metavar="PATH",
        help="a directory of plugin backends, <PATH>/<name>/backend.py each "
        "(repeatable; searched after the built-in backends and the "
        "'triton_ros.backends' entry points; docs/backends.md)",
    )
    p.add_argument(
        "--strict-model-config",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="require complete config.pbtxt files; false completes a missing or "
        "partial one from the model files (ONNX, OpenVINO, TensorRT and Python "
        "models; default false)",
    )
    p.add_argument(
        "--strict-readiness",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="server is ready only when every loaded model is ready (default true)",
    )
    p.add_argument(
        "--exit-on-error",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="exit if any model fails to load at start (default false; tritonserver's "
        "default is true)",
    )
    p.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="how long shutdown waits for in-flight requests (default 30)",
    )
    p.add_argument(
        "--allow-client-shm",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="let clients register system shared memory regions and use them for "
        "inputs and outputs (default false; tritonserver has no such flag "
        "and always allows it: docs/shared_memory.md)",
    )
    p.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,KEY=VALUE",
        help="response cache, e.g. --cache-config local,size=1048576 (repeatable)",
    )
    p.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="deprecated: same as --cache-config local,size=BYTES",
    )
    p.add_argument("--id", dest="server_id", default="triton", help="server identifier")
    p.add_argument(
        "--log-verbose",
        type=int,
        default=0,
        metavar="LEVEL",
        help="verbose logging level (>0 enables debug logging)",
    )
    p.add_argument("--log-info", type=parse_bool, default=True, metavar="BOOL")
    p.add_argument("--log-warning", type=parse_bool, default=True, metavar="BOOL")
    p.add_argument("--log-error", type=parse_bool, default=True, metavar="BOOL")
    p.add_argument("--log-format", choices=("default", "ISO8601"), default="default")
    add_endpoint_arguments(p)
    add_trace_arguments(p)
    return p


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """tritonserver's tracing flags (core/tracer.py, docs/tracing.md)."""
    p.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[triton,]SETTING=VALUE",
        help="request tracing, as tritonserver: level=OFF|TIMESTAMPS|TENSORS, rate=N, "
        "count=N, mode=triton, triton,file=PATH, triton,log-frequency=N "
        "(repeatable)",
    )
    for flag, kind in (
        ("--trace-file", str),
        ("--trace-rate", int),
        ("--trace-count", int),
        ("--trace-log-frequency", int),
    ):
        p.add_argument(flag, type=kind, default=None, help=argparse.SUPPRESS)  # deprecated
    p.add_argument("--trace-level", action="append", default=[], help=argparse.SUPPRESS)


def trace_config_from_args(args: argparse.Namespace):
    """The global trace settings of ``--trace-config`` and the deprecated ``--trace-*`` flags
    (tritonserver warns about those, and so do we)."""
    for flag in ("trace_file", "trace_level", "trace_rate", "trace_count", "trace_log_frequency"):
        if getattr(args, flag) not in (None, []):
            name = "--" + flag.replace("_", "-")
            print(
                f"Warning: '{name}' has been deprecated and will be removed in a future "
                f"release. Please use '--trace-config' instead.",
                file=sys.stderr,
            )
    return parse_trace_config(
        args.trace_config,
        file=args.trace_file,
        levels=args.trace_level,
        rate=args.trace_rate,
        count=args.trace_count,
        log_frequency=args.trace_log_frequency,
        warn=lambda message: print(f"Warning: {message}", file=sys.stderr),
    )


def model_table(entries: list[RepositoryEntry]) -> str:
    """The start-up table of models and states, formatted as tritonserver prints it."""
    rows = [("Model", "Version", "Status")]
    for e in entries:
        if not e.state:
            continue  # in the repository but never asked to load (explicit mode)
        status = e.state if not e.reason else f"{e.state}: {e.reason}"
        rows.append((e.name, e.version, status))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(r):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"

    return "\n".join([line, fmt(rows[0]), line, *[fmt(r) for r in rows[1:]], line])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = LogSettings.python_level(
        {
            "log_verbose_level": args.log_verbose,
            "log_info": args.log_info,
            "log_warning": args.log_warning,
            "log_error": args.log_error,
        }
    )
    logging.basicConfig(
        level=level,
        format="%(levelname).1s%(asctime)s %(name)s] %(message)s",
        datefmt="%m%d %H:%M:%S",
    )

    cache_args = list(args.cache_config)
    if args.response_cache_byte_size is not None:
        if cache_args:
            print(
                "error: Incompatible flags --response-cache-byte-size and --cache-config both "
                "provided. Please provide one or the other.",
                file=sys.stderr,
            )
            return 1
        cache_args = [f"local,size={args.response_cache_byte_size}"]
    backend_registry.set_directories(args.backend_directory)
    try:
        cache_config = parse_cache_config(cache_args)
        endpoint_options = options_from_args(args)
        trace_config = trace_config_from_args(args)
    except TritonRosError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1

    options = ServerOptions(
        model_repositories=tuple(args.model_repository),
        model_control_mode=args.model_control_mode,
        startup_models=tuple(args.load_model),
        strict_model_config=args.strict_model_config,
        strict_readiness=args.strict_readiness,
        repository_poll_secs=args.repository_poll_secs,
        exit_timeout_secs=args.exit_timeout_secs,
        server_id=args.server_id,
        cache_config=cache_config,
        allow_client_shm=args.allow_client_shm,
        log_info=args.log_info,
        log_warning=args.log_warning,
        log_error=args.log_error,
        log_verbose=args.log_verbose,
        log_format=args.log_format,
        trace_config=trace_config,
    )
    # glibc (core/memory.py): one arena, whose freed buffers are kept for reuse while requests
    # come and handed back to the system once they stop (the core's IdleTrim).
    limit_malloc_arenas(1)
    keep_freed_buffers(at_top=SERVER_KEEP_AT_TOP)
    try:
        core = InferenceServer(options)
        core.log_settings.apply(core.log_settings.get())
        core.start()
    except TritonRosError as exc:
        print(f"error: creating server: {exc.code.name} - {exc.message}", file=sys.stderr)
        return 1

    entries = core.repository_index()
    print(model_table(entries), flush=True)
    failed = [e for e in entries if e.state and e.state != "READY"]
    if failed and args.exit_on_error:
        print("error: creating server: INTERNAL - failed to load all models", file=sys.stderr)
        core.stop()
        return 1

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())

    from .frontend.endpoints import EndpointStartError, Endpoints

    endpoints = Endpoints(core, endpoint_options)
    try:
        for kind, endpoint in endpoints.start():
            print(kind.banner.format(endpoint.target), flush=True)
    except EndpointStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        core.stop()
        return 1

    while not stop.wait(0.5):
        pass
    print("Received signal, waiting for in-flight requests to complete", flush=True)
    endpoints.stop_protocols()
    core.stop()
    endpoints.stop()  # metrics stay scrapeable until the models are unloaded
    print("Server stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
