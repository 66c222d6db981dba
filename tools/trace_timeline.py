#!/usr/bin/env python3
"""trace_timeline: a Chrome trace written by DistributedDataParallel::write_trace, as a text timeline.

    python3 tools/trace_timeline.py trace.json [--step K] [--width 100]

Shows one optimizer step (the K-th "forward" of rank 0 up to its next "forward"; default: the
second-to-last) on two rows per rank: compute (F = forward, b = backward nodes, w = waiting for the
buckets after backward) and communication (digit = the bucket being reduced). Reading it: every
digit drawn under a 'b' is communication hidden behind backward; digits under 'w' are exposed.
For the real thing open the file in https://ui.perfetto.dev or chrome://tracing.
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=-2)
    ap.add_argument("--width", type=int, default=100)
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
