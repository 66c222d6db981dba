#!/usr/bin/python3
"""allreduce_torch: the PyTorch (gloo) peer of examples/allreduce_bench, same flags, same table.

    mpirun -np 2 python3 bench/allreduce_torch.py -b 4K -e 256M -f 2 -n 20 -w 5 -c 1 -d f32

Needs PyTorch with torch.distributed; not installed by scripts/setup.sh (it is not a build
dependency). On Debian 12:

    apt-get install -y python3-torch      # PyTorch 1.13, CPU, for /usr/bin/python3

Debian's torch is importable only from the system interpreter: if `python3` on PATH is another one
(pyenv, a venv), launch /usr/bin/python3 instead. As root, mpirun also wants
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.

mpirun only starts the processes: rank and world size come from OMPI_COMM_WORLD_RANK /
OMPI_COMM_WORLD_SIZE (else RANK / WORLD_SIZE, else a single rank), and the ranks meet through
torch.distributed's TCP rendezvous at MASTER_ADDR (default 127.0.0.1) : MASTER_PORT (default 29533;
set another when that port is taken or two runs overlap). The collective is gloo's AllReduce over
TCP (loopback on one host); MPI is not used for any figure.

For each size: the mean time of one AllReduce (sum) over -n iterations after -w warm-ups, the
slowest rank's mean taken as the collective's time, algbw = bytes / time, busbw = algbw * 2(N-1)/N,
and #wrong: elements that differ from N(N+1)/2 when -c 1 (each rank fills rank + 1), summed over
ranks. torch.set_num_threads(1) pins the intra-op pool as the C++ bench does; gloo still runs its
own I/O thread(s), which the C++ backends do not.
"""
import os
import sys
import time

# --help and --version before torch loads (tools/ringgrad_cli.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import ringgrad_cli  # noqa: E402

if __name__ == "__main__":
    ringgrad_cli.answer_help_and_version(sys.argv[1:], __doc__)

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    sys.stderr.write(
        f"allreduce_torch: cannot import torch with {sys.executable} ({e}); install python3-torch and "
        "launch with /usr/bin/python3\n")
    sys.exit(1)


def parse_size(s):
    """'4K' -> 4096, '256M', '1G', '1.5K' or plain bytes, as parse_size in allreduce_bench."""
    unit = s[-1].upper() if s else ""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(unit, 1)
    return int(float(s if scale == 1 else s[:-1]) * scale)


def env_int(names, default):
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return default


def main(argv):
    begin, end, type_name = "4K", "256M", "f32"
    factor, iters, warmup, check = 2.0, 20, 5, 1
    if len(argv) % 2:
        ringgrad_cli.usage_error(f"{argv[-1]} needs a value", __doc__)
    i = 0
    while i + 1 < len(argv):
        flag, value = argv[i], argv[i + 1]
        if flag == "-b":
            begin = value
        elif flag == "-e":
            end = value
        elif flag == "-f":
            factor = float(value)
        elif flag == "-n":
            iters = int(value)
        elif flag == "-w":
            warmup = int(value)
        elif flag == "-c":
            check = int(value)
        elif flag == "-d":
            type_name = value
        else:
            ringgrad_cli.usage_error(f"unknown flag {flag} (flags: -b -e -f -n -w -c -d f32|f16)", __doc__)
        i += 2
    dtypes = {"f32": torch.float32, "f16": torch.float16}
    if type_name not in dtypes:
        sys.stderr.write(f"allreduce_torch: -d {type_name}: expected f32 or f16\n")
        return 2
    dtype = dtypes[type_name]
    elem_size = torch.tensor([], dtype=dtype).element_size()

    rank = env_int(["OMPI_COMM_WORLD_RANK", "RANK"], 0)
    size = env_int(["OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"], 1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    n = float(size)

    if rank == 0:
        print("# allreduce_torch: %d ranks, %s, sizes %s..%s x%g, %d iterations after %d warm-ups"
              % (size, type_name, begin, end, factor, iters, warmup))
        print("# backend: gloo (PyTorch %s)" % torch.__version__)
        print("%12s %12s %6s %12s %10s %10s %7s"
              % ("size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"),
              flush=True)

    nbytes = float(parse_size(begin))
    while nbytes <= float(parse_size(end)):
        count = int(nbytes) // elem_size
        t = torch.full((count,), rank + 1.0, dtype=dtype)
        try:
            for _ in range(warmup):
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
        except RuntimeError as e:
            # gloo builds without a kernel for this type reject it before any byte moves, on every
            # rank alike, so all ranks leave here together.
            if rank == 0:
                print("# gloo: %s allreduce unsupported: %s" % (type_name, str(e).strip().splitlines()[0]),
                      flush=True)
            dist.destroy_process_group()
            return 0
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        seconds = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        # The slowest rank's time is the collective's time.
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        seconds = seconds.item()
        wrong = 0
        if check:
            t.fill_(rank + 1.0)
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            expected = n * (n + 1) / 2
            wrong_t = (t.to(torch.float64) != expected).sum().to(torch.int64).reshape(1)
            dist.all_reduce(wrong_t, op=dist.ReduceOp.SUM)
            wrong = int(wrong_t.item())
        size_b = float(count * elem_size)
        algbw = size_b / seconds / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if rank == 0:
            print("%12.0f %12d %6s %12.1f %10.2f %10.2f %7d"
                  % (size_b, count, type_name, seconds * 1e6, algbw, busbw, wrong), flush=True)
        del t
        nbytes *= factor

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
