#!/usr/bin/env python3
"""PyTorch on one GPU, eager and torch.compile'd, for tools/gpu_check.sh: the W2 CNN and W3 GPT-mini
training steps that ringgrad's examples run there, with the models of bench/'s CPU peers
(bench/ddp_train_torch.py, bench/gpt_train_torch.py), so both sides train the same networks on the
same GPU.

    python3 tools/torch_gpu_peer.py --mnist DIR --fortunes PATH [--steps N] [--warmup N] [--modes eager,compiled]
    python3 tools/torch_gpu_peer.py ... --device cpu --steps 2 --warmup 1 --modes eager  # checks the script without a GPU

Prints one RESULT line per run: CNN fp32 (samples/s), GPT-mini fp32 and bf16 (tokens/s; bf16 as
autocast, the usual PyTorch mixed precision, with f32 weights), each eager and compiled (the
compilation falls in the untimed warm-up steps). The data are the real ones, moved to the GPU once;
batches are gathered there. Times are between torch.cuda.synchronize() calls.
"""
import argparse
import os
import sys
import time

# --help and --version before torch loads (tools/ringgrad_cli.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import ringgrad_cli  # noqa: E402

if __name__ == "__main__":
    ringgrad_cli.answer_help_and_version(sys.argv[1:], __doc__)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ddp_train_torch import make_model, read_idx  # noqa: E402
from gpt_train_torch import GPT, load_fortunes  # noqa: E402


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(step, dev, warmup, steps):
    for _ in range(warmup):
        step()
    sync(dev)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(dev)
    return time.perf_counter() - start


def prepare(model, mode):
    return torch.compile(model) if mode == "compiled" else model


def cnn(args, dev, mode):
    images = torch.from_numpy(np.array(read_idx(args.mnist, "train-images-idx3-ubyte"))).to(dev).float().div_(255)
    images = images.sub_(0.5).mul_(2.0).view(-1, 1, 28, 28)
    labels = torch.from_numpy(read_idx(args.mnist, "train-labels-idx1-ubyte").astype(np.int64)).to(dev)
    torch.manual_seed(1)
    model = make_model("cnn").to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model = prepare(model, mode)
    batch = 64

    def step():
        idx = torch.randint(0, images.shape[0], (batch,), device=dev)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(images[idx]), labels[idx]).backward()
        opt.step()

    seconds = timed(step, dev, args.warmup, args.steps)
    print(f"RESULT impl=torch-{mode} device={dev.type} model=cnn precision=fp32 batch={batch} steps={args.steps} "
          f"samples_per_s={args.steps * batch / seconds:.1f}", flush=True)


def gpt(args, dev, precision, mode):
    raw = np.frombuffer(load_fortunes(args.fortunes), dtype=np.uint8)
    chars, ids = np.unique(raw, return_inverse=True)
    train = torch.from_numpy(ids[: int(len(ids) * 0.9)].astype(np.int64)).to(dev)
    torch.manual_seed(1)
    batch, block = 16, 128
    model = GPT(len(chars), block).to_device(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95))
    model = prepare(model, mode)
    window = torch.arange(block + 1, device=dev)

    def step():
        offsets = torch.randint(0, len(train) - block, (batch,), device=dev)
        chunk = train[offsets[:, None] + window]
        x, y = chunk[:, :-1], chunk[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(x).view(batch * block, -1), y.reshape(-1))
        loss.backward()
        opt.step()

    seconds = timed(step, dev, args.warmup, args.steps)
    print(f"RESULT impl=torch-{mode} device={dev.type} model=gpt precision={precision} batch={batch} steps={args.steps} "
          f"tokens_per_s={args.steps * batch * block / seconds:.1f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ringgrad_cli.add_version(parser)
    parser.add_argument("--mnist", required=True)
    parser.add_argument("--fortunes", required=True)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to check the script itself")
    parser.add_argument("--modes", default="eager,compiled", help="eager and/or compiled (torch.compile)")
    args = parser.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("torch_gpu_peer: torch sees no CUDA device", file=sys.stderr)
        return 77
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'the CPU'}",
          flush=True)
    failures = 0
    for mode in args.modes.split(","):
        for name, run in (("cnn", lambda: cnn(args, dev, mode)), ("gpt fp32", lambda: gpt(args, dev, "fp32", mode)),
                          ("gpt bf16", lambda: gpt(args, dev, "bf16", mode))):
            try:
                run()
            except Exception as e:  # one failed workload should not hide the others' figures
                print(f"torch_gpu_peer: {name} ({mode}) failed: {e}", file=sys.stderr)
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
