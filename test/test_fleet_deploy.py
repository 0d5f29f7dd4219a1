"""The fleet set-up of docs/fleet.md, checked where it can be here (no container engine or cluster).

- The robot params file of docs/fleet.md uses only parameters the node declares, with values the
  node accepts (the docs test cannot start it: it needs an edge server).
- The KServe manifests parse, name each other consistently, and their arguments are accepted by
  triton-ros-server's own argument parser.
- The Dockerfile's steps, in a fresh virtual environment instead of an image: only the server's
  pins (selected from requirements.txt by the Dockerfile's own pattern), the package without ROS,
  then ``triton-ros-server`` serves the bundled detector to tritonclient.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from processes import wait_until
from server_process import free_port


pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def fleet_params() -> dict:
    doc = (ROOT / "docs" / "fleet.md").read_text()
    section = doc[doc.index("## On each robot") : doc.index("## What the node does")]
    block = re.search(r"^```yaml\n(.*?)^```", section, re.M | re.S)
    assert block, "docs/fleet.md 'On each robot' has its params file"
    return yaml.safe_load(block.group(1))["/**"]["ros__parameters"]


def flat(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and not prefix and k in ("grpc", "http", "metrics"):
            yield from flat(v, f"{k}.")
        else:
            yield f"{prefix}{k}", v


def test_the_fleet_params_are_parameters_of_the_node(tmp_path, monkeypatch):
    from triton_ros.ros.parameters import BINDING_PARAMS, NODE_PARAMS, binding_config, check_value

    params = fleet_params()
    monkeypatch.setenv("TRITON_INFER_KEY", "from-the-environment")
    node_specs = {s.name: s for s in NODE_PARAMS}
    binding_names = params["bindings"]
    for name, value in flat({k: v for k, v in params.items() if k not in binding_names}):
        assert name in node_specs, f"'{name}' is not a node parameter"
        check_value(name, value, node_specs[name])
    specs = {s.name: s for s in BINDING_PARAMS}
    for binding in binding_names:
        raw = {s.name: s.default for s in BINDING_PARAMS}
        for name, value in params[binding].items():
            assert name in specs, f"'{binding}.{name}' is not a binding parameter"
            if name.startswith("tls_"):  # the doc's paths, made real here
                path = tmp_path / Path(value).name
                path.write_text("PEM")
                value = str(path)
            raw[name] = check_value(f"{binding}.{name}", value, specs[name])
        config = binding_config(binding, raw)
        assert config.remote is not None and len(config.remote.urls) == 2
        assert config.remote.header_value == "from-the-environment"
        assert "from-the-environment" not in repr(config)  # the header value is not printed
        monkeypatch.delenv("TRITON_INFER_KEY")
        with pytest.raises(Exception, match="TRITON_INFER_KEY"):
            binding_config(binding, raw)


def test_kserve_manifests_fit_triton_ros_server():
    from triton_ros.server_main import build_parser

    runtime = yaml.safe_load((ROOT / "deploy/kserve/servingruntime.yaml").read_text())
    service = yaml.safe_load((ROOT / "deploy/kserve/inferenceservice.yaml").read_text())
    assert runtime["kind"] == "ServingRuntime" and service["kind"] == "InferenceService"
    (container,) = runtime["spec"]["containers"]
    assert container["command"] == ["triton-ros-server"]
    args = build_parser().parse_args(container["args"])
    assert args.model_repository == ["/mnt/models"]  # where KServe puts storageUri
    assert args.grpc_address == args.http_address == args.metrics_address == "0.0.0.0"
    (port,) = container["ports"]
    assert port["name"] == "h2c" and port["containerPort"] == args.grpc_port
    assert args.http_port == 8080
    assert runtime["spec"]["annotations"]["prometheus.kserve.io/port"] == str(args.metrics_port)
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert model["modelFormat"]["name"] in {
        f["name"] for f in runtime["spec"]["supportedModelFormats"]
    }
    assert model["ports"][0]["containerPort"] == args.grpc_port


def copy_as_the_image_does(dockerfile: str, workdir: Path) -> None:
    """The Dockerfile's COPY lines, from this checkout into ``workdir`` (its WORKDIR)."""
    for line in dockerfile.splitlines():
        if not line.startswith("COPY "):
            continue
        *sources, dest = shlex.split(line)[1:]
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"
            target = workdir / dest
            if dest.endswith("/") or len(sources) > 1:
                target = target / Path(source).name
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, target)


def test_dockerfile_steps_in_a_fresh_environment(tmp_path):
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The build context as the image has it: only what the Dockerfile copies (a build in this
    # checkout would also see its virtual environments and race the other suites' builds).
    workdir = tmp_path / "image"
    copy_as_the_image_does(dockerfile, workdir)
    pattern = re.search(r"grep -E '([^']+)'", dockerfile).group(1)
    pins = [
        line
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if re.match(pattern, line)
    ]
    assert any(p.startswith("tritonclient[") for p in pins) and any(
        p.startswith("onnxruntime==") for p in pins
    ), pins
    assert not any(p.startswith("ros-") for p in pins)
    # The image's steps run on the image's Python (its FROM line); the suite of another Python
    # has checked the Dockerfile above and leaves the install to that one (a fresh environment
    # costs half a minute of CPU).
    image_python = re.search(r"^FROM python:(\d+\.\d+)", dockerfile, re.M).group(1)
    if image_python != "%d.%d" % sys.version_info[:2]:
        pytest.skip(
            f"the image runs CPython {image_python} (the Dockerfile's FROM); this is "
            f"CPython {sys.version_info[0]}.{sys.version_info[1]}"
        )
    (tmp_path / "requirements-server.txt").write_text("\n".join(pins) + "\n")
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    subprocess.run(pip + ["-r", str(tmp_path / "requirements-server.txt")], check=True, timeout=900)
    # As in the image: a wheel build (PEP 517), so the console scripts land in bin/ whatever
    # pip's version (pip < 23.1 would otherwise run `setup.py install`, which honours setup.cfg's
    # ament layout and puts them under lib/triton_ros/ instead).
    subprocess.run(pip + ["--no-deps", "--use-pep517", "."], check=True, timeout=600, cwd=workdir)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import rclpy"], capture_output=True).returncode != 0
    port = free_port()
    server = subprocess.Popen(
        [
            str(venv / "bin" / "triton-ros-server"),
            "--model-repository",
            str(ROOT / "model_repository"),
            "--grpc-port",
            str(port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--model-control-mode",
            "explicit",
            "--load-model",
            "detector",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    try:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")

        def ready() -> bool:
            assert server.poll() is None, server.communicate()[0]
            try:
                return client.is_model_ready("detector")
            except Exception:  # not listening yet
                return False

        wait_until(ready, 120, "the container's server ready", interval=0.2)
        x = grpcclient.InferInput("images", [1, 3, 256, 256], "FP32")
        x.set_data_from_numpy(np.zeros((1, 3, 256, 256), np.float32))
        assert client.infer("detector", [x]).as_numpy("boxes").shape == (1, 256, 4)
    finally:
        server.terminate()
        out = server.communicate(timeout=60)[0]
    assert server.returncode == 0, out
