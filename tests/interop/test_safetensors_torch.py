"""examples/gpt_mini --export loaded into PyTorch's GPT (nanoGPT's layout, the model of the
benchmarks' PyTorch peer) computes ringgrad's logits on the same tokens, within 1e-5:

    /usr/bin/python3 test_safetensors_torch.py GPT_MINI_BIN SAMPLE_BIN WORKDIR

The weights come from a 30-step training run, so no parameter keeps its initial value (layer norms
included); the file is read with the specification's reader (safetensors_reader.py), and the only
name the PyTorch model adds is lm_head.weight, tied to wte.weight as in GPT-2. Exit 77 (CTest's
skip) where PyTorch cannot be imported.
"""
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_reader as st  # noqa: E402

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"skipped: cannot import torch with {sys.executable} ({e}); apt-get install python3-torch")
    sys.exit(77)


class Attention(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.c_attn, self.c_proj, self.nh = nn.Linear(C, 3 * C), nn.Linear(C, C), nh

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (z.view(B, T, self.nh, C // self.nh).transpose(1, 2) for z in self.c_attn(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.nh)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), Attention(C, nh), nn.LayerNorm(C)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(C, 4 * C))
        self.mlp.add_module("gelu", nn.GELU(approximate="tanh"))
        self.mlp.add_module("c_proj", nn.Linear(4 * C, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, V, T, L, nh, C):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, nh) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def as_torch(entry):
    dtype, shape, values = entry
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def main():
    gpt_mini, sample, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    model_path, logits_path = os.path.join(work, "model.safetensors"), os.path.join(work, "logits.safetensors")
    subprocess.run([gpt_mini, "--max-steps", "30", "--eval-every", "0", "--log-every", "30", "--n-layer", "2",
                    "--export", model_path], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sample, "--logits", model_path, logits_path], check=True)
    tensors, meta = st.read(model_path)
    V, T, L, nh, C = (int(meta[k]) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"))
    model = GPT(V, T, L, nh, C)
    state = {name: as_torch(entry) for name, entry in tensors.items()}
    state["lm_head.weight"] = state["wte.weight"]  # tied, as ringgrad's head is
    model.load_state_dict(state, strict=True)
    logits_entry = st.read(logits_path)[0]["logits"]
    want = as_torch(logits_entry)
    B, Tq = want.shape[0], want.shape[1]
    tokens = torch.tensor([(7 * i + 3) % V for i in range(B * Tq)]).reshape(B, Tq)
    with torch.no_grad():
        got = model(tokens)
    diff = (got - want).abs().max().item()
    print(f"logits ({B}, {Tq}, {V}): largest difference {diff:.3g} (magnitudes up to {want.abs().max().item():.3g})")
    if not diff <= 1e-5:
        sys.exit("FAIL: PyTorch's logits differ from ringgrad's by more than 1e-5")
    print("OK")


if __name__ == "__main__":
    main()
