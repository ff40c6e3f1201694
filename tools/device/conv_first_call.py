"""First training step of mobilenet_v3_large in eager, NCHW against channels-last, each in a
fresh process (cuDNN's per-shape setup is paid once per process).

    python tools/device/conv_first_call.py
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import time, torch, torchvision
torch.manual_seed(0)
model = torchvision.models.mobilenet_v3_large().cuda()
x = torch.randn(64, 3, 224, 224, device="cuda")
if {channels_last}:
    model = model.to(memory_format=torch.channels_last)
    x = x.to(memory_format=torch.channels_last)
def step():
    with torch.autocast("cuda", torch.bfloat16):
        loss = model(x).float().square().mean()
    loss.backward()
    torch.cuda.synchronize()
torch.cuda.synchronize()
start = time.perf_counter(); step(); first = time.perf_counter() - start
start = time.perf_counter(); step(); later = time.perf_counter() - start
print(f"channels_last={channels_last}: first step {{first:.2f}} s, second {{later * 1e3:.1f}} ms")
"""

for channels_last in (False, True):
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(channels_last=channels_last)],
        capture_output=True, text=True,
    )  # fmt: skip
    print(done.stdout.strip() or done.stderr[-1500:])
