#!/usr/bin/python3
"""gpt_train_torch: the PyTorch peer of bench/gpt_train.cpp (W3 GPT-mini training throughput on the
fortunes corpus, ../shared/WORKLOADS.md), same flags, same work, same RESULT line.

    /usr/bin/python3 bench/gpt_train_torch.py --threads 1                 # variant (a)
    /usr/bin/python3 bench/gpt_train_torch.py --threads 2                 # variant (b)
    mpirun -np 2 /usr/bin/python3 bench/gpt_train_torch.py --threads 1    # variant (c)

The model is the usual PyTorch GPT-2 (nanoGPT's layout, PyTorch 1.13 has no fused attention): one
Linear for q, k, v; attention as two batched matmuls with a masked_fill + softmax between them;
nn.GELU(approximate="tanh"); tied head. AdamW as torch.optim.AdamW with foreach=True (the multi-tensor
path: the fastest AdamW PyTorch 1.13 has on CPU), decay on matrices only. Launch, threads, rendezvous
and OMP_WAIT_POLICY as bench/ddp_train_torch.py (see there). Rank 0 prints:
  RESULT impl=torch model=gpt ranks=2 threads=1 batch=16 steps=200 tokens_per_s=...
"""
import math
import os
import sys

# --help and --version before torch loads (tools/ringgrad_cli.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import ringgrad_cli  # noqa: E402

if __name__ == "__main__":
    ringgrad_cli.answer_help_and_version(sys.argv[1:], __doc__)

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # why: bench/ddp_train_torch.py

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.stderr.write(f"gpt_train_torch: cannot import torch with {sys.executable} ({e}); install "
                     "python3-torch and launch with /usr/bin/python3\n")
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_train_torch import keep_freed_memory, set_num_threads, timed_steps  # noqa: E402


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        # A plain attribute, not a buffer: DDP broadcasts every buffer at construction (non-persistent
        # ones too), and gloo has no bool broadcast ("RuntimeError: Invalid scalar type" under
        # mpirun -np 2). So Module.to(device) does not move it: move_mask_to does, once.
        self.mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))

    def move_mask_to(self, device):
        self.mask = self.mask.to(device)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=4, n_head=4, n_embd=128):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def to_device(self, device):
        """Module.to(device), the attention masks included (plain attributes: CausalSelfAttention)."""
        for block in self.h:
            block.attn.move_mask_to(device)
        return self.to(device)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):  # idx: (B, T) -> logits (B, T, V)
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


def load_fortunes(data_dir):
    """Every regular file except *.dat, in sorted name order, as bytes (data::load_fortunes)."""
    names = sorted(n for n in os.listdir(data_dir)
                   if not n.endswith(".dat") and os.path.isfile(os.path.join(data_dir, n)))
    return b"".join(open(os.path.join(data_dir, n), "rb").read() for n in names)


def main(argv):
    opts = {"--data": "/usr/share/games/fortunes", "--steps": "200", "--warmup": "20", "--threads": "1",
            "--batch": "16", "--block": "128"}
    if len(argv) % 2:
        ringgrad_cli.usage_error(f"{argv[-1]} needs a value", __doc__)
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag not in opts:
            ringgrad_cli.usage_error(f"unknown flag {flag} (flags: {' '.join(opts)})", __doc__)
        opts[flag] = value
    try:
        steps, warmup, threads, batch, block = (int(opts[k])
                                                for k in ("--steps", "--warmup", "--threads", "--batch", "--block"))
    except ValueError as e:
        ringgrad_cli.usage_error(str(e), __doc__)

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    keep_freed_memory()
    set_num_threads(threads)
    if size > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29542")
        dist.init_process_group("gloo", rank=rank, world_size=size)

    raw = np.frombuffer(load_fortunes(opts["--data"]), dtype=np.uint8)
    chars, ids = np.unique(raw, return_inverse=True)  # sorted distinct bytes, as data::CharVocab
    train = torch.from_numpy(ids[: int(len(ids) * 0.9)].astype(np.int64))

    torch.manual_seed(1)
    model = GPT(len(chars), block)
    net = nn.parallel.DistributedDataParallel(model) if size > 1 else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), foreach=True)
    gen = torch.Generator().manual_seed(1 + rank)
    window = torch.arange(block + 1)

    def step():
        offsets = torch.randint(0, len(train) - block, (batch,), generator=gen)
        chunk = train[offsets[:, None] + window]  # (B, T + 1)
        x, y = chunk[:, :-1], chunk[:, 1:]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x).view(batch * block, -1), y.reshape(-1)).backward()
        opt.step()

    seconds = timed_steps(step, warmup, steps, size)
    if rank == 0:
        print(f"RESULT impl=torch model=gpt ranks={size} threads={threads} batch={batch} steps={steps} "
              f"tokens_per_s={steps * batch * block * size / seconds:.1f}", flush=True)
    if size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
