#!/usr/bin/env python3
"""Compares llama-eval-callback's log (llama.cpp, `-fa off`) with tests/tools/eval_dump's (llmbus
--numerics ggml) op by op: each tensor's float sum as both print it (llama.cpp's common debug
callback sums in float in memory order; eval_dump likewise), or, when both logs carry a "hash =" line
(FNV-1a of the float bits in memory order: eval_dump prints one; a local llama.cpp build whose
common/debug.cpp is patched to print it too), the exact bits. Prints every op with both sums and
marks the first that differs, which is where the numerics part.

  llama-eval-callback -m M.gguf -p "PROMPT" -n 1 -t 2 -fa off > llama.txt 2>&1
  eval_dump M.gguf "PROMPT" > ours.txt
  python3 tests/tools/eval_compare.py llama.txt ours.txt
"""
import re
import sys


def llama_ops(path):
    """[(our name, sum, elements)] in graph order; RESHAPE, the bare RMS_NORMs, KV cache copies and
    the kq / softmax / kqv internals (not computed as tensors by llmbus) are left out."""
    out, cur, cur_hash = [], None, None
    head = re.compile(r"common_debug_cb_eval:\s+(\S+) = \((\w+)\)\s+(\w+)\((\S+?)\{([\d, ]+)\}.*= \{([\d, ]+)\}")
    for line in open(path, errors="replace"):
        m = head.search(line)
        if m:
            name, typ, op, src, _, shape = m.groups()
            dims = [int(x) for x in shape.split(",")]
            n = 1
            for d in dims:
                n *= d
            cur = (name, op, src, n, typ)
            continue
        h = re.match(r"\s+hash = ([0-9a-f]+)", line)
        if h and cur is not None:
            cur_hash = h.group(1)
            continue
        s = re.match(r"\s+sum = (\S+)", line)
        if not s or cur is None:
            continue
        name, op, src, n, typ = cur
        cur = None
        if typ != "f32" or op in ("RESHAPE", "CPY", "VIEW", "PERMUTE", "TRANSPOSE", "SOFT_MAX"):
            continue
        il = name.rsplit("-", 1)[1] if "-" in name else None
        base = name.rsplit("-", 1)[0] if "-" in name else name
        if op == "RMS_NORM" and base == "norm" or base in ("kq", "kqv", "kq_soft_max"):
            continue
        if op == "ROPE":
            ours = f"{base}_rope-{il}"
        elif op == "SCALE" and name.startswith("node_"):
            m2 = re.match(r"Qcur-(\d+)", src)
            if not m2:
                continue
            ours = f"Qcur_scaled-{m2.group(1)}"
        elif op == "MUL_MAT" and "attn_output" in src:
            layer = re.search(r"blk\.(\d+)\.", src).group(1)
            ours = f"attn_out-{layer}"
        elif base == "ffn_geglu" or base == "ffn_swiglu":
            ours = f"ffn_gate_par-{il}"
        else:
            ours = name
        out.append((ours, float(s.group(1)), n, cur_hash))
        cur_hash = None
    return out


def our_ops(path):
    ops = {}
    for line in open(path):
        m = re.match(r"(\S+) n=(\d+) .*?(?:hash = ([0-9a-f]+) )?last_row_sum = (\S+) sum = (\S+)", line)
        if m:
            ops[m.group(1)] = (int(m.group(2)), float(m.group(4)), float(m.group(5)), m.group(3))
    return ops


def main():
    ref, ours = llama_ops(sys.argv[1]), our_ops(sys.argv[2])
    first = None
    for name, s, n, h in ref:
        if name not in ours:
            print(f"{name:24s} llama.cpp {s:16.6f}  (no llmbus tensor)")
            continue
        on, olast, osum, oh = ours[name]
        mine = osum if on == n else olast  # llama.cpp keeps only the output row late in the last layer
        # with both hashes (a llama.cpp whose debug callback also hashes the float bits), the bits decide
        same = h == oh if (h and oh and on == n) else f"{mine:.6f}" == f"{s:.6f}"
        mark = "" if same else "  <-- differs"
        if not same and first is None:
            first = name
        print(f"{name:24s} llama.cpp {s:16.6f}  llmbus {mine:16.6f}{mark}")
    print(f"first difference: {first}" if first else "every op's sum is the same")
    return 1 if first else 0


if __name__ == "__main__":
    sys.exit(main())
