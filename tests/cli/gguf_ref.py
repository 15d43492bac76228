#!/usr/bin/env python3
"""An independent reading of a GGUF file's tensor table, to check what
`sluice inspect --json` reports against: tensor names, types, shapes, byte
sizes from ggml's block sizes (written out here), and where the data section
ends.  Prints one JSON object.  Only what the check needs; not a GGUF
library (single files, no split sets)."""
import json
import mmap
import struct
import sys

# ggml type id: (name, elements per block, bytes per block)
BLOCKS = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
    10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110), 12: ("q4_k", 256, 144), 13: ("q5_k", 256, 176),
    14: ("q6_k", 256, 210), 15: ("q8_k", 256, 292), 16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74),
    18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
    26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8), 29: ("iq1_m", 256, 56),
    30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17),
}
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = bytes(self.d[self.p:self.p + n])
        self.p += n
        return s.decode("utf-8", "replace")

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:  # arrays are skipped: the check needs none of them
            et, n = self.take("I"), self.take("Q")
            if et in SCALAR:
                self.p += n * struct.calcsize("<" + SCALAR[et])
            else:
                for _ in range(n):
                    self.value(et)
            return None
        return self.take(SCALAR[t])


def read(path):
    with open(path, "rb") as f:
        # mapped, not read: only the header is touched
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    r = Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.p = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("I"))
    align = kv.get("general.alignment", 32)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("I")
        shape = [r.take("Q") for _ in range(nd)]
        t, off = r.take("I"), r.take("Q")
        tname, blck, bsize = BLOCKS[t]
        n = 1
        for d in shape[1:]:
            n *= d
        tensors.append({"name": name, "type": tname, "shape": shape, "offset": off,
                        "bytes": shape[0] // blck * bsize * n})
    data_off = (r.p + align - 1) // align * align
    end = max((t["offset"] + t["bytes"] for t in tensors), default=0)
    return {"version": version, "alignment": align, "data_offset": data_off,
            "data_end": data_off + end, "file_size": len(data), "tensors": tensors}


if __name__ == "__main__":
    json.dump(read(sys.argv[1]), sys.stdout)
