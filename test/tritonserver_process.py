"""NVIDIA's tritonserver 2.51 in a subprocess, to ask it what Triton answers.

scripts/setup.d/50-tritonserver.sh unpacks the server of the PyTriton wheel (``nvidia-pytriton``:
tritonserver 2.51.0 with its Python backend, CPU only) into ``<venv>/opt/pytriton``. A test starts
it beside ``triton-ros-server`` on the same model repository of Python-backend models and sends
both the same requests (test/test_tritonserver_parity.py). Any repository of Python models works,
written to the Python backend API of 2.51 (``InferenceResponse`` takes no ``parameters``) and
importing only numpy and the standard library.

What the stub needs, as PyTriton arranges it: the interpreter's own ``libpython3.X.so`` and the
wheel's ``nvidia_pytriton.libs`` on ``LD_LIBRARY_PATH``, and a Python environment first on
``PATH``, where the embedded interpreter finds its prefix and packages. That environment is
``<venv>/opt/pytriton/venv``, the test's Python with numpy 1.26 alone: the 2.51 stub is built
against numpy 1, and .venv's start-up hooks (the ROS wheels' re-executes ``sys.argv``, which an
embedded interpreter does not have) stay out of it. Each server gets its own prefix for the
Python backend's shared memory regions, so servers side by side (suites, xdist workers) never
share one. A plain module (not conftest) so that test modules in any folder can import it.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
import uuid
from pathlib import Path
from urllib.request import urlopen

from processes import TIMEOUT, ManagedProcess, log_dir
from server_process import free_port

#: Where scripts/setup.d/50-tritonserver.sh unpacks the wheel (its own layout).
PYTRITON_DIR = Path(sys.prefix) / "opt" / "pytriton"
TRITONSERVER_HOME = PYTRITON_DIR / "pytriton" / "tritonserver"
STUB_VENV = PYTRITON_DIR / "venv"  # the models' Python: numpy 1.26 alone
TRITONSERVER_VERSION = "2.51.0"


def _skip(reason: str):
    import pytest

    pytest.skip(reason)


def tritonserver_binary() -> Path:
    """The tritonserver the set-up installed. Where scripts/setup.sh set this environment up on
    a machine the wheel serves (x86_64, glibc >= 2.35) it must be there (AssertionError); elsewhere
    (``colcon test`` on an apt-installed ROS 2, aarch64, ``TRITON_ROS_TRITONSERVER=0``) the test
    skips, saying why."""
    binary = TRITONSERVER_HOME / "bin" / "tritonserver"
    if binary.exists():
        return binary
    stamps = Path(sys.prefix) / ".stamps"
    skipped = sorted(p.name for p in stamps.glob("tritonserver-skipped"))
    if stamps.is_dir() and not skipped and platform.machine() == "x86_64":
        raise AssertionError(
            f"scripts/setup.sh installs tritonserver into {PYTRITON_DIR} "
            f"(scripts/setup.d/50-tritonserver.sh): run it again"
        )
    _skip(
        f"no tritonserver {TRITONSERVER_VERSION} in this environment "
        f"(scripts/setup.d/50-tritonserver.sh installs it on x86_64 with glibc >= 2.35)"
    )


def stub_environment() -> dict[str, str]:
    """The environment variables tritonserver's Python backend stub needs to embed this Python
    in STUB_VENV (skips where this Python has no shared libpython, which the stub links)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    library = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not (Path(libdir) / library).exists():
        _skip(
            f"this Python ({sys.version.split()[0]}) has no shared libpython, which "
            f"tritonserver's Python backend stub links (build it with --enable-shared)"
        )
    stub = TRITONSERVER_HOME / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():
        _skip(
            f"no Python backend stub for Python {sys.version_info[0]}.{sys.version_info[1]} "
            f"in {TRITONSERVER_HOME} (the PyTriton wheel has 3.8-3.13)"
        )
    paths = [libdir, str(PYTRITON_DIR / "nvidia_pytriton.libs")]
    if os.environ.get("LD_LIBRARY_PATH"):
        paths.append(os.environ["LD_LIBRARY_PATH"])
    return {
        "LD_LIBRARY_PATH": ":".join(paths),
        "PATH": f"{STUB_VENV / 'bin'}:{os.environ.get('PATH', '')}",
    }


class TritonServerProcess(ManagedProcess):
    """tritonserver 2.51 serving ``model_repository`` on free 127.0.0.1 ports (gRPC ``url``, HTTP
    ``http_url``, ``metrics_url``); ``args`` are more tritonserver flags (``--model-control-mode
    explicit``, ...). ``stop()`` sends SIGINT and returns the exit code."""

    what = "tritonserver"
    # A crash of the server or of a stub; a Python model's own errors are logged without these.
    faults = ("Traceback", "terminate called", "Segmentation fault", "Signal (11)", "Signal (6)")

    def __init__(
        self, model_repository: str | os.PathLike, *args: str, env: dict | None = None
    ) -> None:
        binary = tritonserver_binary()
        self.port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.http_url = f"127.0.0.1:{self.http_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        # Python backend regions in /dev/shm: this server's own (tritonserver names them after
        # the model, so two servers of one model would collide on the default prefix).
        prefix = f"triton_ros_test_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        cmd = [
            str(binary),
            "--model-repository",
            str(model_repository),
            "--backend-directory",
            str(TRITONSERVER_HOME / "backends"),
            "--cache-directory",
            str(TRITONSERVER_HOME / "caches"),
            "--grpc-address",
            "127.0.0.1",
            "--grpc-port",
            str(self.port),
            "--http-address",
            "127.0.0.1",
            "--http-port",
            str(self.http_port),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--allow-gpu-metrics",
            "false",
            "--exit-timeout-secs",
            "10",
            f"--backend-config=python,shm-region-prefix-name={prefix}",
            *args,
        ]
        super().__init__(
            cmd,
            log_dir() / f"tritonserver-{self.port}.log",
            env={**stub_environment(), **(env or {})},
        )

    def ready(self) -> bool:
        """Every endpoint has started (tritonserver starts them once its models are loaded)
        and HTTP answers ``/v2/health/live``."""
        log = self.log()
        if not all(
            b in log
            for b in (
                "Started GRPCInferenceService at",
                "Started HTTPService at",
                "Started Metrics Service at",
            )
        ):
            return False
        with urlopen(f"http://{self.http_url}/v2/health/live", timeout=5) as reply:
            return reply.status == 200

    def client(self):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.url)

    def http_client(self, **kwargs):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.http_url, **kwargs)


def start_tritonserver(
    model_repository: str | os.PathLike,
    *args: str,
    timeout: float = TIMEOUT,
    env: dict | None = None,
) -> TritonServerProcess:
    """A started tritonserver (``wait_ready``); the caller stops it (``stop_and_check()``)."""
    server = TritonServerProcess(model_repository, *args, env=env)
    try:
        server.wait_ready(timeout)
    except BaseException:
        server.stop()
        raise
    return server


def assert_answers_as_tritonserver(
    case_id: str, theirs, ours, documented: dict, doc: str, section: str
) -> None:
    """The verdict of a parity case: the same status and answer as tritonserver, or a
    difference that `doc`'s table under `section` lists with both statuses as they are now.
    `theirs` and `ours` are outcomes with `status` and `same_as()`."""
    if case_id in documented:
        their_status, our_status, _why = documented[case_id]
        assert not ours.same_as(theirs), (
            f"{case_id} is listed in {doc} as a difference but both answer {ours}: "
            f"remove it from the table"
        )
        assert (their_status, our_status) == (theirs.status, ours.status), (
            f"{doc} lists {case_id} as tritonserver {their_status}, ours "
            f"{our_status}; they answer {theirs} and {ours}"
        )
        return
    assert ours.same_as(theirs), (
        f"{case_id}: tritonserver answers {theirs}\n"
        f"triton-ros-server answers {ours}\n(fix it, or list it in {doc}'s "
        f"'{section.lstrip('# ')}' with the reason)"
    )
