#!/usr/bin/python3
"""plot_run: a run's TensorBoard event files (examples' --log-dir) as one PNG of curves -- loss,
throughput, step time, and DDP's overlap -- for a page that shows rather than tells.

    /usr/bin/python3 tools/plot_run.py LOG_DIR [--out run.png] [--title TEXT]
    /usr/bin/python3 tools/plot_run.py LOG_DIR --dump          # every scalar as "file tag step value"

Reads every events.out.tfevents.* under LOG_DIR (one curve per file, labelled by its name's rank
suffix when there are several). The reader is this file's own: TFRecord framing with both CRC-32C
checked (a last record cut short -- a run still writing -- is left out) and the Event / Summary
fields a scalar uses (core/summary_writer.h). Needs matplotlib (python3-matplotlib) for the PNG.
"""
import argparse
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protocol buffer message: ints for varints and fixed
    widths (raw bytes for 4 / 8-byte values), bytes for length-delimited fields."""
    at = 0

    def varint():
        nonlocal at
        shift = value = 0
        while True:
            b = buf[at]
            at += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while at < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, wire, varint()
        elif wire == 1:
            yield number, wire, buf[at:at + 8]
            at += 8
        elif wire == 2:
            n = varint()
            yield number, wire, buf[at:at + n]
            at += n
        elif wire == 5:
            yield number, wire, buf[at:at + 4]
            at += 4
        else:
            raise ValueError(f"wire type {wire} is not used by event files")


def scalars(path):
    """[(tag, step, value)] of the file's simple_value summaries, in order."""
    blob = open(path, "rb").read()
    out, at = [], 0
    while len(blob) - at >= 16:
        header = blob[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        if len(blob) - at - 16 < n:
            break  # the last record is still being written
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        data = blob[at + 12:at + 12 + n]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + n:at + 16 + n])
        if masked(crc32c(header)) != length_crc or masked(crc32c(data)) != data_crc:
            raise ValueError(f"{path}: a damaged record at byte {at}")
        at += 16 + n
        step = 0
        summaries = []
        for number, _, value in fields(data):
            if number == 2:
                step = value
            elif number == 5:
                summaries.append(value)
        for summary in summaries:
            for number, _, value in fields(summary):
                if number != 1:
                    continue
                tag, simple = None, None
                for n2, wire, v in fields(value):
                    if n2 == 1:
                        tag = v.decode("utf-8")
                    elif n2 == 2 and wire == 5:
                        (simple,) = struct.unpack("<f", v)
                if tag is not None and simple is not None:
                    out.append((tag, step, simple))
    return out


def event_files(folder):
    found = []
    for root, _, names in os.walk(folder):
        found += [os.path.join(root, n) for n in names if n.startswith("events.out.tfevents.")]
    return sorted(found)


PANELS = [  # (title, tags drawn in it, y label)
    ("loss", ["train/loss", "val/loss"], "loss"),
    ("throughput", ["train/samples_per_s", "train/tokens_per_s"], "per second, all ranks"),
    ("step time", ["train/step_ms", "bench/step_ms"], "ms"),
    ("communication hidden behind backward", ["comm/overlap_percent"], "overlap, %"),
]


def plot(files, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (name, tags, ylabel) in zip(axes.flat, PANELS):
        for path, values in files.items():
            label = os.path.basename(path).rsplit(".", 1)[-1] if len(files) > 1 else ""
            for tag in tags:
                points = [(s, v) for t, s, v in values if t == tag]
                if points:
                    steps, ys = zip(*points)
                    ax.plot(steps, ys, marker="." if len(points) < 30 else None,
                            label=f"{tag} {label}".strip())
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"plot_run: {out}")


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ringgrad_cli

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ringgrad_cli.add_version(ap)
    ap.add_argument("log_dir")
    ap.add_argument("--out", default="run.png")
    ap.add_argument("--title", default="")
    ap.add_argument("--dump", action="store_true", help="print every scalar instead of plotting")
    args = ap.parse_args()
    paths = event_files(args.log_dir)
    if not paths:
        ringgrad_cli.usage_error(f"no events.out.tfevents.* under {args.log_dir}", __doc__)
    files = {p: scalars(p) for p in paths}
    if args.dump:
        for path, values in files.items():
            for tag, step, value in values:
                print(f"{os.path.basename(path)}\t{tag}\t{step}\t{value!r}")
        return
    plot(files, args.out, args.title)


if __name__ == "__main__":
    main()
