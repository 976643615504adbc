"""A PyTorch training loop that follows gpuwarden's checkpoint convention.

Run it under the supervisor:

    gpuwarden run --checkpoint-dir ./ckpt -- python examples/pytorch_resume.py

- Each checkpoint goes into its own directory under $GPUWARDEN_CHECKPOINT_DIR,
  named with the step, and is marked complete with an empty `.complete` file
  once torch.save has returned: gpuwarden then hashes it, writes its manifest,
  commits it atomically and syncs it. A directory without the marker is torn
  and never resumed from.
- $GPUWARDEN_RESUME_FROM names the newest valid checkpoint on a restart.
- SIGUSR1 means "a preemption notice arrived: checkpoint now"; SIGTERM follows
  after the grace period.
"""
import os
import pathlib
import signal
import sys

import torch

ckpt_root = pathlib.Path(os.environ.get("GPUWARDEN_CHECKPOINT_DIR", "checkpoints/incoming"))
want_checkpoint = False


def on_usr1(signum, frame):
    global want_checkpoint
    want_checkpoint = True  # act between steps, never inside a backward pass


signal.signal(signal.SIGUSR1, on_usr1)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(512, 512).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = 0

resume = os.environ.get("GPUWARDEN_RESUME_FROM")
if resume:
    state = torch.load(pathlib.Path(resume) / "state.pt", map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
    print(f"resumed from {resume} at step {step}")


def save(step):
    d = ckpt_root / f"step-{step:06d}"
    d.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, d / "state.pt")
    (d / ".complete").touch()  # the marker comes last


while step < 10_000:
    x = torch.randn(64, 512, device=device)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 500 == 0 or want_checkpoint:
        save(step)
        want_checkpoint = False
