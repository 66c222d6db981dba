"""ringgrad's TensorBoard event files read by a reader built from the format's specification:

    /usr/bin/python3 test_tensorboard_events.py SAMPLE_BIN WORKDIR [--mnist BIN] [--gpt-mini BIN] [--ddp-train BIN]

The reader: TFRecord framing (u64 length, masked CRC-32C of the length, the bytes, masked CRC-32C
of the bytes; both checksums checked with tools/plot_run.py's CRC-32C, written in Python from the
algorithm's definition) and Event /
Summary messages parsed by python3-protobuf from tensorboard_event.proto (the official field
numbers), compiled with protoc into WORKDIR.

1. interop_sample --tensorboard: exactly the tags, steps and values it logged, in order, each value
   the f32 of its formula; the text plugin's string tensor.
2. --mnist: examples/mnist --log-dir (one process): the training and evaluation tags, steps
   increasing, values finite.
3. --gpt-mini: examples/gpt_mini --log-dir: its tags, and the sampled text.
4. --ddp-train: bench/ddp_train --log-dir: a step time for each timed step, then the summary.
Exit 77 (CTest's skip) where protoc or python3-protobuf is missing.
"""
import argparse
import glob
import importlib
import math
import os
import shutil
import struct
import subprocess
import sys

# The CRC-32C of tools/plot_run.py (Python, checked below against the algorithm's published value).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from plot_run import crc32c, masked  # noqa: E402


def fail(what):
    sys.exit(f"FAIL: {what}")


def load_messages(work):
    protoc = shutil.which("protoc")
    try:
        importlib.import_module("google.protobuf")
    except ImportError:
        protoc = None
    if protoc is None:
        print("skipped: needs protoc and python3-protobuf (apt-get install protobuf-compiler python3-protobuf)")
        sys.exit(77)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([protoc, f"--proto_path={here}", f"--python_out={work}", "tensorboard_event.proto"], check=True)
    sys.path.insert(0, work)
    return importlib.import_module("tensorboard_event_pb2")


def read_events(path, pb):
    blob = open(path, "rb").read()
    events, at = [], 0
    while at < len(blob):
        if len(blob) - at < 12:
            fail(f"{path}: a record header cut short at byte {at}")
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if masked(crc32c(header)) != length_crc:
            fail(f"{path}: the length's CRC at byte {at}")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if masked(crc32c(data)) != data_crc:
            fail(f"{path}: the data's CRC at byte {at}")
        event = pb.Event()
        event.ParseFromString(data)
        events.append(event)
        at += 16 + length
    if not events or events[0].file_version != "brain.Event:2":
        fail(f"{path}: the first event is not file_version brain.Event:2")
    return events


def values(events):
    """(tag, step, value) for every scalar, (tag, step, text) for every text, in file order."""
    out = []
    for e in events[1:]:
        for v in e.summary.value:
            if v.WhichOneof("value") == "simple_value":
                out.append((v.tag, e.step, v.simple_value))
            elif v.metadata.plugin_data.plugin_name == "text":
                if v.tensor.dtype != 7 or [d.size for d in v.tensor.tensor_shape.dim] != [1]:
                    fail(f"text {v.tag}: not a string tensor of shape [1]")
                out.append((v.tag, e.step, v.tensor.string_val[0].decode("utf-8")))
            else:
                fail(f"an unexpected value {v}")
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def only_file(folder):
    files = glob.glob(os.path.join(folder, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"{folder}: {len(files)} event files")
    return files[0]


def sample_run(sample, work, pb):
    folder = os.path.join(work, "sample")
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sample, "--tensorboard", folder], check=True, stdout=subprocess.DEVNULL)
    got = values(read_events(only_file(folder), pb))
    want = []
    for s in range(5):
        want += [("train/loss", s, f32((s + 1) / 3)), ("train/lr", s, f32(0.001 / 2 ** s))]
    want.append(("samples", 4, "h\u00e9llo\nworld"))
    if got != want:
        fail(f"sample: {got} != {want}")
    print(f"sample: {len(got)} values, exactly as logged")


def example_run(name, command, work, pb, expected_tags):
    folder = os.path.join(work, name)
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(command + ["--log-dir", folder], check=True, stdout=subprocess.DEVNULL)
    got = values(read_events(only_file(folder), pb))
    tags = {tag for tag, _, _ in got}
    if not expected_tags <= tags:
        fail(f"{name}: missing tags {sorted(expected_tags - tags)} (has {sorted(tags)})")
    for tag in tags:
        steps = [s for t, s, _ in got if t == tag]
        if steps != sorted(steps):
            fail(f"{name}: {tag}'s steps go back: {steps}")
    for tag, step, v in got:
        if isinstance(v, float) and not math.isfinite(v):
            fail(f"{name}: {tag} at step {step} is {v}")
    print(f"{name}: {len(got)} values, tags {sorted(tags)}")
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sample")
    ap.add_argument("work")
    ap.add_argument("--mnist")
    ap.add_argument("--gpt-mini")
    ap.add_argument("--ddp-train")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if crc32c(b"123456789") != 0xE3069283:  # CRC-32C's published check value
        fail("the test's own CRC-32C")
    pb = load_messages(args.work)
    sample_run(args.sample, args.work, pb)
    if args.mnist:
        example_run("mnist", [args.mnist, "--limit-steps", "40", "--stats-every", "20", "--eval-every", "20"],
                    args.work, pb,
                    {"train/loss", "train/lr", "train/samples_per_s", "train/step_ms", "eval/test_accuracy"})
    if args.gpt_mini:
        got = example_run("gpt_mini", [args.gpt_mini, "--max-steps", "20", "--log-every", "10", "--eval-every", "10",
                                       "--eval-batches", "2", "--n-layer", "1", "--num-chars", "40"], args.work, pb,
                          {"train/loss", "train/lr", "train/tokens_per_s", "val/loss", "samples"})
        if not any(tag == "samples" and len(text) > 0 for tag, _, text in got):
            fail("gpt_mini: no sampled text")
    if args.ddp_train:
        got = example_run("ddp_train", [args.ddp_train, "--steps", "6", "--warmup", "1"], args.work, pb,
                          {"bench/step_ms", "bench/steps_per_s", "memory/peak_mib"})
        if [s for t, s, _ in got if t == "bench/step_ms"] != list(range(1, 7)):
            fail("ddp_train: not one step time per timed step")
    print("OK")


if __name__ == "__main__":
    main()
