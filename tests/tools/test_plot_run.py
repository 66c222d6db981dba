"""tools/plot_run.py: its own event-file reader gives exactly the values a file of known values
holds (interop_sample --tensorboard), and the PNG is drawn where matplotlib is installed.

    test_plot_run.py SAMPLE_BIN WORKDIR
"""
import os
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    sample, work = sys.argv[1], sys.argv[2]
    folder = os.path.join(work, "plot_run")
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sample, "--tensorboard", folder], check=True, stdout=subprocess.DEVNULL)
    tool = os.path.join(ROOT, "tools", "plot_run.py")
    dump = subprocess.run([sys.executable, tool, folder, "--dump"], check=True, capture_output=True, text=True).stdout
    got = [(tag, int(step), float(value)) for _, tag, step, value in (line.split("\t") for line in dump.splitlines())]
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
    want = []
    for s in range(5):
        want += [("train/loss", s, f32((s + 1) / 3)), ("train/lr", s, f32(0.001 / 2 ** s))]
    if got != want:
        sys.exit(f"FAIL: plot_run read {got}, the file holds {want}")
    print(f"plot_run --dump: {len(got)} scalars, exactly as written (the text event skipped)")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no matplotlib: the PNG is not drawn (apt-get install python3-matplotlib)")
        return
    png = os.path.join(work, "plot_run.png")
    subprocess.run([sys.executable, tool, folder, "--out", png], check=True)
    if open(png, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
        sys.exit("FAIL: not a PNG")
    print("OK")


if __name__ == "__main__":
    main()
