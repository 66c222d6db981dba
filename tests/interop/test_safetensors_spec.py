"""ringgrad's .safetensors files read by the specification's reader (safetensors_reader.py):

    test_safetensors_spec.py SAMPLE_BIN WORKDIR [GPT_MINI_BIN]

1. interop_sample --closed-form: every dtype ringgrad writes, each value recomputed here from
   its formula and compared exactly; the metadata; the data 8-byte aligned.
2. The reader is no rubber stamp: the same file with one data offset moved is refused.
3. With GPT_MINI_BIN: examples/gpt_mini --export after 3 steps: the reader accepts it, every name
   is nanoGPT's for the model the metadata describes, every shape follows from it.
"""
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_reader as st  # noqa: E402


def expect(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


def closed_form(sample, work):
    path = os.path.join(work, "closed_form.safetensors")
    subprocess.run([sample, "--closed-form", path], check=True)
    tensors, metadata = st.read(path)
    formulas = {
        "f32.quarter_steps": ("F32", [3, 4], lambda i: 0.25 * i - 1),
        "f16.halves": ("F16", [2, 3], lambda i: 0.5 * i - 2),
        "bf16.powers": ("BF16", [5], lambda i: float(2 ** i)),
        "f64.tenths": ("F64", [2], lambda i: 0.1 * (i + 1)),
        "i64.large": ("I64", [3], lambda i: (i << 33) - 7),
        "i32.negative": ("I32", [2, 2], lambda i: -i * 1000),
        "u8.bytes": ("U8", [4], lambda i: i * 85),
        "scalar": ("F32", [], lambda i: 42.0),
        "empty": ("F32", [0, 3], None),
        "na\u00efve \"quoted\"": ("F32", [1], lambda i: -1.0),
    }
    expect(set(tensors) == set(formulas), f"names {sorted(tensors)}")
    for name, (dtype, shape, f) in formulas.items():
        got_dtype, got_shape, values = tensors[name]
        expect((got_dtype, got_shape) == (dtype, shape), f"{name}: {got_dtype} {got_shape}")
        want = [f(i) for i in range(len(values))] if f else []
        expect(values == want, f"{name}: {values} != {want}")
    expect(metadata == {"format": "pt", "purpose": "closed form"}, f"metadata {metadata}")
    (n,) = struct.unpack("<Q", open(path, "rb").read(8))
    expect((8 + n) % 8 == 0, "the data is not 8-byte aligned")
    print(f"closed form: {len(tensors)} tensors, every value as its formula says")
    return path


def refuses_a_moved_offset(path, work):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = blob[8:8 + n].decode()
    moved = header.replace('"data_offsets":[0,', '"data_offsets":[1,', 1)
    expect(moved != header, "no data offset at 0 to move")
    bad = os.path.join(work, "moved.safetensors")
    open(bad, "wb").write(blob[:8] + moved.encode() + blob[8 + n:])
    try:
        st.read(bad)
    except st.FormatError as e:
        print(f"moved offset refused: {e}")
        return
    sys.exit("FAIL: the reader accepted a file whose offsets leave a hole")


def gpt_mini_export(gpt_mini, work):
    path = os.path.join(work, "gpt_mini.safetensors")
    subprocess.run([gpt_mini, "--max-steps", "3", "--eval-every", "0", "--log-every", "3", "--n-layer", "2",
                    "--export", path], check=True, stdout=subprocess.DEVNULL)
    tensors, metadata = st.read(path)
    L, C = int(metadata["n_layer"]), int(metadata["n_embd"])
    V, T = int(metadata["vocab_size"]), int(metadata["block_size"])
    expect(len(metadata["vocab"]) == V, "vocab and vocab_size disagree")
    shapes = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        p = f"h.{i}."
        shapes.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                       p + "attn.c_attn.weight": [3 * C, C], p + "attn.c_attn.bias": [3 * C],
                       p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                       p + "mlp.c_fc.weight": [4 * C, C], p + "mlp.c_fc.bias": [4 * C],
                       p + "mlp.c_proj.weight": [C, 4 * C], p + "mlp.c_proj.bias": [C]})
    got = {name: shape for name, (_, shape, _) in tensors.items()}
    expect(got == shapes, f"names and shapes {got}")
    print(f"gpt_mini --export: {len(tensors)} tensors, nanoGPT's names and shapes for {L} layers x {C}")


def main():
    sample, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = closed_form(sample, work)
    refuses_a_moved_offset(path, work)
    if len(sys.argv) > 3:
        gpt_mini_export(sys.argv[3], work)
    print("OK")


if __name__ == "__main__":
    main()
