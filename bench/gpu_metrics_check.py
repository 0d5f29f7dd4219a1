"""Device check: NVML GPU metrics of triton_ros.core.metrics on a real GPU (run with python3)."""
import os, sys, time, subprocess, json
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "test")]
from triton_ros.core import metrics as trm
from prometheus_text import parse

class Repo:
    def ready_models(self): return []
class Core:
    repository = Repo(); response_cache = None

def fams(env=None):
    if env is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = env
    else:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    m = trm.Metrics(Core(), interval_ms=0)
    text = m.render()
    return m, text, parse(text)

import pynvml
print("pynvml", getattr(pynvml, "__version__", "?"))
print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout)
m, text, f = fams()
print("\n".join(l for l in text.splitlines() if "gpu" in l or "energy" in l or "cpu" in l))
names = ["nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
         "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"]
result = {n: dict(f[n].samples) if n in f else None for n in names}
uuid = list(f["nv_gpu_memory_total_bytes"].samples)[0][0][1]
ok = all(result[n] for n in names) and uuid.startswith("GPU-")
# load the GPU a few seconds, then sample again: utilization and energy should move
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t0 = time.time()
while time.time() - t0 < 4:
    b = a @ a
torch.cuda.synchronize()
text2 = m.render(); f2 = parse(text2)
print("\n".join(l for l in text2.splitlines() if "gpu" in l or "energy" in l))
util = f2["nv_gpu_utilization"].value(gpu_uuid=uuid)
energy = f2["nv_energy_consumption"].value(gpu_uuid=uuid)
used = f2["nv_gpu_memory_used_bytes"].value(gpu_uuid=uuid)
print("util", util, "energy J", energy, "used", used)
ok = ok and energy > 0 and used > f["nv_gpu_memory_used_bytes"].value(gpu_uuid=uuid) and 0 <= util <= 1
_, _, none = fams("")
_, _, zero = fams("0")
_, _, byuuid = fams(uuid)
_, _, bad = fams("7")
counts = {k: len(v["nv_gpu_memory_total_bytes"].samples) if "nv_gpu_memory_total_bytes" in v else 0
          for k, v in (("none", none), ("zero", zero), ("uuid", byuuid), ("bad", bad))}
print("visible-device filtering", counts)
ok = ok and counts == {"none": 0, "zero": 1, "uuid": 1, "bad": 0}
print("GPU METRICS CHECK", "PASS" if ok else "FAIL")
