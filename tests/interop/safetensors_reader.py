"""An independent reader of .safetensors files, written from the format's specification
(github.com/huggingface/safetensors, "Format") with json and struct only -- no code of ringgrad's.

    header, data = read_raw(path)      # every rule the specification states, checked
    tensors, metadata = read(path)     # {name: (dtype, shape, [values...])}, {key: value}

The rules: an 8-byte little-endian header length N that fits the file; N bytes of UTF-8 JSON that
start with '{' (trailing spaces allowed), one object whose keys are unique; "__metadata__" maps
strings to strings; every other value has exactly "dtype", "shape" and "data_offsets"; each
tensor's byte length is its element count times its dtype's size; the tensors' data covers the
rest of the file exactly, without overlaps or holes. Raises FormatError naming the broken rule.
"""
import json
import struct

# dtype: (struct format character, bytes per element); BF16 has no struct code: the top half of an
# IEEE single.
DTYPES = {"F64": ("d", 8), "F32": ("f", 4), "F16": ("e", 2), "BF16": (None, 2), "I64": ("q", 8),
          "I32": ("i", 4), "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1), "BOOL": ("?", 1),
          "U16": ("H", 2), "U32": ("I", 4), "U64": ("Q", 8)}


class FormatError(Exception):
    pass


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise FormatError(f"duplicate keys in the header: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    return dict(pairs)


def read_raw(path):
    blob = open(path, "rb").read()
    if len(blob) < 8:
        raise FormatError("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise FormatError(f"header length {n} runs past the file ({len(blob)} bytes)")
    text = blob[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise FormatError("the header does not start with '{'")
    header = json.loads(text, object_pairs_hook=_unique_keys)
    data = blob[8 + n:]
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in entry.items()):
                raise FormatError("__metadata__ must map strings to strings")
            continue
        if set(entry) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{name!r} has fields {sorted(entry)}")
        if entry["dtype"] not in DTYPES:
            raise FormatError(f"{name!r} has unknown dtype {entry['dtype']!r}")
        shape, (begin, end) = entry["shape"], entry["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise FormatError(f"{name!r} has shape {shape}")
        count = 1
        for d in shape:
            count *= d
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
            raise FormatError(f"{name!r} has data_offsets {[begin, end]}")
        if end - begin != count * DTYPES[entry["dtype"]][1]:
            raise FormatError(f"{name!r}: {end - begin} bytes for shape {shape} {entry['dtype']}")
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise FormatError(f"{name!r} starts at {begin}, expected {at}: " + ("overlap" if begin < at else "hole"))
        at = end
    if at != len(data):
        raise FormatError(f"the tensors cover {at} of {len(data)} data bytes")
    return header, data


def read(path):
    header, data = read_raw(path)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        code, size = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        count = (end - begin) // size
        if code is None:  # BF16: widen each 16-bit half to the f32 whose top half it is
            halves = struct.unpack(f"<{count}H", raw)
            values = list(struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *(h << 16 for h in halves))))
        else:
            values = list(struct.unpack(f"<{count}{code}", raw))
        tensors[name] = (entry["dtype"], entry["shape"], values)
    return tensors, header.get("__metadata__", {})
