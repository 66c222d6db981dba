#!/usr/bin/env python3
"""ringgrad's files read by the ecosystem's own readers, where they are installed: a short GPT-mini
run's TensorBoard log through tensorboard's EventAccumulator, and its --export through the
`safetensors` package. Each must find what ringgrad's independent readers find (tools/plot_run.py's
event reader, tests/interop/safetensors_reader.py): every scalar with its step and value, the text
samples, every tensor bit for bit, the metadata.

    tests/interop/check_real_readers.py GPT_MINI FORTUNES_FILE WORK

CI's machines have neither package (Debian ships no tensorboard, no safetensors); tools/gpu_check.sh
runs this on the GPU machine, whose image has both. Exit 0: both checked; 77: neither package is
installed (skipped); 1: a difference, named.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def fail(what):
    print(f"check_real_readers: FAILED: {what}")
    sys.exit(1)


def train(gpt_mini, fortunes, work):
    logs, export = os.path.join(work, "logs"), os.path.join(work, "model.safetensors")
    shutil.rmtree(work, ignore_errors=True)  # one run's files only: a second check starts clean
    os.makedirs(work)
    command = [gpt_mini, "--data", fortunes, "--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "32",
               "--batch-size", "4", "--max-steps", "20", "--warmup", "4", "--log-every", "5", "--eval-every", "10",
               "--eval-batches", "2", "--threads", "2", "--log-dir", logs, "--export", export]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        fail(f"{' '.join(command)} exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
    return logs, export


def check_tensorboard(logs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import plot_run

    files = plot_run.event_files(logs)
    if len(files) != 1:
        fail(f"expected one event file in {logs}, found {files}")
    ours = {}
    for tag, step, value in plot_run.scalars(files[0]):
        ours.setdefault(tag, []).append((step, value))
    accumulator = EventAccumulator(logs, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    if sorted(tags["scalars"]) != sorted(ours):
        fail(f"tensorboard's scalar tags {sorted(tags['scalars'])} are not plot_run's {sorted(ours)}")
    for tag, points in ours.items():
        theirs = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        if theirs != points:
            fail(f"{tag}: tensorboard reads {theirs}, plot_run {points}")
    # The text plugin's samples: a string tensor per evaluation (steps 10 and 20).
    if "samples" not in tags["tensors"]:
        fail(f"no text samples among tensorboard's tensor tags {tags['tensors']}")
    samples = accumulator.Tensors("samples")
    if [e.step for e in samples] != [10, 20] or any(not e.tensor_proto.string_val for e in samples):
        fail(f"the samples are at steps {[e.step for e in samples]}, or empty")
    print(f"tensorboard {accumulator.__module__}: {len(ours)} scalar tags, "
          f"{sum(len(p) for p in ours.values())} points and {len(samples)} text samples as plot_run reads them")


def check_safetensors(export):
    import numpy
    from safetensors import safe_open
    sys.path.insert(0, HERE)
    import safetensors_reader

    ours, our_metadata = safetensors_reader.read(export)
    with safe_open(export, framework="numpy") as f:
        if sorted(f.keys()) != sorted(ours):
            fail(f"safetensors' names {sorted(f.keys())} are not the specification reader's {sorted(ours)}")
        if f.metadata() != our_metadata:
            fail(f"safetensors' metadata {f.metadata()} is not {our_metadata}")
        for name, (dtype, shape, values) in ours.items():
            array = f.get_tensor(name)
            if list(array.shape) != shape:
                fail(f"{name}: shape {list(array.shape)} against {shape}")
            expected = numpy.array(values, dtype=numpy.float64).astype(array.dtype).reshape(shape)
            if array.tobytes() != expected.tobytes():
                fail(f"{name} ({dtype}): the values differ")
    print(f"safetensors: {len(ours)} tensors bit for bit, and the metadata, as the specification reader reads them")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    gpt_mini, fortunes, work = sys.argv[1:]
    have = {}
    for package in ("tensorboard", "safetensors"):
        try:
            __import__(package)
            have[package] = True
        except ImportError:
            have[package] = False
            print(f"check_real_readers: {package} is not installed: its check is skipped")
    if not any(have.values()):
        sys.exit(77)
    logs, export = train(gpt_mini, fortunes, work)
    if have["tensorboard"]:
        check_tensorboard(logs)
    if have["safetensors"]:
        check_safetensors(export)


if __name__ == "__main__":
    main()
