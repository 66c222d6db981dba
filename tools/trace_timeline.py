#!/usr/bin/env python3
"""trace_timeline: a Chrome trace written by DistributedDataParallel::write_trace, as a text timeline.

    python3 tools/trace_timeline.py trace.json [--step K] [--width 100] [--tsv]

Shows one optimizer step (the K-th "forward" of rank 0 up to its next "forward"; default: the
second-to-last) on two rows per rank: compute (F = forward, b = backward nodes, w = waiting for the
buckets after backward) and communication (digit = the bucket being reduced). Reading it: every
digit drawn under a 'b' is communication hidden behind backward; digits under 'w' are exposed.
For the real thing open the file in https://ui.perfetto.dev or chrome://tracing. --tsv prints the
same step's events as a table instead (rank, row, what, start and end in ms from the step's start,
bucket): learn/figures.sh draws docs/learn/figures/timeline.png from it.
"""
import argparse
import json


def main():
    import ringgrad_cli  # tools/: --version (imported here: tests import this file as a module)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ringgrad_cli.add_version(ap)
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=-2)
    ap.add_argument("--width", type=int, default=100)
    ap.add_argument("--tsv", action="store_true", help="the step's events as a table, not drawn")
    args = ap.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    forwards = sorted(e["ts"] for e in events if e["name"] == "forward" and e["pid"] == 0)
    if len(forwards) < 2:
        raise SystemExit("need at least two forward events of rank 0 (was the model traced?)")
    k = args.step if args.step >= 0 else len(forwards) + args.step
    k = max(0, min(k, len(forwards) - 2))
    t0, t1 = forwards[k], forwards[k + 1]
    scale = args.width / (t1 - t0)

    def paint(row, start, dur, ch):
        a = int((start - t0) * scale)
        b = max(a + 1, int((start + dur - t0) * scale))
        for i in range(max(a, 0), min(b, args.width)):
            row[i] = ch

    pids = sorted({e["pid"] for e in events})
    if args.tsv:
        print("rank\trow\twhat\tstart_ms\tend_ms\tbucket")
        for e in sorted(events, key=lambda e: (e["pid"], e["ts"])):
            if e.get("ph") != "X" or e["ts"] + e["dur"] < t0 or e["ts"] >= t1:
                continue
            row = "compute" if e["tid"] == "compute" else "comm" if str(e["tid"]).startswith("comm") else None
            if row is None:
                continue
            what = e["name"] if row == "comm" or e["name"] in ("forward", "wait for buckets") else "backward"
            start, end = max(e["ts"], t0), min(e["ts"] + e["dur"], t1)
            bucket = e.get("args", {}).get("bucket", "")
            print(f"{e['pid']}\t{row}\t{what}\t{(start - t0) / 1000:.4f}\t{(end - t0) / 1000:.4f}\t{bucket}")
        return
    print(f"step {k} of rank 0: {(t1 - t0) / 1000:.2f} ms, one column = {(t1 - t0) / args.width:.0f} us")
    for pid in pids:
        compute = [" "] * args.width
        comm = [" "] * args.width
        for e in events:
            if e["pid"] != pid:
                continue
            if e["tid"] == "compute":
                ch = "F" if e["name"] == "forward" else "w" if e["name"] == "wait for buckets" else "b"
                paint(compute, e["ts"], e["dur"], ch)
            elif e["tid"].startswith("comm"):
                paint(comm, e["ts"], e["dur"], str(e["args"].get("bucket", "?"))[-1])
        print(f"rank {pid} compute |{''.join(compute)}|")
        print(f"rank {pid} comm    |{''.join(comm)}|")


if __name__ == "__main__":
    main()
