"""A PyTorch training loop that follows gpuwarden's checkpoint convention and
resumes bit for bit: the same weights, optimizer moments and RNG stream as a
run that was never interrupted.

Run it under the supervisor, and prove the resume:

    gpuwarden run --checkpoint-dir ./ckpt -- python3 examples/pytorch_resume.py
    gpuwarden run --drill --verify-state -- python3 examples/pytorch_resume.py --every 50

- Each checkpoint goes into its own directory under $GPUWARDEN_CHECKPOINT_DIR,
  named with the step, and is marked complete with an empty `.complete` file
  once everything is written: gpuwarden then hashes it, writes its manifest,
  commits it atomically and syncs it. A directory without the marker is torn
  and never resumed from.
- A checkpoint holds everything the next step depends on: model, optimizer,
  the step, and the RNG states (torch, CUDA, Python). Without the RNG state a
  resumed run draws different batches and can never match an uninterrupted one.
- `state.digest` is a sha256 over that state, tensor by tensor. `--verify-state`
  compares it between the resumed run and an uninterrupted one, which works
  even where torch.save's bytes are not reproducible.
- $GPUWARDEN_RESUME_FROM names the newest valid checkpoint on a restart.
- SIGUSR1 means "checkpoint now" (a notice arrived); the handler goes in
  before `import torch`, which takes seconds, so an early notice finds it.
  SIGTERM stops the job; gpuwarden sends it after the checkpoint or the grace.
"""
import argparse
import hashlib
import os
import pathlib
import random
import signal
import sys

want_checkpoint = False


def on_usr1(signum, frame):
    global want_checkpoint
    want_checkpoint = True  # act between steps, never inside a backward pass


signal.signal(signal.SIGUSR1, on_usr1)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

# Deterministic cuBLAS, as PyTorch's reproducibility notes ask; set before
# CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=10_000, help="steps to train")
parser.add_argument("--every", type=int, default=500, help="checkpoint every this many steps")
args = parser.parse_args()

ckpt_root = pathlib.Path(os.environ.get("GPUWARDEN_CHECKPOINT_DIR", "checkpoints/incoming"))
torch.manual_seed(0)
random.seed(0)
torch.use_deterministic_algorithms(True)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(512, 512).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = 0

resume = os.environ.get("GPUWARDEN_RESUME_FROM")
if resume:
    state = torch.load(pathlib.Path(resume) / "state.pt", map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["rng"]["torch"])
    if device == "cuda":
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    random.setstate(state["rng"]["python"])
    step = state["step"]
    print(f"resumed from {resume} at step {step}", flush=True)


def tensors(obj, prefix=""):
    """Every tensor in a nested state, with a stable name, in a stable order."""
    if torch.is_tensor(obj):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield from tensors(obj[k], f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors(v, f"{prefix}/{i}")


def digest(state):
    h = hashlib.sha256(f"step={state['step']}".encode())
    for name, t in tensors({k: v for k, v in state.items() if k != "rng"}):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    h.update(state["rng"]["torch"].numpy().tobytes())
    h.update(repr(state["rng"]["python"]).encode())
    return h.hexdigest()


def save(step):
    d = ckpt_root / f"step-{step:06d}"
    if d.exists():
        return  # written at this step already; a marked folder is gpuwarden's
    d.mkdir(parents=True)
    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state_all()
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "rng": rng}
    torch.save(state, d / "state.pt")
    (d / "state.digest").write_text(digest(state) + "\n")
    (d / ".complete").touch()  # the marker comes last


while step < args.steps:
    x = torch.randn(64, 512, device=device)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % args.every == 0 or want_checkpoint:
        save(step)
        want_checkpoint = False
print(f"done: step {step} loss {loss.item():.6f}", flush=True)
