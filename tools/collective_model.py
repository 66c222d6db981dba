#!/usr/bin/python3
"""collective_model: the alpha-beta cost model of ringgrad's AllReduce algorithms (docs/learn/08-cost-model.md).

Every message of b bytes costs alpha + b / beta on the link it crosses (intra-node or inter-node);
an algorithm is a sequence of such messages along each rank's critical path. The formulas follow
the code, message for message, as the per-message network model charges them (Note [A price per
message], dist/algorithms/network_model.h):

  ring          2(N-1) steps; each sends one chunk of S/N as ceil(chunk / segment) segments
                (ring_pipeline.cpp), every step waiting on the slowest link of the ring
  tree          recursive doubling (tree.cpp): log2(p) exchanges of the whole tensor with partner
                r XOR 2^k (p: the largest power of two <= N), plus two for the N - p folded-in ranks
  hierarchical  a binomial reduce in each node (ceil(log2 k) messages of S), the leaders' ring over
                M nodes, a binomial broadcast in each node (hierarchical.cpp)

f16 / bf16 partial sums travel as f32 (Note [Each chunk is reduced once]); give --dtype.

Under the network model (RINGGRAD_NETWORK_MODEL) --machine adds the real transport beneath each
modelled link. With more ranks than cores, --cores C lets the ranks that receive whole tensors at
the same moment -- all p ranks at each tree exchange, the receivers of each in-node level of
hierarchical -- take turns: their machine term is multiplied by (ranks at once) / C. The ring's
segments are left alone: its ranks spend most of each step held by the network model, asleep, and
measured at 8 ranks on 2 cores they do not slow down. Which stages share is a choice checked
against measurements (docs/learn/08-cost-model.md), not derived.

  tools/collective_model.py predict --algorithm ring --ranks 8 --ranks-per-node 2 \\
      --intra 1,20 --inter 0.25,100 --sizes 64K,1M,16M
  tools/collective_model.py compare BENCH_OUTPUT --ranks 4 --ranks-per-node 2 --intra 1,20 --inter 0.25,100 \\
      --machine 2.8,11 --cores 2
  tools/collective_model.py fit BENCH_OUTPUT --backend ring --ranks 2
  tools/collective_model.py extrapolate --intra 150,3 --inter 12.5,10 --gpus-per-node 8 --size 100M

A link is GBPS,LATENCY_US. BENCH_OUTPUT is what build/examples/allreduce_bench prints (its
"# backend:" tables); compare prints the model's time beside each measured one, with the ratio.
"""
import argparse
import math
import re
import sys

SEGMENT = 1 << 20  # GroupOptions::ring_segment_bytes


def parse_size(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"collective_model: '{text}' is not a size (e.g. 65536, 64K, 16M)")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def parse_link(text):
    try:
        gbps, us = (float(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"collective_model: link '{text}' is not GBPS,LATENCY_US (e.g. 12.5,10)")
    return gbps * 1e9, us * 1e-6


MACHINE = None  # (beta, alpha) of the real transport beneath a modelled link: --machine
CORES = None  # cores the ranks of this machine share: --cores


def message(link, nbytes, at_once=1):
    """One message's price; `at_once` ranks receive a message of this stage at the same moment."""
    beta, alpha = link
    cost = alpha + nbytes / beta
    if MACHINE is not None:  # the copy this machine makes on top of the modelled link's price
        # Ranks that copy and sum at the same moment share the cores: each goes that much slower.
        share = max(1.0, at_once / CORES) if CORES else 1.0
        cost += MACHINE[1] + share * nbytes / MACHINE[0]
    return cost


def receivers(k, level):
    """Ranks of a binomial tree over k ranks that receive at `level` (0: pairs 2^0 apart)."""
    step = 1 << level
    return sum(1 for r in range(0, k, 2 * step) if r + step < k)


class Topology:
    def __init__(self, ranks, ranks_per_node, intra, inter):
        self.n, self.k, self.intra, self.inter = ranks, max(1, ranks_per_node), intra, inter

    def link(self, a, b):
        return self.intra if a // self.k == b // self.k else self.inter


def ring(topo, nbytes, elem, acc, segment=SEGMENT, ranks=None):
    """The pipelined ring over `ranks` (world ranks, in ring order): 2(N-1) steps of one chunk."""
    ranks = ranks if ranks is not None else list(range(topo.n))
    n = len(ranks)
    if n == 1:
        return 0.0
    count = nbytes // elem
    # The slowest link of the ring sets every step's pace.
    slow = max((topo.link(ranks[i], ranks[(i + 1) % n]) for i in range(n)), key=lambda l: message(l, 1 << 20))
    chunk = math.ceil(count / n)
    total = 0.0
    for step in range(2 * (n - 1)):
        width = acc if 0 < step < n - 1 else elem  # reduce-scatter partial sums travel as Acc
        chunk_bytes = chunk * width
        segs = max(1, math.ceil(chunk_bytes / segment))
        total += segs * message(slow, chunk_bytes / segs)
    return total


def tree(topo, nbytes, elem, acc):
    n = topo.n
    if n == 1:
        return 0.0
    p = 1 << int(math.log2(n))
    s = nbytes // elem * acc
    total = 0.0
    if n > p:  # fold in, and the result back at the end
        total += 2 * max(message(topo.link(p + i, i), s, n - p) for i in range(n - p))
    for k in range(int(math.log2(p))):  # every one of the p ranks receives the whole tensor at once
        total += max(message(topo.link(r, r ^ (1 << k)), s, p) for r in range(p))
    return total


def hierarchical(topo, nbytes, elem, acc, segment=SEGMENT):
    k = min(topo.k, topo.n)
    nodes = math.ceil(topo.n / k)
    in_node = math.ceil(math.log2(k)) if k > 1 else 0
    # Level l of the in-node trees: receivers(k, l) ranks of each node receive the whole tensor.
    reduce = sum(message(topo.intra, nbytes // elem * acc, nodes * receivers(k, l)) for l in range(in_node))
    bcast = sum(message(topo.intra, nbytes, nodes * receivers(k, l)) for l in range(in_node))
    leaders = [m * k for m in range(nodes)]
    # The leaders' ring runs on Acc data throughout.
    return reduce + ring(topo, nbytes // elem * acc, acc, acc, segment, leaders) + bcast


ALGORITHMS = {"ring": ring, "tree": tree, "hierarchical": hierarchical}
WIDTHS = {"f32": (4, 4), "f16": (2, 4), "bf16": (2, 4), "f64": (8, 8)}


def predict(algorithm, topo, nbytes, dtype, segment):
    elem, acc = WIDTHS[dtype]
    if algorithm == "tree":
        return tree(topo, nbytes, elem, acc)
    return ALGORITHMS[algorithm](topo, nbytes, elem, acc, segment)


def read_bench(path):
    """{backend: [(bytes, time_us)]} from allreduce_bench's tables."""
    tables, backend = {}, None
    for line in open(path):
        m = re.match(r"# backend: (\S+)", line)
        if m:
            backend = m.group(1)
            continue
        fields = line.split()
        if backend and len(fields) >= 4 and fields[0].replace(".", "").isdigit():
            tables.setdefault(backend, []).append((float(fields[0]), float(fields[3])))
    return tables


def topology(args):
    return Topology(args.ranks, args.ranks_per_node, parse_link(args.intra), parse_link(args.inter))


def main():
    import ringgrad_cli  # tools/: --version (imported here: tests import this file as a module)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ringgrad_cli.add_version(ap)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("predict", "compare"):
        p = sub.add_parser(name)
        if name == "compare":
            p.add_argument("bench_output")
        else:
            p.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="ring")
            p.add_argument("--sizes", default="64K,256K,1M,4M,16M,64M")
        p.add_argument("--ranks", type=int, required=True)
        p.add_argument("--ranks-per-node", type=int, default=1)
        p.add_argument("--intra", default="10,5", help="GBPS,LATENCY_US inside a node")
        p.add_argument("--inter", default="1,50", help="GBPS,LATENCY_US between nodes")
        p.add_argument("--dtype", choices=sorted(WIDTHS), default="f32")
        p.add_argument("--segment", default="1M")
        p.add_argument("--machine", help="GBPS,LATENCY_US of the real transport under the network model "
                       "(what `fit` gives for this machine), added to every message")
        p.add_argument("--cores", type=int, help="cores the ranks share (fewer than the ranks: they take turns "
                       "in the stages where they all receive whole tensors at once; see the module's doc)")
    f = sub.add_parser("fit")
    f.add_argument("bench_output")
    f.add_argument("--backend", default="ring")
    f.add_argument("--ranks", type=int, required=True)
    e = sub.add_parser("extrapolate")
    e.add_argument("--intra", default="150,3")
    e.add_argument("--inter", default="12.5,10")
    e.add_argument("--gpus-per-node", type=int, default=8)
    e.add_argument("--size", default="100M")
    e.add_argument("--nodes", default="1,2,4,16,64,128")
    args = ap.parse_args()
    global MACHINE, CORES
    if getattr(args, "machine", None):
        MACHINE = parse_link(args.machine)
    if getattr(args, "cores", None):
        if args.cores < 1:
            raise SystemExit(f"collective_model: --cores {args.cores} is not a number of cores >= 1")
        CORES = args.cores

    if args.cmd == "predict":
        topo = topology(args)
        print(f"# {args.algorithm}, N = {args.ranks}, {args.ranks_per_node} per node, intra {args.intra}, inter {args.inter}")
        print(f"{'size(B)':>12} {'time(us)':>12} {'busbw(GB/s)':>12}")
        for s in args.sizes.split(","):
            b = parse_size(s)
            t = predict(args.algorithm, topo, b, args.dtype, parse_size(args.segment))
            busbw = b / t * 2 * (args.ranks - 1) / args.ranks / 1e9 if t > 0 else 0
            print(f"{b:>12} {t * 1e6:>12.1f} {busbw:>12.3f}")
    elif args.cmd == "compare":
        topo = topology(args)
        worst = 0.0
        for backend, rows in read_bench(args.bench_output).items():
            algorithm = {"auto": None}.get(backend, backend)
            if algorithm not in ALGORITHMS:
                continue
            print(f"# {backend}: N = {args.ranks}, {args.ranks_per_node} per node")
            print(f"{'size(B)':>12} {'model(us)':>12} {'measured(us)':>13} {'model/measured':>15}")
            for b, t in rows:
                m = predict(algorithm, topo, int(b), args.dtype, parse_size(args.segment)) * 1e6
                worst = max(worst, abs(m / t - 1))
                print(f"{int(b):>12} {m:>12.1f} {t:>13.1f} {m / t:>15.2f}")
        print(f"# largest difference: {worst * 100:.0f}%")
    elif args.cmd == "fit":
        rows = read_bench(args.bench_output).get(args.backend)
        if not rows or len(rows) < 2:
            raise SystemExit(f"collective_model: no '{args.backend}' table of two sizes or more in {args.bench_output}")
        # Least squares of T = 2(N-1) alpha + 2(N-1)/N S / beta over the measured sizes.
        n = args.ranks
        xs = [2 * (n - 1) / n * b for b, _ in rows]
        ys = [t * 1e-6 for _, t in rows]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        alpha = (my - slope * mx) / (2 * (n - 1))
        print(f"alpha = {alpha * 1e6:.2f} us, beta = {1 / slope / 1e9:.3f} GB/s (link {1 / slope / 1e9:.3f},{alpha * 1e6:.2f})")
    else:
        intra, inter = parse_link(args.intra), parse_link(args.inter)
        size, k = parse_size(args.size), args.gpus_per_node
        print(f"# {args.size} f32 AllReduce, {k} GPUs per node; intra {args.intra}, inter {args.inter} (GB/s,us)")
        print(f"{'nodes':>6} {'GPUs':>6} {'ring(ms)':>10} {'tree(ms)':>10} {'hier(ms)':>10} {'hier/ring':>10}")
        for m in (int(x) for x in args.nodes.split(",")):
            topo = Topology(m * k, k, intra, inter)
            r, t, h = (predict(a, topo, size, "f32", SEGMENT) * 1e3 for a in ("ring", "tree", "hierarchical"))
            print(f"{m:>6} {m * k:>6} {r:>10.2f} {t:>10.2f} {h:>10.2f} {h / r if r else 0:>10.2f}")


if __name__ == "__main__":
    main()
