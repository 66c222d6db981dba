#!/usr/bin/python3
"""tools/collective_model.py's formulas against prices worked out by hand (docs/learn/08-cost-model.md).

Every expected value below is written as the sum of its messages, alpha + bytes / beta each, so a
change to how an algorithm's messages are counted fails here.
"""
import importlib.util
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("collective_model", ROOT / "tools" / "collective_model.py")
cm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cm)

MiB = 1 << 20
failures = []


def check(what, got, expected):
    if not math.isclose(got, expected, rel_tol=1e-12):
        failures.append(f"{what}: model {got!r}, by hand {expected!r}")


def reset(machine=None, cores=None):
    cm.MACHINE, cm.CORES = machine, cores


link = (1e9, 10e-6)  # 1 GB/s, 10 us
inter = (0.25e9, 100e-6)
S = 4 * MiB

# Ring, N = 4, one link everywhere: 2(N-1) = 6 steps of one 1 MiB chunk, one segment each.
reset()
topo = cm.Topology(4, 1, link, link)
check("ring N=4 4 MiB", cm.predict("ring", topo, S, "f32", MiB), 6 * (10e-6 + MiB / 1e9))
# f16: a chunk is 512 Ki elements, 1 MiB; steps 1..N-2 carry f32 partial sums, 2 MiB as two
# segments.
check("ring N=4 4 MiB f16", cm.predict("ring", topo, S, "f16", MiB),
      2 * 2 * (10e-6 + MiB / 1e9) + 4 * (10e-6 + MiB / 1e9))

# Recursive doubling, N = 4: log2(4) = 2 exchanges of the whole tensor. N = 5: one more rank folded
# in and the result sent back, two more whole-tensor messages.
check("tree N=4", cm.predict("tree", topo, S, "f32", MiB), 2 * (10e-6 + S / 1e9))
check("tree N=5", cm.predict("tree", cm.Topology(5, 1, link, link), S, "f32", MiB), 4 * (10e-6 + S / 1e9))

# Hierarchical, N = 4 in nodes of 2: one in-node reduce and one broadcast of S, and the leaders'
# 2-rank ring over the inter-node link: 2 steps of a 2 MiB chunk as two 1 MiB segments.
topo = cm.Topology(4, 2, link, inter)
check("hierarchical N=4 k=2", cm.predict("hierarchical", topo, S, "f32", MiB),
      2 * (10e-6 + S / 1e9) + 2 * 2 * (100e-6 + MiB / 0.25e9))

# The binomial trees' receivers per level.
for k, level, expected in [(8, 0, 4), (8, 1, 2), (8, 2, 1), (5, 0, 2), (5, 1, 1), (5, 2, 1), (3, 1, 1), (2, 0, 1)]:
    check(f"receivers({k}, {level})", cm.receivers(k, level), expected)

# --machine adds the transport beneath every message; --cores shares it among the ranks that
# receive whole tensors at once: all 4 at each tree exchange (4 / 2 cores: twice the time), but
# never less than one core each.
machine = (2e9, 5e-6)
topo = cm.Topology(4, 1, link, link)
reset(machine)
check("tree N=4 --machine", cm.predict("tree", topo, S, "f32", MiB), 2 * (10e-6 + S / 1e9 + 5e-6 + S / 2e9))
reset(machine, cores=2)
check("tree N=4 --machine --cores 2", cm.predict("tree", topo, S, "f32", MiB),
      2 * (10e-6 + S / 1e9 + 5e-6 + 2 * S / 2e9))
reset(machine, cores=8)
check("tree N=4 --cores 8", cm.predict("tree", topo, S, "f32", MiB), 2 * (10e-6 + S / 1e9 + 5e-6 + S / 2e9))
# The ring is left alone.
reset(machine, cores=2)
check("ring N=4 --cores 2", cm.predict("ring", topo, S, "f32", MiB), 6 * (10e-6 + MiB / 1e9 + 5e-6 + MiB / 2e9))
# Hierarchical, N = 8 in nodes of 2: each in-node level has 4 nodes x 1 receiver, shared by 2 cores.
topo = cm.Topology(8, 2, link, inter)
ring4 = 6 * 4 * (100e-6 + MiB / 0.25e9 + 5e-6 + MiB / 2e9)  # 4 leaders: 6 steps of 4 MiB, 4 segments each
check("hierarchical N=8 --cores 2", cm.predict("hierarchical", topo, 16 * MiB, "f32", MiB),
      2 * (10e-6 + 16 * MiB / 1e9 + 5e-6 + 2 * 16 * MiB / 2e9) + ring4)
reset()

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("collective_model: every price matches its hand computation")
