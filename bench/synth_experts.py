#!/usr/bin/env python3
"""Writes a GGUF holding only routed experts (random Q8_0 bytes) for I/O benchmarks:
   synth_experts.py OUT.gguf [LAYERS] [EXPERTS] [ROWS] [COLS]
Defaults: 12 layers x 128 experts, gate/up 1024x768 and down 768x1024 (2.39 MiB per
expert, 3.7 GB in all; shaped like Qwen3-30B-A3B's 2.53 MiB Q4_K experts).  Not a runnable
model: just the bytes and tensor table the expert store and `sluice pack` read."""
import os
import struct
import sys

out = sys.argv[1]
L, E, R, C = (int(a) for a in (sys.argv[2:] + ["12", "128", "1024", "768"][len(sys.argv) - 2:])[:4])
Q8_0, BLOCK, BLOCK_BYTES, ALIGN = 8, 32, 34, 32


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)


def kv_u32(k, v):
    return s(k) + struct.pack("<II", 4, v)


kvs = [kv_str("general.architecture", "qwen3moe"), kv_str("general.name", "sluice bench experts"),
       kv_u32("qwen3moe.block_count", L), kv_u32("qwen3moe.expert_count", E),
       kv_u32("qwen3moe.expert_used_count", 8), kv_u32("general.alignment", ALIGN)]
tensors, off = [], 0
for l in range(L):
    for name, (a, b) in (("gate", (R, C)), ("up", (R, C)), ("down", (C, R))):
        nbytes = a * b // BLOCK * BLOCK_BYTES * E
        tensors.append((f"blk.{l}.ffn_{name}_exps.weight", (a, b, E), off, nbytes))
        off += (nbytes + ALIGN - 1) // ALIGN * ALIGN
head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
for name, ne, o, _ in tensors:
    head += s(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", Q8_0, o)
head += b"\0" * ((-len(head)) % ALIGN)
with open(out, "wb") as f:
    f.write(head)
    for _, _, o, nbytes in tensors:
        left = nbytes
        while left:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n
        f.write(b"\0" * ((-nbytes) % ALIGN))
print(f"{out}: {L} layers x {E} experts, {len(head) + off} bytes")
