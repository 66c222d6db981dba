#!/usr/bin/python3
"""ddp_train_torch: the PyTorch peer of bench/ddp_train.cpp (W1 MLP / W2 CNN training throughput on
Fashion-MNIST, ../shared/WORKLOADS.md), same flags, same work, same RESULT line.

    /usr/bin/python3 bench/ddp_train_torch.py --model mlp --threads 1                 # variant (a)
    /usr/bin/python3 bench/ddp_train_torch.py --model mlp --threads 2                 # variant (b)
    mpirun -np 2 /usr/bin/python3 bench/ddp_train_torch.py --model mlp --threads 1    # variant (c)

Needs Debian's python3-torch (PyTorch 1.13, CPU), importable only from /usr/bin/python3. Under
mpirun, rank and world size come from OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE and the ranks
meet through torch.distributed's TCP rendezvous at MASTER_ADDR (default 127.0.0.1) : MASTER_PORT
(default 29541); the model is wrapped in DistributedDataParallel over gloo (default bucket_cap_mb),
with --comm-hook fp16 | bf16 | powersgd (--powersgd-rank, --powersgd-start) registering PyTorch's
own hooks (PowerSGD's start is at least 2, PyTorch's minimum with error feedback).
A world of one runs the plain model, no process group.

--threads sets both torch's OpenMP pool and OpenBLAS's threads (Debian's torch does its GEMMs in
OpenBLAS, which torch.set_num_threads does not reach) and OMP_WAIT_POLICY defaults to PASSIVE
(see below); gloo still runs its own I/O thread(s).

The training set is loaded and normalised before the clock starts (MLP: (p/255 - mean) / std with
the training pixels' statistics; CNN: (p/255 - 0.5) / 0.5); each step gathers the next per-rank
batch of a seeded permutation (this rank's shard: every N-th example), runs forward, backward and
an SGD step (momentum 0.9, lr 0.05). --warmup steps are untimed, then --steps are timed between two
barriers. Rank 0 prints:
  RESULT impl=torch model=mlp ranks=2 threads=1 batch=128 steps=200 samples_per_s=...
"""
import ctypes
import gzip
import os
import sys
import time

# --help and --version before torch loads (tools/ringgrad_cli.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import ringgrad_cli  # noqa: E402

if __name__ == "__main__":
    ringgrad_cli.answer_help_and_version(sys.argv[1:], __doc__)

import numpy as np

# libgomp's idle workers spin by default, and with --threads 2 on two cores they starve OpenBLAS's own
# threads (measured: MLP (b) 5.4k vs 12-14k samples/s). Sleep between parallel regions, as ringgrad's
# pool does; must be set before torch loads libgomp. OMP_WAIT_POLICY=active in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
except ImportError as e:
    sys.stderr.write(f"ddp_train_torch: cannot import torch with {sys.executable} ({e}); install "
                     "python3-torch and launch with /usr/bin/python3\n")
    sys.exit(1)


def set_num_threads(n):
    """torch.set_num_threads sizes the OpenMP pool (oneDNN convolutions, elementwise ops), but Debian's
    torch runs its GEMMs in OpenBLAS (pthreads build), which keeps one thread per core unless told."""
    torch.set_num_threads(n)
    try:
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(n)
    except (OSError, AttributeError):
        sys.stderr.write("ddp_train_torch: OpenBLAS not found; its thread count is left as it is\n")


# glibc's malloc serves a request above its mmap threshold (128 KiB at start) with a fresh mmap and
# unmaps it on free; the threshold only rises when such a block is freed, and never above 32 MiB.
# This script's first large frees are the 188 MB training-set temporaries, over that cap, so every
# activation of every step (W2's conv1 output: 6.4 MB) came from new pages: 1.78 M page faults in
# 220 CNN steps, a quarter of the time in the kernel zeroing pages, W2 (a) 1.3-1.4k samples/s against
# 1.8-1.9k without (docs/benchmarks.md, "The PyTorch peers"). PyTorch's CPU allocator is malloc, so
# fix the thresholds, as a long-running PyTorch job's allocator settles into anyway.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def keep_freed_memory():
    """Lets glibc's malloc reuse freed blocks of up to 1 GiB instead of unmapping them."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        sys.stderr.write("ddp_train_torch: libc.so.6 not found; malloc's thresholds are left as they are\n")
        return
    libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)


def timed_steps(step, warmup, steps, world_size):
    """Runs `warmup` untimed steps, then `steps` timed ones between two barriers; returns seconds."""
    barrier = dist.barrier if world_size > 1 else (lambda: None)
    for _ in range(warmup):
        step()
    barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    barrier()
    return time.perf_counter() - t0


def read_idx(data_dir, stem):
    """An IDX file (plain or .gz) as a numpy array of its shape (ubyte data only, as MNIST)."""
    for name, opener in ((stem, open), (stem + ".gz", gzip.open)):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            with opener(path, "rb") as f:
                raw = f.read()
            ndim = raw[3]
            shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    raise FileNotFoundError(f"neither {stem} nor {stem}.gz found in {data_dir}")


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    raise ValueError(f"unknown --model '{name}' (expected mlp or cnn)")


def main(argv):
    opts = {"--model": "mlp", "--data": "/usr/share/datasets/fashion-mnist", "--steps": "200",
            "--warmup": "20", "--threads": "1", "--batch": "0", "--comm-hook": "allreduce",
            "--powersgd-rank": "4", "--powersgd-start": "10"}
    if len(argv) % 2:
        ringgrad_cli.usage_error(f"{argv[-1]} needs a value", __doc__)
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag not in opts:
            ringgrad_cli.usage_error(f"unknown flag {flag} (flags: {' '.join(opts)})", __doc__)
        opts[flag] = value
    model_name = opts["--model"]
    try:
        steps, warmup, threads, batch = (int(opts[k]) for k in ("--steps", "--warmup", "--threads", "--batch"))
    except ValueError as e:
        ringgrad_cli.usage_error(str(e), __doc__)
    if batch <= 0:
        batch = 128 if model_name == "mlp" else 64

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    keep_freed_memory()
    set_num_threads(threads)
    if size > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29541")
        dist.init_process_group("gloo", rank=rank, world_size=size)

    pixels = read_idx(opts["--data"], "train-images-idx3-ubyte").astype(np.float32) / 255.0
    if model_name == "mlp":
        pixels = (pixels - pixels.mean()) / pixels.std()  # population std, as load_mnist
    else:
        pixels = (pixels - 0.5) / 0.5
    images = torch.from_numpy(np.ascontiguousarray(pixels[:, None, :, :]))
    labels = torch.from_numpy(read_idx(opts["--data"], "train-labels-idx1-ubyte").astype(np.int64))
    n = images.shape[0]

    torch.manual_seed(1)
    model = make_model(model_name)
    net = nn.parallel.DistributedDataParallel(model) if size > 1 else model
    hook = opts["--comm-hook"]
    if size > 1 and hook != "allreduce":
        # ringgrad's --comm-hook names for PyTorch's own hooks: fp16 and bf16 cast the bucket and
        # AllReduce it in that type (gloo adds in it); powersgd as dist/ddp/powersgd.h.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        if hook == "fp16":
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif hook == "bf16":
            net.register_comm_hook(None, default_hooks.bf16_compress_hook)
        elif hook == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=int(opts["--powersgd-rank"]),
                start_powerSGD_iter=max(2, int(opts["--powersgd-start"])))
            net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        else:
            sys.stderr.write(f"--comm-hook {hook}: PyTorch has allreduce, fp16, bf16 and powersgd\n")
            return 2
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    order = torch.from_numpy(np.random.RandomState(7).permutation(n))
    stride = torch.arange(batch) * size
    cursor = rank  # this rank's shard: every N-th example of the permutation

    def step():
        nonlocal cursor
        idx = order[(cursor + stride) % n]
        cursor += batch * size
        x, y = images.index_select(0, idx), labels.index_select(0, idx)
        opt.zero_grad(set_to_none=True)  # as PyTorch 2's default: no memset of every gradient
        loss_fn(net(x), y).backward()
        opt.step()

    seconds = timed_steps(step, warmup, steps, size)
    if rank == 0:
        print(f"RESULT impl=torch model={model_name} ranks={size} threads={threads} batch={batch} "
              f"steps={steps} samples_per_s={steps * batch * size / seconds:.1f}", flush=True)
    if size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
