"""ament_python set-up for triton_ros.

Works with colcon on an apt-installed ROS 2 (Humble, Jazzy) and with plain pip into a virtual
environment (scripts/setup.sh). data_files installs the launch file, the configuration and the
bundled model repository into share/triton_ros, where the launch file finds them.
"""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "triton_ros"


def tree(src: str, dest_root: str) -> list[tuple[str, list[str]]]:
    """(install dir, files) pairs for every file below src, keeping the layout."""
    out: list[tuple[str, list[str]]] = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        files = sorted(os.path.join(dirpath, f) for f in filenames if not f.endswith(".pyc"))
        if files:
            out.append((os.path.join(dest_root, dirpath), files))
    return out


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml")),
        (f"share/{PACKAGE}/config/grafana", glob("config/grafana/*.json")),
        *tree("model_repository", f"share/{PACKAGE}"),
    ],
    install_requires=["setuptools"],
    # colcon test runs pytest only for a package that declares it as a test dependency (a
    # "test" extra or tests_require); otherwise it runs unittest, which finds no test here
    # ("Ran 0 tests") and reports success. package.xml's <test_depend> is not enough.
    # The PyTorch backend needs torch (a CUDA build of it for KIND_GPU instances); the server
    # serves every other model without it. requirements-torch.txt pins what the tests use.
    # The TensorFlow, LiteRT and forest (FIL) backends likewise (requirements-frameworks.txt).
    # sympy: onnxruntime's quantization (scripts/quantize_color_detector.py) in the tests.
    extras_require={
        "test": ["pytest", "sympy"],
        "torch": ["torch>=2.1"],
        "frameworks": [
            "tensorflow-cpu>=2.16",
            "ai-edge-litert>=1.2",
            "xgboost>=2.0",
            "lightgbm>=4.0",
            "treelite>=4.0",
            "scikit-learn>=1.3",
        ],
    },
    zip_safe=False,
    maintainer="triton_ros developers",
    maintainer_email="dev@triton-ros.invalid",
    description="Triton Inference Server's serving model for ROS 2",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "triton-ros-server = triton_ros.server_main:main",
            "inference_node = triton_ros.ros.inference_node:main",
            "synthetic_cameras = triton_ros.ros.tools.synthetic_cameras:main",
            "tracking_demo = triton_ros.ros.tools.tracking_demo:main",
            "synthetic_lidar = triton_ros.ros.tools.synthetic_lidar:main",
            "triton-ros-analyzer = triton_ros.analyzer.cli:main",
        ],
    },
)
