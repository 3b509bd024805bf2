"""The table of ops/bench/compare-types.sh: llmbus's forward against llama.cpp's, one row per file
and instruction set, from the raw results in --work (cells.tsv lists file index, label, isa,
repeat; c<i>-<isa>-<r>-llmbus.txt is llmbus-kernel-bench --roofline output, c<i>-<isa>-<r>-llamacpp-
bench.json and -batched.jsonl llama-bench's and llama-batched-bench's). Medians over repeats.
Standard library only; the parsers are compare_llamacpp_report.py's.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_llamacpp_report import NAN, fmt, kernel_bench, median, print_table, ratio, read_json  # noqa: E402
import json  # noqa: E402


def llamacpp(prefix):
    out = {}
    for t in read_json(prefix + "-bench.json") or []:
        key = "prefill" if t.get("n_gen") == 0 else "decode_b1" if t.get("n_prompt") == 0 else None
        if key:
            out[key] = median(t.get("samples_ts") or [])
            out["build_commit"] = t.get("build_commit")
    speeds = []
    try:
        for line in open(prefix + "-batched.jsonl"):
            try:
                speeds.append(json.loads(line).get("speed_tg"))
            except ValueError:
                pass
    except OSError:
        pass
    out["decode_b16"] = median(speeds)
    return out


def main():
    ap = argparse.ArgumentParser()
    for name in ("work", "cpu", "commit", "version"):
        ap.add_argument("--" + name, required=True)
    for name in ("ncpu", "threads", "runs", "repeats"):
        ap.add_argument("--" + name, type=int, required=True)
    a = ap.parse_args()
    cells = {}  # (file index, isa) -> (label, [repeats])
    for line in open(f"{a.work}/cells.tsv"):
        fi, label, isa, rep = line.rstrip("\n").split("\t")
        cells.setdefault((int(fi), isa), (label, []))[1].append(int(rep))
    print(f"llmbus vs llama.cpp by file and instruction set, {time.strftime('%Y-%m-%d', time.gmtime())}, {a.cpu}, "
          f"{a.ncpu} cores, llmbus commit {a.commit}, {a.threads} threads each; llama.cpp from llama-cpp-python "
          f"{a.version}'s tree; medians of {a.runs} runs (x {a.repeats} repeats). llmbus: llmbus-kernel-bench with "
          f"LLMBUS_SIMD=<isa>; llama.cpp: llama-bench pp512 / tg128 and llama-batched-bench 16 x 128 after 16-token "
          f"prompts, built natively (avx512) or with GGML_NATIVE=OFF GGML_AVX2=ON (avx2). Bound: llmbus's rate "
          f"over the fraction llmbus-kernel-bench --roofline gives (prefill: int8 peak of the level; decode: "
          f"DRAM read of the bytes a token reads, the fastest of 21 reads before the runs; paired: each decode "
          f"run against the fastest of the reads taken right before and after it, median over the runs)")
    print()
    header = ["file", "isa", "pp512 llmbus", "pp512 llama.cpp", "ratio", "llmbus / bound",
              "tg b1 llmbus", "tg b1 llama.cpp", "ratio", "llmbus / bound", "paired",
              "b16 llmbus", "b16 llama.cpp", "ratio"]
    rows = []
    for (fi, isa), (label, reps) in sorted(cells.items()):
        lb = [kernel_bench(f"{a.work}/c{fi}-{isa}-{r}-llmbus.txt") for r in reps]
        lc = [llamacpp(f"{a.work}/c{fi}-{isa}-{r}-llamacpp") for r in reps]
        m = {k: median(x.get(k) for x in lb) for k in ("prefill", "decode_b1", "decode_b16", "prefill_frac",
                                                       "decode_b1_frac", "decode_b1_paired")}
        c = {k: median(x.get(k) for x in lc) for k in ("prefill", "decode_b1", "decode_b16")}
        rows.append([label, isa,
                     fmt(m["prefill"]), fmt(c["prefill"]), fmt(ratio(m["prefill"], c["prefill"]), 2),
                     fmt(m["prefill_frac"], 2),
                     fmt(m["decode_b1"]), fmt(c["decode_b1"]), fmt(ratio(m["decode_b1"], c["decode_b1"]), 2),
                     fmt(m["decode_b1_frac"], 2), fmt(m["decode_b1_paired"], 2),
                     fmt(m["decode_b16"]), fmt(c["decode_b16"]), fmt(ratio(m["decode_b16"], c["decode_b16"]), 2)])
    print_table(header, rows)
    print()
    below = [f"{r[0]} {r[1]} ({', '.join(n for n, v in (('pp512', r[4]), ('tg b1', r[8]), ('b16', r[13])) if v != 'n/a' and float(v) < 1.0)})"
             for r in rows if any(v != "n/a" and float(v) < 1.0 for v in (r[4], r[8], r[13]))]
    print("- below llama.cpp: " + ("; ".join(below) if below else "none"))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
