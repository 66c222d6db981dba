#!/usr/bin/python3
"""report: the table, JSON and chart of one bench/run.sh run (../shared/WORKLOADS.md).

    /usr/bin/python3 bench/report.py [DIR] [--publish]        # DIR: bench/run.sh's --out, default bench/results

Reads DIR/raw/ (every program's output, written by bench/run.sh) and writes
  DIR/results.json   every raw figure, the ceilings, the FLOP counts and the table's rows
  DIR/table.md       the table (markdown), also printed
  DIR/benchmarks.png ratios per workload and variant against their targets, and W4's busbw against
                     message size; drawn with matplotlib, else gnuplot, else skipped with a message
--publish (full runs only) copies the chart to docs/benchmarks.png and puts the table into
docs/benchmarks.md between the markers <!-- bench:table --> and <!-- /bench:table -->.

Each cell is the median over the run's rounds with the min-max beside it. W1-W3 have two PyTorch peers:
bench/'s own (bench/*_torch.py, impl "torch") and the reference loops of ../shared/peers (impl
"reference", written independently of bench/); ratio = ringgrad's median / the faster peer's median,
the figure the targets are about, and the table shows both peers. Throughput is also given as achieved GFLOP/s
and its share of the core's FMA peak (the widest ISA the CPU has: independent FMA chains, the most
arithmetic the cores can retire; bench/fma_peak.h) and, as a second reference, of OpenBLAS's sgemm,
both at the same thread count and measured in the same run by micro_ops: (a) the 1-thread peak, (b)
the 2-thread peak, (c) twice the 1-thread peak (two ranks, one core each).
FLOPs per trained sample or token, forward + backward (the usual 2 FLOPs per multiply-add forward,
twice that backward):
  W1  6 * params, params = 784*512+512 + 512*512+512 + 512*10+10 = 669,706
  W2  3 * (2*K*K*Cin*Cout*H*W summed over the two convs) + 6 * params of the two linears
      = 3 * (451,584 + 7,225,344) + 6 * 402,826 = 25,447,740 (pooling, ReLU, loss not counted)
  W3  6 * params + 12 * L * T * C (attention scores and their use, forward + backward), with the
      model's params = 824,320 (vocab 114, block 128, 4 layers, n_embd 128, tied head, biases and
      LayerNorms included): 6 * 824,320 + 12 * 4 * 128 * 128 = 5,732,352
Ceilings: the better of micro_ops' measurements at the start and at the end of the run.
W4 rows compare busbw (nccl-tests' definition) of ringgrad's `auto` backend (DDP's default; `ring`
shown beside it) with OpenMPI's MPI_Allreduce and PyTorch's gloo, for sizes >= 1 MiB, against one
core's memcpy bandwidth. A "cliff" is a size whose busbw falls below half the best busbw at smaller
sizes.
"""
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import ringgrad_cli  # noqa: E402  --help, --version

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20


# ---- FLOPs per trained sample (W1, W2) or token (W3) ----------------------------------------------

def linear_params(*widths):
    """Weights and biases of a chain of Linear layers widths[0] -> widths[1] -> ..."""
    return sum(i * o + o for i, o in zip(widths, widths[1:]))


def conv_flops(k, cin, cout, h, w):
    """Forward FLOPs of one sample through a k x k convolution with an h x w output."""
    return 2 * k * k * cin * cout * h * w


def gpt_params(vocab=114, block=128, n_layer=4, n_embd=128):
    """GPT-2 layout with a tied head: embeddings, per layer ln_1, qkv, proj, ln_2, MLP; final LN."""
    c = n_embd
    layer = 2 * c + linear_params(c, 3 * c) + linear_params(c, c) + 2 * c + linear_params(c, 4 * c, c)
    return vocab * c + block * c + n_layer * layer + 2 * c


W1_PARAMS = linear_params(784, 512, 512, 10)
W2_CONV_FLOPS = conv_flops(3, 1, 32, 28, 28) + conv_flops(3, 32, 64, 14, 14)
W2_LINEAR_PARAMS = linear_params(3136, 128, 10)
W3_PARAMS = gpt_params()
FLOPS_PER_ITEM = {
    "w1": 6 * W1_PARAMS,
    "w2": 3 * W2_CONV_FLOPS + 6 * W2_LINEAR_PARAMS,
    "w3": 6 * W3_PARAMS + 12 * 4 * 128 * 128,
}

# ---- what the table shows -------------------------------------------------------------------------

TRAINING = {  # workload: (title, RESULT key, unit)
    "w1": ("W1 MLP", "samples_per_s", "samples/s"),
    "w2": ("W2 CNN", "samples_per_s", "samples/s"),
    "w3": ("W3 GPT-mini", "tokens_per_s", "tokens/s"),
}
VARIANTS = {"a": "(a) 1×1", "b": "(b) 1×2", "c": "(c) 2 ranks"}
TARGETS = {  # ringgrad / the faster PyTorch peer, medians
    "w1": {"a": 1.3, "b": 1.5, "c": 1.8},
    "w2": {"a": 1.2, "b": 1.2, "c": 1.2},
    "w3": {"a": 2.0, "b": 2.0, "c": 2.0},
}
# The RESULT field each program's throughput is read from. The reference loops print JSON; for W3 the
# wall-clock-like figure is tokens_per_s_mean (their README), tokens_per_s being the median step's.
RESULT_FIELD = {("w3", "reference"): "tokens_per_s_mean"}
PEERS = {"torch": "bench/'s peer", "reference": "reference loop"}
W1_SCALING_TARGET = 0.9   # ringgrad (c) / (2 * ringgrad (a))
W4_TARGETS = {"MPI_Allreduce": 1.5, "gloo": 5.0}  # ringgrad auto busbw / peer busbw, sizes >= 1 MiB
W4_JUDGED, W4_ALSO = "auto", "ring"
CLIFF = 0.5  # busbw below this share of the best at smaller sizes

RAW_NAME = re.compile(r"(w[1-4])-([abc])-(ringgrad|bf16|torch|reference)-(\d+)\.txt")
# Mixed precision on the CPU: ringgrad with --precision bf16 (impl "bf16", W1 and W3) in the same cells
# as its f32 run; the target is bf16 faster than f32 (Note [bf16 products on the CPU],
# core/cpu/bf16_gemm.cpp).
BF16_WORKLOADS = ("w1", "w3")
BF16_TARGET = 1.0  # bf16 / f32, medians; met when above
TABLE_MARKERS = ("<!-- bench:table -->", "<!-- /bench:table -->")


# ---- reading DIR/raw ------------------------------------------------------------------------------

def read_settings(raw):
    path = raw / "settings.txt"
    if not path.exists():
        sys.exit(f"report: {path} missing: is {raw.parent} the --out of a bench/run.sh run?")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def read_ceilings(raw):
    """{"fma_gflops": {isa: {threads: GFLOP/s}}, "sgemm_gflops": {threads: GFLOP/s}, "memcpy_gbs": GB/s}: the
    best micro_ops measured, at the start or at the end of the run (memcpy from the 1-thread runs: one
    core's bandwidth). The FMA peak is the ceiling; sgemm (OpenBLAS) a second reference."""
    fma, sgemm, memcpy, bf16_dot = {}, {}, [], {}
    for path in sorted(raw.glob("ceilings-t[12]-*.txt")):
        threads = int(path.name[len("ceilings-t")])
        text = path.read_text()
        m = re.search(r"# ceiling: cblas_sgemm .*best ([\d.]+) GFLOP/s", text)
        if m:
            sgemm[threads] = max(sgemm.get(threads, 0.0), float(m[1]))
        m = re.search(r"# ceiling: std::memcpy .*best ([\d.]+) GB/s", text)
        if m and threads == 1:
            memcpy.append(float(m[1]))
        for isa, value in re.findall(r"# ceiling: FMA peak ([\w-]+), \d+ threads?: best ([\d.]+) GFLOP/s", text):
            per_isa = fma.setdefault(isa, {})
            per_isa[threads] = max(per_isa.get(threads, 0.0), float(value))
        m = re.search(r"# ceiling: bf16 dot-product peak .*best ([\d.]+) GFLOP/s", text)
        if m:
            bf16_dot[threads] = max(bf16_dot.get(threads, 0.0), float(m[1]))
    return {"fma_gflops": fma, "sgemm_gflops": sgemm, "memcpy_gbs": max(memcpy, default=None),
            "bf16_dot_gflops": bf16_dot}


def parse_result_line(text):
    """The fields of a training program's RESULT line (key=value words, or one JSON object), or None."""
    for line in text.splitlines():
        if line.startswith("RESULT {"):
            return json.loads(line[len("RESULT "):])
        if line.startswith("RESULT "):
            return dict(field.split("=", 1) for field in line.split()[1:] if "=" in field)
    return None


def parse_allreduce_tables(text):
    """{backend: [{bytes, time_us, busbw, wrong}]} from allreduce_bench / allreduce_torch.py tables."""
    tables, backend = {}, None
    for line in text.splitlines():
        if line.startswith("# backend:"):
            words = line.split()
            backend = None if "skipped" in line else words[2]
            if backend:
                tables[backend] = []
            continue
        fields = line.split()
        # allreduce_torch.py's rows have 7 fields; allreduce_bench's 8 (net(B) before #wrong).
        if backend and len(fields) in (7, 8) and fields[0].isdigit():
            tables[backend].append({"bytes": int(fields[0]), "time_us": float(fields[3]),
                                    "busbw": float(fields[5]), "wrong": int(fields[-1])})
    return tables


def read_runs(raw):
    """Every run's figures: training results, AllReduce rows, and the runs that gave none."""
    training, allreduce, failed = [], [], []
    for path in sorted(raw.glob("w*.txt")):
        m = RAW_NAME.fullmatch(path.name)
        if not m:
            continue
        workload, variant, impl, rnd = m[1], m[2], m[3], int(m[4])
        text = path.read_text()
        if workload == "w4":
            tables = parse_allreduce_tables(text)
            allreduce += [{"impl": impl, "backend": backend, "round": rnd, **row}
                          for backend, rows in tables.items() for row in rows]
            ok = any(tables.values())
        else:
            result = parse_result_line(text)
            ok = result is not None
            if ok:
                field = RESULT_FIELD.get((workload, impl), TRAINING[workload][1])
                training.append({"workload": workload, "variant": variant, "impl": impl, "round": rnd,
                                 "value": float(result[field]),
                                 "overlap_percent": float(result.get("overlap", "nan"))})
        if not ok:
            failed.append(path.stem)
    return training, allreduce, failed


# ---- statistics and cells -------------------------------------------------------------------------

def spread(values):
    """median, min, max of a non-empty list, or None for an empty one."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio(a, b):
    return a["median"] / b["median"] if a and b and b["median"] > 0 else None


def fmt_spread(s, digits=0):
    """'median (min–max)', or the one figure of a single round."""
    if s is None:
        return "—"
    f = f"{{:,.{digits}f}}"
    return f.format(s["median"]) + (f" ({f.format(s['min'])}–{f.format(s['max'])})" if s["n"] > 1 else "")


def fmt_ratio(r, suffix=""):
    return "—" if r is None else f"{r:.2f}{suffix}"


def fmt_met(ok):
    return "—" if ok is None else ("yes" if ok else "**no**")


def peak_for_variant(peak, variant):
    """A {threads: GFLOP/s} ceiling for a variant's compute: 1 thread, 2 threads, or 2 ranks x 1 thread."""
    if variant == "c":
        return 2 * peak[1] if 1 in peak else None
    return peak.get(1 if variant == "a" else 2)


def sgemm_peak(ceilings, variant):
    """The OpenBLAS sgemm reference for a variant."""
    return peak_for_variant(ceilings["sgemm_gflops"], variant)


def widest_isa(ceilings):
    """The widest ISA whose FMA peak was measured (AVX-512 where the CPU has it), or None."""
    fma = ceilings.get("fma_gflops", {})
    return next((isa for isa in ("AVX-512", "AVX2") if isa in fma), None)


def fma_peak(ceilings, variant):
    """The real ceiling of a variant: the FMA peak of the widest ISA at its thread count."""
    isa = widest_isa(ceilings)
    return peak_for_variant(ceilings["fma_gflops"][isa], variant) if isa else None


def fmt_gflops(s, flops_per_item, fma, sgemm):
    """GFLOP/s as a share of the FMA peak, and of the sgemm reference."""
    if s is None:
        return "—"
    gflops = s["median"] * flops_per_item / 1e9
    shares = [f"{100 * gflops / peak:.0f}% {name}" for name, peak in (("FMA", fma), ("sgemm", sgemm)) if peak]
    return f"{gflops:.1f}" + (f" ({', '.join(shares)})" if shares else "")


# ---- the table's rows -----------------------------------------------------------------------------

COLUMNS = ["workload", "variant", "ringgrad", "PyTorch: bench/'s peer / W4 peers", "PyTorch: reference loop",
           "ratio vs the faster peer", "target", "met",
           "ceiling: GFLOP/s (% of FMA peak, % of sgemm) or busbw % of memcpy"]


def faster_peer(peers):
    """The impl name of the peer with the higher median, or None when neither ran."""
    ran = [impl for impl in PEERS if peers.get(impl)]
    return max(ran, key=lambda impl: peers[impl]["median"]) if ran else None


def training_rows(training, ceilings, workload):
    title, _, unit = TRAINING[workload]
    values = {}
    for r in training:
        if r["workload"] == workload:
            values.setdefault((r["variant"], r["impl"]), []).append(r["value"])
    rows = []
    for variant, label in VARIANTS.items():
        ours = spread(values.get((variant, "ringgrad"), []))
        peers = {impl: spread(values.get((variant, impl), [])) for impl in PEERS}
        best = faster_peer(peers)
        peer = peers[best] if best else None
        if not ours and not peer:
            continue
        r = ratio(ours, peer)
        target = TARGETS[workload][variant]
        met = None if r is None else r >= target
        peak, fma = sgemm_peak(ceilings, variant), fma_peak(ceilings, variant)
        flops = FLOPS_PER_ITEM[workload]
        rows.append({
            "workload": workload, "variant": variant, "unit": unit, "ringgrad": ours, **peers,
            "faster_peer": best, "ratio": r, "target": target, "met": met, "sgemm_peak_gflops": peak,
            "fma_peak_gflops": fma,
            "cells": [f"{title} ({unit})", label, fmt_spread(ours), fmt_spread(peers["torch"]),
                      fmt_spread(peers["reference"]), fmt_ratio(r) + (f" ({PEERS[best]})" if best else ""),
                      f"≥ {target}", fmt_met(met),
                      f"ringgrad {fmt_gflops(ours, flops, fma, peak)}, PyTorch {fmt_gflops(peer, flops, fma, peak)}"
                      + (f" of {fma:.0f} ({widest_isa(ceilings)} FMA)" if fma else "")],
        })
    if workload == "w1":
        rows += w1_scaling_row(values)
    return rows


def bf16_rows(training, ceilings, workload):
    """ringgrad in bf16 against ringgrad in f32, per variant, measured in the same cells."""
    title, _, unit = TRAINING[workload]
    values = {}
    for r in training:
        if r["workload"] == workload and r["impl"] in ("ringgrad", "bf16"):
            values.setdefault((r["variant"], r["impl"]), []).append(r["value"])
    rows = []
    for variant, label in VARIANTS.items():
        f32, bf16 = spread(values.get((variant, "ringgrad"), [])), spread(values.get((variant, "bf16"), []))
        if not bf16:
            continue
        r = ratio(bf16, f32)
        met = None if r is None else r > BF16_TARGET
        dot = ceilings.get("bf16_dot_gflops", {})
        peak = peak_for_variant(dot, variant) if dot else None
        share = ""
        if peak:
            gflops = bf16["median"] * FLOPS_PER_ITEM[workload] / 1e9
            share = f"ringgrad bf16 {gflops:.1f} ({100 * gflops / peak:.0f}% of {peak:.0f}, the bf16 dot-product peak)"
        rows.append({
            "workload": workload, "variant": variant, "precision": "bf16", "unit": unit, "ringgrad_bf16": bf16,
            "ringgrad_f32": f32, "ratio_vs_f32": r, "target": BF16_TARGET, "met": met, "bf16_dot_peak_gflops": peak,
            "cells": [f"{title} bf16 ({unit})", label, fmt_spread(bf16), "—", "—",
                      fmt_ratio(r, " × ringgrad f32"), f"> {BF16_TARGET} (bf16 faster)", fmt_met(met), share or "—"],
        })
    return rows


def w1_scaling_row(values):
    """Scaling efficiency (c) / (2 * a) of W1, per implementation."""
    eff = {}
    for impl in ("ringgrad", *PEERS):
        a, c = spread(values.get(("a", impl), [])), spread(values.get(("c", impl), []))
        eff[impl] = c["median"] / (2 * a["median"]) if a and c else None
    if all(e is None for e in eff.values()):
        return []
    met = None if eff["ringgrad"] is None else eff["ringgrad"] >= W1_SCALING_TARGET
    return [{"workload": "w1", "variant": "scaling", "efficiency": eff, "target": W1_SCALING_TARGET, "met": met,
             "cells": ["W1 MLP scaling", "(c) / (2·a)", fmt_ratio(eff["ringgrad"]), fmt_ratio(eff["torch"]),
                       fmt_ratio(eff["reference"]), "—", f"≥ {W1_SCALING_TARGET} (ringgrad)", fmt_met(met),
                       "medians of (c) and (a)"]}]


def busbw_by_size(allreduce):
    """{backend: {bytes: spread of busbw over rounds}} for sizes >= 1 MiB."""
    series = {}
    for r in allreduce:
        if r["bytes"] >= MIB:
            series.setdefault(r["backend"], {}).setdefault(r["bytes"], []).append(r["busbw"])
    return {b: {size: spread(v) for size, v in sorted(sizes.items())} for b, sizes in series.items()}


def first_cliff(series):
    """The first size whose median busbw is below CLIFF x the best at smaller sizes, or None."""
    best = 0.0
    for size, s in series.items():
        if best and s["median"] < CLIFF * best:
            return size
        best = max(best, s["median"])
    return None


def fmt_size(nbytes):
    return f"{nbytes // MIB} MiB" if nbytes % MIB == 0 else f"{nbytes / MIB:g} MiB"


def allreduce_rows(allreduce, ceilings):
    series = busbw_by_size(allreduce)
    judged = series.get(W4_JUDGED, {})
    memcpy = ceilings["memcpy_gbs"]
    rows = []
    for size in sorted({size for s in series.values() for size in s}):
        at = {backend: sizes.get(size) for backend, sizes in series.items()}
        ratios = {peer: ratio(at.get(W4_JUDGED), at.get(peer)) for peer in W4_TARGETS}
        met = None if None in ratios.values() else all(ratios[p] >= t for p, t in W4_TARGETS.items())
        share = ", ".join(f"{b} {100 * at[b]['median'] / memcpy:.0f}%"
                          for b in (W4_JUDGED, *W4_TARGETS) if memcpy and at.get(b))
        rows.append({
            "workload": "w4", "variant": "c", "bytes": size, "busbw": at, "ratios": ratios, "met": met,
            "cells": [f"W4 AllReduce {fmt_size(size)} (busbw GB/s)", VARIANTS["c"],
                      f"{W4_JUDGED} {fmt_spread(at.get(W4_JUDGED), 2)}; {W4_ALSO} {fmt_spread(at.get(W4_ALSO), 2)}",
                      "; ".join(f"{peer} {fmt_spread(at.get(peer), 2)}" for peer in W4_TARGETS), "—",
                      "; ".join(fmt_ratio(ratios[p], f"× {p}") for p in W4_TARGETS),
                      "; ".join(f"≥ {t}× {p}" for p, t in W4_TARGETS.items()), fmt_met(met),
                      f"{share} of memcpy {memcpy:.1f} GB/s" if share else "—"],
        })
    if judged:
        cliffs = {backend: first_cliff(s) for backend, s in series.items()}

        def show(backend):
            return f"{backend}: " + (f"at {fmt_size(cliffs[backend])}" if cliffs.get(backend) else "none")

        rows.append({
            "workload": "w4", "variant": "cliff", "cliffs": cliffs, "met": cliffs.get(W4_JUDGED) is None,
            "cells": ["W4 AllReduce ≥ 1 MiB", "(c) cliff", f"{show(W4_JUDGED)}; {show(W4_ALSO)}",
                      "; ".join(show(p) for p in W4_TARGETS if p in cliffs), "—", "—",
                      f"no cliff (busbw ≥ {CLIFF}× best so far)", fmt_met(cliffs.get(W4_JUDGED) is None), "—"],
        })
    return rows


# ---- the table as text ----------------------------------------------------------------------------

def markdown_table(rows):
    """A markdown table padded to aligned columns, so that it also reads as plain text."""
    lines = [COLUMNS, ["---"] * len(COLUMNS)] + [r["cells"] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths)) + " |"
                     for line in lines)


def describe_run(settings, ceilings, failed, allreduce):
    """The lines above and below the table: settings, ceilings, caveats."""
    mode = settings.get("mode", "?")
    ran = settings.get("workloads", "w1,w2,w3,w4").split(",")
    rounds = ", ".join(f"{w.upper()} {settings[f'rounds_{w}']}" for w in ran)
    steps = ", ".join(f"{w.upper()} {settings[f'warmup_{w}']} + {settings[f'steps_{w}']}" for w in ran if w != "w4")
    peak = ceilings["sgemm_gflops"]
    memcpy = ceilings["memcpy_gbs"]
    elapsed = int(settings.get("elapsed_s", 0))
    head = [
        # The published page names the code (commit) and the machine, not the day it ran: docs are
        # organised by concept, and the JSON beside it keeps the start time.
        f"bench/run.sh{'' if mode == 'full' else ' --' + mode} at commit "
        f"{settings.get('commit', '?')}, {settings.get('cpu', '?')} × {settings.get('cores', '?')} cores, "
        f"PyTorch {settings.get('torch', '?')}, {elapsed // 60} min {elapsed % 60} s.",
        f"Rounds: {rounds}. Warm-up + timed steps per run: {steps or '—'}."
        + (f" W4: {settings.get('w4_sizes')}." if "w4" in ran else ""),
        "Ceilings, best of the run's start and end: FMA peak "
        + "; ".join(f"{isa} " + ", ".join(f"{t} thread{'s' * (t > 1)} {v:.1f}" for t, v in sorted(per.items()))
                    for isa, per in ceilings.get("fma_gflops", {}).items())
        + " GFLOP/s (the ceiling)"
        + ("; bf16 dot-product peak (AVX512_BF16, the bf16 rows' ceiling) "
           + ", ".join(f"{t} thread{'s' * (t > 1)} {v:.1f}" for t, v in sorted(ceilings["bf16_dot_gflops"].items()))
           + " GFLOP/s" if ceilings.get("bf16_dot_gflops") else "")
        + "; reference sgemm 2048³ "
        + ", ".join(f"{t} thread{'s' * (t > 1)} {peak[t]:.1f} GFLOP/s" for t in sorted(peak))
        + (f"; one core's memcpy {memcpy:.1f} GB/s (read + write)." if memcpy else "."),
        f"ringgrad's CPU kernels: {settings.get('cpu_isa', '?')} (RINGGRAD_ISA={settings.get('RINGGRAD_ISA', '?')}). "
        f"Environment (both sides): OPENBLAS_CORETYPE={settings.get('OPENBLAS_CORETYPE', '?')}, "
        f"OMP_WAIT_POLICY={settings.get('OMP_WAIT_POLICY', '?')} (bench/'s PyTorch peers default it to PASSIVE; "
        "the reference loops get --omp-wait-policy PASSIVE in (b)). Reference loops: "
        + (settings.get("peers_dir") if settings.get("peers_dir", "(none)") != "(none)"
           else "**not found, so the ratios are against bench/'s peers only**") + ".",
    ]
    if mode != "full":
        head.append(f"**{mode} mode: fewer steps and rounds than WORKLOADS.md asks (20 warm-up + 200 timed "
                    "steps, several rounds); indicative only.**")
    foot = ["Cells: median over rounds (min–max); ratio = ringgrad median / the faster PyTorch peer's median "
            "(named beside it), whose GFLOP/s the last column shows. GFLOP/s from "
            f"FLOPs per item: W1 {FLOPS_PER_ITEM['w1']:,}/sample, W2 {FLOPS_PER_ITEM['w2']:,}/sample, "
            f"W3 {FLOPS_PER_ITEM['w3']:,}/token (see bench/report.py); peak of the same thread count, "
            "(c) against 2 × the 1-thread peak. bf16 rows: ringgrad with --precision bf16 (bf16 parameters "
            "and activations, f32 master weights) in the same cells as its f32 run, ratio bf16 / f32."]
    if failed:
        foot.append(f"**Failed runs (no figures; see raw/NAME.err): {', '.join(failed)}.**")
    wrong = [f"{r['backend']} {fmt_size(r['bytes'])} round {r['round']}" for r in allreduce if r["wrong"]]
    if wrong:
        foot.append(f"**AllReduce results off the closed-form sum (#wrong > 0): {', '.join(wrong)}.**")
    return head, foot


# ---- the chart ------------------------------------------------------------------------------------

def chart_data(rows):
    """(bars, lines): bars [(label, ratio, target, met)] for W1-W3; lines {backend: [(MiB, busbw)]}."""
    bars = [(f"{r['workload'].upper()} {r['variant']}", r["ratio"], r["target"], r["met"])
            for r in rows if r["workload"] in TRAINING and r.get("ratio") is not None and "precision" not in r]
    lines = {}
    for r in rows:
        if r["workload"] == "w4" and "bytes" in r:
            for backend, s in r["busbw"].items():
                if s:
                    lines.setdefault(backend, []).append((r["bytes"] / MIB, s["median"]))
    return bars, lines


def chart_matplotlib(bars, lines, memcpy, title, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    xs = range(len(bars))
    left.bar(xs, [b[1] for b in bars], color=["tab:green" if b[3] else "tab:orange" for b in bars])
    left.hlines([b[2] for b in bars], [x - 0.4 for x in xs], [x + 0.4 for x in xs], colors="black",
                label="target")
    left.axhline(1.0, color="gray", linestyle=":", label="parity with PyTorch")
    left.set_xticks(list(xs), [b[0] for b in bars], rotation=45)
    left.set_ylabel("ringgrad / PyTorch throughput (medians)")
    left.set_title("W1-W3: ratio per workload and variant (green: target met)")
    left.set_ylim(0, 1.3 * max([b[1] for b in bars] + [b[2] for b in bars] + [1.0]))  # room for the legend
    left.legend(loc="upper left", ncol=2)
    for backend, points in sorted(lines.items()):
        right.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=backend)
    if memcpy:
        right.axhline(memcpy, color="gray", linestyle="--", label=f"memcpy, one core ({memcpy:.1f} GB/s)")
    right.set_xscale("log", base=2)
    sizes = sorted({p[0] for points in lines.values() for p in points})
    right.set_xticks(sizes, [f"{s:g}" for s in sizes])
    right.set_xlabel("message size (MiB)")
    right.set_ylabel("busbw (GB/s, medians)")
    right.set_title("W4: AllReduce, 2 ranks")
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def chart_gnuplot(bars, lines, memcpy, title, path):
    with tempfile.TemporaryDirectory() as tmp:
        ratios = Path(tmp, "ratios.dat")
        ratios.write_text("".join(f'"{label}" {r} {t}\n' for label, r, t, _ in bars))
        plots = []
        for backend, points in sorted(lines.items()):
            data = Path(tmp, f"{backend}.dat")
            data.write_text("".join(f"{mib} {bw}\n" for mib, bw in points))
            plots.append(f"'{data}' using 1:2 with linespoints title '{backend}'")
        if memcpy:
            plots.append(f"{memcpy} with lines dashtype 2 title 'memcpy, one core'")
        script = f"""
set terminal pngcairo size 1400,550 noenhanced
set output '{path}'
set key below
set multiplot layout 1,2 title "{title}"
set title 'W1-W3: ringgrad / PyTorch (medians); line: target'
set style fill solid 0.6
set boxwidth 0.6
set xtics rotate by 45 right
set yrange [0:*]
plot '{ratios}' using 0:2:xtic(1) with boxes title 'ratio', '' using 0:3 with points pt 5 title 'target', 1 dashtype 3 title 'parity'
set title 'W4: AllReduce busbw (GB/s), 2 ranks'
set logscale x 2
set xlabel 'message size (MiB)'
set xtics norotate
plot {', '.join(plots) if plots else "NaN notitle"}
unset multiplot
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def draw_chart(rows, ceilings, title, path):
    bars, lines = chart_data(rows)
    try:
        import matplotlib  # noqa: F401
        chart_matplotlib(bars, lines, ceilings["memcpy_gbs"], title, path)
        return True
    except ImportError:
        pass
    if shutil.which("gnuplot"):
        chart_gnuplot(bars, lines, ceilings["memcpy_gbs"], title, path)
        return True
    print("report: no chart: neither matplotlib nor gnuplot; apt-get install python3-matplotlib gnuplot",
          file=sys.stderr)
    return False


# ---- publishing into docs/ ------------------------------------------------------------------------

def publish(table_md, chart):
    doc = REPO / "docs" / "benchmarks.md"
    start, end = TABLE_MARKERS
    text = doc.read_text()
    if start not in text or end not in text:
        sys.exit(f"report: {doc} lacks the markers {start} ... {end}; put them where the table goes")
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    image = "\n\n![ratios and AllReduce busbw](benchmarks.png)" if chart else ""
    doc.write_text(f"{before}{start}\n{table_md}{image}\n{end}{after}")
    if chart:
        shutil.copyfile(chart, REPO / "docs" / "benchmarks.png")
    print(f"report: published the table into {doc.relative_to(REPO)}"
          + (" and the chart into docs/benchmarks.png" if chart else ""))


def main(argv):
    ringgrad_cli.answer_help_and_version(argv, __doc__)
    args = [a for a in argv if a != "--publish"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        ringgrad_cli.usage_error(f"unexpected arguments: {' '.join(argv)}", __doc__)
    out = Path(args[0] if args else REPO / "bench" / "results")
    raw = out / "raw"
    settings = read_settings(raw)
    ceilings = read_ceilings(raw)
    training, allreduce, failed = read_runs(raw)

    rows = [row for w in TRAINING for row in training_rows(training, ceilings, w)]
    rows += [row for w in BF16_WORKLOADS for row in bf16_rows(training, ceilings, w)]
    rows += allreduce_rows(allreduce, ceilings)
    head, foot = describe_run(settings, ceilings, failed, allreduce)
    table_md = "\n\n".join(["\n".join(head), markdown_table(rows), "\n".join(foot)])
    print(table_md)
    (out / "table.md").write_text(table_md + "\n")

    results = {
        "settings": settings, "ceilings": ceilings, "flops_per_item": FLOPS_PER_ITEM,
        "params": {"w1": W1_PARAMS, "w2_linears": W2_LINEAR_PARAMS, "w3": W3_PARAMS},
        "training": training, "allreduce": allreduce, "failed_runs": failed,
        "rows": [{k: v for k, v in r.items() if k != "cells"} | {"cells": dict(zip(COLUMNS, r["cells"]))}
                 for r in rows],
    }
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")

    chart = out / "benchmarks.png"
    title = f"ringgrad vs PyTorch, bench/run.sh {settings.get('mode', '')} at {settings.get('commit', '')}"
    drew = draw_chart(rows, ceilings, title, chart)
    print(f"\nreport: wrote {out / 'results.json'}, {out / 'table.md'}" + (f", {chart}" if drew else ""))
    if "--publish" in argv:
        if settings.get("mode") != "full":
            sys.exit(f"report: --publish takes full runs only (this one was --{settings.get('mode')})")
        publish(table_md, chart if drew else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
