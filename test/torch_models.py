"""TorchScript test models (needs torch): shared by test/test_pytorch_backend.py and the GPU check
test/gpu/test_gpu_pytorch.py."""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

import torch


class Detector(torch.nn.Module):
    """Two inputs of dynamic spatial size, three outputs of different ranks, one of them with
    dynamic dimensions: image [N,3,H,W], gain [N,1] -> pooled [N,8], heat [N,H/2,W/2],
    count [N,1] (INT64). Its weights come from a fixed seed."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(8, 8)

    def forward(
        self, image: torch.Tensor, gain: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        feat = torch.relu(self.conv(image)) * gain[:, :, None, None]
        pooled = self.head(feat.mean(dim=(2, 3)))
        heat = feat.amax(dim=1)
        count = (heat > 0.5).flatten(1).sum(dim=1, keepdim=True)
        return pooled, heat, count


DETECTOR_IO = """
input [ {{ name: "{i0}" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] }},
        {{ name: "{i1}" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "{o0}" data_type: TYPE_FP32 dims: [ 8 ] }},
         {{ name: "{o1}" data_type: TYPE_FP32 dims: [ -1, -1 ] }},
         {{ name: "{o2}" data_type: TYPE_INT64 dims: [ 1 ] }} ]
"""
INDEXED = ("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__1", "OUTPUT__2")


def detector_config(
    name: str, names=INDEXED, *, instances: str = "count: 2 kind: KIND_CPU", extra: str = ""
) -> str:
    i0, i1, o0, o1, o2 = names
    return (
        f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        + DETECTOR_IO.format(i0=i0, i1=i1, o0=o0, o1=o1, o2=o2)
        + "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        + (f"instance_group [ {{ {instances} }} ]\n" if instances else "")
        + 'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }\n'
        + extra
    )


def write(repo: Path, name: str, module: torch.nn.Module, config: str | None) -> Path:
    """<repo>/<name>/1/model.pt (scripted) and config.pbtxt when given."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(folder / "1" / "model.pt"))
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    return folder
