"""Files shipped with the package: found in the source tree, else in share/triton_ros.

A checkout (editable install, scripts/setup.sh) reads them from the repository; a colcon or
pip install reads the copies setup.py's data_files put in ``<prefix>/share/triton_ros``.
"""

from __future__ import annotations

from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]


def package_file(*parts: str) -> Path | None:
    """The path of a shipped file or directory (e.g. "config", "fastdds.xml"), or None."""
    candidate = SOURCE_ROOT.joinpath(*parts)
    if candidate.exists() and (SOURCE_ROOT / "package.xml").is_file():
        return candidate
    try:
        from ament_index_python.packages import get_package_share_directory

        candidate = Path(get_package_share_directory("triton_ros")).joinpath(*parts)
    except Exception:  # not installed as a ROS package, or no AMENT_PREFIX_PATH
        return None
    return candidate if candidate.exists() else None
