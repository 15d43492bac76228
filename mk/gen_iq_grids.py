#!/usr/bin/env python3
"""Writes src/kernels/iq_grids.c: the codebooks of the IQ1/IQ2/IQ3 formats.

The formats define each codebook as a list of grid points (8 or 4 coordinates
taken from a few levels).  This script reads those points from a ggml source
tree (ggml/src/ggml-common.h, the format's reference definition) and writes
them as sluice's own compact codes: a point of 3-level coordinates is the
base-3 number sum(level_j * 3^j), one of 8-level coordinates the octal number
whose digit j is level_j; C macros turn the codes back into the byte
patterns at compile time.  Run: python3 mk/gen_iq_grids.py LLAMA_CPP_DIR
(the committed file was made from llama.cpp 7e743c3a)."""
import re
import sys

GRIDS = [  # name in the reference, sluice name, coordinates, levels (byte values)
    ("iq2xxs_grid", "kq_iq2xxs_grid", 8, [8, 25, 43]),
    ("iq2xs_grid", "kq_iq2xs_grid", 8, [8, 25, 43]),
    ("iq2s_grid", "kq_iq2s_grid", 8, [8, 25, 43]),
    ("iq3xxs_grid", "kq_iq3xxs_grid", 4, [4, 12, 20, 28, 36, 44, 52, 62]),
    ("iq3s_grid", "kq_iq3s_grid", 4, [1, 3, 5, 7, 9, 11, 13, 15]),
    ("iq1s_grid", "kq_iq1s_grid", 8, [0xFF, 0x00, 0x01]),
]


def points(src, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + name + r", \w+\)(.*?)GGML_TABLE_END", src, re.S)
    return [int(v, 0) for v in re.findall(r"0x[0-9a-fA-F]+|\d+", m.group(1))]


def code(point, ncoord, levels):
    digits = [levels.index((point >> (8 * j)) & 0xFF) for j in range(ncoord)]
    if len(levels) == 3:
        return str(sum(d * 3**j for j, d in enumerate(digits)))
    return "0" + "".join(str(d) for d in reversed(digits))  # octal: digit j = coordinate j


def main():
    src = open(sys.argv[1] + "/ggml/src/ggml-common.h").read()
    out = [
        "/* Codebooks of the IQ1_S/IQ1_M, IQ2_XXS/XS/S and IQ3_XXS/S formats, written",
        " * by mk/gen_iq_grids.py as compact codes (see there): a 3-level point is",
        " * sum(level_j * 3^j), a 4-coordinate 8-level point an octal number whose",
        " * digit j is coordinate j's level.  The macros expand the codes to the",
        " * formats' byte patterns (coordinate j in byte j) at compile time. */",
        '#include "kernels/kq_iq.h"',
        "",
        "#define T3(c, p) (((c) / (p)) % 3)",
        "#define P8(L, c) ((uint64_t)L(T3(c, 1)) | (uint64_t)L(T3(c, 3)) << 8 | (uint64_t)L(T3(c, 9)) << 16 | \\",
        "                  (uint64_t)L(T3(c, 27)) << 24 | (uint64_t)L(T3(c, 81)) << 32 | (uint64_t)L(T3(c, 243)) << 40 | \\",
        "                  (uint64_t)L(T3(c, 729)) << 48 | (uint64_t)L(T3(c, 2187)) << 56)",
        "#define P4(L, c) ((uint32_t)L((c) & 7) | (uint32_t)L((c) >> 3 & 7) << 8 | (uint32_t)L((c) >> 6 & 7) << 16 | \\",
        "                  (uint32_t)L((c) >> 9 & 7) << 24)",
        "#define L2(l) ((l) == 0 ? 8 : (l) == 1 ? 25 : 43)          /* IQ2 levels */",
        "#define L1(l) ((l) == 0 ? 0xff : (l) == 1 ? 0x00 : 0x01)  /* IQ1: -1, 0, +1 as int8 */",
        "#define L3X(l) ((l) == 7 ? 62 : 4 + 8 * (l))               /* IQ3_XXS: 4, 12, ..., 52, 62 */",
        "#define L3S(l) (2 * (l) + 1)                               /* IQ3_S: 1, 3, ..., 15 */",
    ]
    macro = {"kq_iq2xxs_grid": ("G2", "P8(L2, c)"), "kq_iq2xs_grid": ("G2", None), "kq_iq2s_grid": ("G2", None),
             "kq_iq3xxs_grid": ("G3X", "P4(L3X, c)"), "kq_iq3s_grid": ("G3S", "P4(L3S, c)"),
             "kq_iq1s_grid": ("G1", "P8(L1, c)")}
    for _, sname, _, _ in GRIDS:
        m, body = macro[sname]
        if body:
            out.append("#define %s(c) %s" % (m, body))
    for rname, sname, ncoord, levels in GRIDS:
        pts = points(src, rname)
        ctype = "uint64_t" if ncoord == 8 else "uint32_t"
        m = macro[sname][0]
        out.append("")
        out.append("const %s %s[%d] = {" % (ctype, sname, len(pts)))
        codes = [code(p, ncoord, levels) for p in pts]
        per = 8
        for i in range(0, len(codes), per):
            out.append("    " + " ".join("%s(%s)," % (m, c) for c in codes[i:i + per]))
        out.append("};")
    open("src/kernels/iq_grids.c", "w").write("\n".join(out) + "\n")


main()
