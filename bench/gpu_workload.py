"""Real GPU workload phases for measuring nvml-watchdog on real hardware.

A copy of ``../shared/real-gpu/workload.py`` (the program that recorded
``real-gpu/h100-spin-hang``) with three phases added for the anomaly model (issue 19):
``change`` (the job ends: its memory is released, a second, differently sized job starts
later), ``train2`` (that second job) and ``slow`` (the second job slowed: each step
followed by a spinning kernel about as long, so utilization stays at 100 % while power
falls to roughly 60-70 % of the job's own, the signature of a GPU that computes slower).
``bench/gpu_checks.sh`` runs it on a GPU node.

python3 workload.py PHASE:SECONDS [PHASE:SECONDS ...]  -- phases run in order in ONE process
(so memory stays held across phases the way a real job holds it). Each phase boundary is
printed as JSON on stdout with wall-clock time, so a log can be labelled afterwards.

phases:
  idle      nothing on the GPU (context exists, little memory)
  train     a small transformer trained in bf16 with realistic pauses: every ~45 s a
            'checkpoint' (state copied to host + torch.save, GPU idle ~8-15 s, memory held),
            a short host-side pause every 50 steps (dataloader hiccup)
  hang      busy-wait kernels back to back (torch.cuda._sleep): 100% utilization at
            near-idle power, memory held -- the signature of a hung NCCL collective
  mempress  fill device memory to ~98.5 % and keep computing (small matmuls)
  stall     hold the job's memory, launch nothing (host-side hang / dead dataloader)
"""
import json
import sys
import time

import torch

dev = torch.device("cuda")
t0 = time.time()


def mark(ev, **kw):
    print(json.dumps({"t": round(time.time(), 3), "event": ev, **kw}), flush=True)


class Job:
    def __init__(self, d_model=1024, layers=8, batch=32):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=d_model, nhead=16,
                                                 dim_feedforward=4 * d_model, batch_first=True,
                                                 dtype=torch.bfloat16, device=dev)
        self.model = torch.nn.TransformerEncoder(layer, num_layers=layers)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.x = torch.randn(batch, 512, d_model, device=dev, dtype=torch.bfloat16)
        self.step_n = 0
        self.hog = []

    def step(self):
        out = self.model(self.x)
        loss = out.float().pow(2).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step_n += 1


job = None


def phase_idle(sec):
    torch.cuda.synchronize()
    time.sleep(sec)


def phase_train(sec, spin=None):
    global job
    if job is None:
        job = Job()
    end = time.time() + sec
    next_ckpt = time.time() + 45
    while time.time() < end:
        job.step()
        if spin:
            torch.cuda._sleep(spin)  # the slowed GPU: busy, drawing little
        if job.step_n % 50 == 0:
            torch.cuda.synchronize()
            time.sleep(0.3)  # dataloader hiccup
        if time.time() >= next_ckpt and end - time.time() > 20:
            torch.cuda.synchronize()
            mark("checkpoint_start")
            sd = {k: v.detach().to("cpu") for k, v in job.model.state_dict().items()}
            torch.save(sd, "/tmp/ckpt.pt")
            time.sleep(8)  # pretend the write to shared storage is slow
            mark("checkpoint_end")
            next_ckpt = time.time() + 45
    torch.cuda.synchronize()


def phase_hang(sec):
    end = time.time() + sec
    while time.time() < end:
        torch.cuda._sleep(200_000_000)  # ~0.1 s of spinning per launch at ~2 GHz
        torch.cuda.synchronize()


def phase_mempress(sec):
    global job
    if job is None:
        job = Job()
    free, total = torch.cuda.mem_get_info()
    torch.cuda.empty_cache()
    hog = []
    chunk = 256 << 20
    while True:
        free, total = torch.cuda.mem_get_info()
        if free < total * 0.015 + chunk:
            break
        hog.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
    free, total = torch.cuda.mem_get_info()
    mark("mempress_filled", used_frac=round(1 - free / total, 4))
    a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    end = time.time() + sec
    while time.time() < end:
        for _ in range(200):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        time.sleep(0.05)
    job.hog = hog  # keep holding until the next phase drops it explicitly


def phase_release(sec):
    if job is not None:
        job.hog = []
    torch.cuda.empty_cache()
    time.sleep(sec)


def phase_change(sec):
    """The job ends (memory released, no process work) and the next one is another size."""
    global job
    job = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    time.sleep(sec)
    job = Job(d_model=2048, layers=4, batch=16)


def phase_train2(sec):
    phase_train(sec)


def phase_slow(sec):
    """Each step followed by a spin about 0.8 of a step long (cycles at the running clock)."""
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(5):
        job.step()
    torch.cuda.synchronize()
    per_step = (time.time() - t) / 5
    t = time.time()
    torch.cuda._sleep(100_000_000)
    torch.cuda.synchronize()
    hz = 100_000_000 / max(time.time() - t, 1e-3)
    mark("slow_calibrated", step_s=round(per_step, 4), spin_hz=round(hz))
    phase_train(sec, spin=int(0.8 * per_step * hz))


def phase_stall(sec):
    torch.cuda.synchronize()
    time.sleep(sec)


PH = {"idle": phase_idle, "train": phase_train, "hang": phase_hang, "mempress": phase_mempress,
      "release": phase_release, "stall": phase_stall, "change": phase_change,
      "train2": phase_train2, "slow": phase_slow}

for arg in sys.argv[1:]:
    name, sec = arg.split(":")
    mark("phase_start", phase=name)
    PH[name](float(sec))
    mark("phase_end", phase=name)
mark("done")
