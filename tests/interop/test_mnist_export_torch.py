"""examples/mnist --export loaded into the same network built in PyTorch scores the test set as
ringgrad scored it: the file's metadata carries ringgrad's test accuracy and the inputs'
normalisation, and PyTorch, reading the weights with the specification's reader
(safetensors_reader.py) under the names the file gives them (torch.nn.Sequential's: "1.weight",
...), must count the same correct answers -- within 2 of the 10,000, for rounding near a tie.

    /usr/bin/python3 test_mnist_export_torch.py MNIST_BIN DATA_DIR WORKDIR

Both models: W1's MLP (standardised inputs) and W2's CNN (inputs in [-1, 1]), 30 steps each.
Exit 77 (CTest's skip) where PyTorch cannot be imported.
"""
import gzip
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_reader as st  # noqa: E402

try:
    import torch
    import torch.nn as nn
except ImportError as e:
    print(f"skipped: cannot import torch with {sys.executable} ({e}); apt-get install python3-torch")
    sys.exit(77)


def torch_model(name):  # examples/mnist/models.h, layer for layer
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def idx(path):  # IDX: magic (0, 0, dtype 0x08 = u8, ndim), big-endian sizes, then the bytes
    blob = gzip.open(path).read()
    ndim = blob[3]
    shape = struct.unpack(f">{ndim}I", blob[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(blob[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)


def main():
    mnist, data, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    images = idx(os.path.join(data, "t10k-images-idx3-ubyte.gz")).float().unsqueeze(1) / 255  # (N, 1, 28, 28)
    labels = idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz")).long()
    for name in ("mlp", "cnn"):
        path = os.path.join(work, f"{name}.safetensors")
        run = subprocess.run([mnist, "--model", name, "--data", data, "--limit-steps", "30", "--threads", "1",
                              "--export", path], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"mnist --model {name} exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
        tensors, metadata = st.read(path)
        model = torch_model(name)
        state = {key: torch.tensor(values, dtype=torch.float32).reshape(shape)
                 for key, (dtype, shape, values) in tensors.items()}
        model.load_state_dict(state, strict=True)  # every name and shape of PyTorch's own model
        mean, std = float(metadata["input_mean"]), float(metadata["input_std"])
        with torch.no_grad():
            correct = int((model((images - mean) / std).argmax(1) == labels).sum())
        theirs = float(metadata["test_accuracy_percent"]) * len(labels) / 100
        print(f"{name}: {len(tensors)} tensors; PyTorch scores {correct} of {len(labels)} correct, ringgrad "
              f"{theirs:.0f} (model {metadata['model']}, step {metadata['step']}, inputs (p - {mean:.4f}) / {std:.4f})")
        if metadata["model"] != name or abs(correct - theirs) > 2:
            sys.exit(f"{name}: PyTorch's {correct} correct against ringgrad's {theirs:.0f}")


if __name__ == "__main__":
    main()
