"""The tables of ops/bench/compare-llamacpp.sh, from the raw results it leaves in --work.

Reads, for each repeat r and column (llmbus, llamacpp-q4_1, llamacpp-q4_0):
  <col>-<scenario>-<r>.json      llmbus-bench serve --json (decode, prefill, conc16, conc32)
  fwd-llmbus-<r>.txt             llmbus-kernel-bench --roofline output
  fwd-<col>-<r>-bench.json       llama-bench -o json (pp512, tg128; samples_ts per run)
  fwd-<col>-<r>-batched.jsonl    llama-batched-bench --output-format jsonl, one line per run
Prints two markdown tables (serving, forward: medians over the repeats, llmbus's ratio to each
llama.cpp column), the roofline lines (this machine's bounds, the fraction of them each forward
reaches) and the per-repeat figures. Standard library only.
"""
import argparse
import json
import re
import statistics
import time

COLS = ("llmbus", "llamacpp-q4_1", "llamacpp-q4_0")
SCENARIOS = ("decode", "prefill", "conc16", "conc32")
SERVING_ROWS = (  # scenario, llmbus-bench key, label, higher is better
    ("decode", "output_throughput", "batch-1 decode, output tok/s", True),
    ("decode", "median_tpot_ms", "batch-1 decode, median TPOT (ms)", False),
    ("prefill", "median_ttft_ms", "512-token prefill, TTFT (ms)", False),
    ("conc16", "output_throughput", "16 concurrent (100 + 128 tokens), output tok/s", True),
    ("conc16", "mean_ttft_ms", "16 concurrent, mean TTFT (ms)", False),
    ("conc16", "p99_ttft_ms", "16 concurrent, p99 TTFT (ms)", False),
    ("conc16", "median_tpot_ms", "16 concurrent, median TPOT (ms)", False),
    ("conc32", "output_throughput", "32 concurrent (100 + 128 tokens), output tok/s", True),
    ("conc32", "mean_ttft_ms", "32 concurrent, mean TTFT (ms)", False),
    ("conc32", "p99_ttft_ms", "32 concurrent, p99 TTFT (ms)", False),
    ("conc32", "median_tpot_ms", "32 concurrent, median TPOT (ms)", False),
)
FORWARD_ROWS = (  # key, label
    ("prefill", "512-token prefill, tok/s (llama-bench pp512)"),
    ("decode_b1", "batch-1 decode, tok/s (llama-bench tg128)"),
    ("decode_b16", "batch-16 decode, tok/s (llama-batched-bench, 16 x 128 after 16-token prompts)"),
)
NAN = float("nan")


def median(vals):
    vals = [v for v in vals if isinstance(v, (int, float)) and v == v]
    return statistics.median(vals) if vals else NAN


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def serving(work, col, scen, repeats):
    """The llmbus-bench results of one column and scenario, one per repeat that produced one."""
    out = [read_json(f"{work}/{col}-{scen}-{r}.json") for r in range(1, repeats + 1)]
    return [o for o in out if isinstance(o, dict)]


def kernel_bench(path):
    """llmbus-kernel-bench's rates {prefill, decode_b1, decode_b16}, the fraction of its bound under
    each (same keys + '_frac'), decode's fraction of the reads beside its runs (+ '_paired') and the
    roofline numbers (dram_gbs, int8_gops, path)."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    keys = {"prefill 512": "prefill", "decode b1": "decode_b1", "decode b16": "decode_b16"}
    for i, line in enumerate(lines):
        m = re.match(r"roofline: DRAM read ([\d.]+) GB/s, int8 peak ([\d.]+) GOPS \((.*)\), \d+ threads", line)
        if m:
            out.update(dram_gbs=float(m[1]), int8_gops=float(m[2]), path=m[3], roofline=line.strip())
        for what, key in keys.items():
            m = re.match(re.escape(what) + r" +([\d.]+) tok/s", line)
            if m:
                out[key] = float(m[1])
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                f = re.match(r"\s+([\d.]+) of the ", nxt)
                if f:
                    out[key + "_frac"] = float(f[1])
                after = lines[i + 2] if i + 2 < len(lines) else ""
                f = re.match(r"\s+([\d.]+) of the DRAM read rate beside it", after)
                if f:  # decode: the runs against the reads taken next to each (kernel_bench.c)
                    out[key + "_paired"] = float(f[1])
    return out


def llamacpp_forward(work, col, rep):
    """llama.cpp's rates of one repeat: medians over the runs of pp512, tg128 and batch-16 decode."""
    out = {}
    for t in read_json(f"{work}/fwd-{col}-{rep}-bench.json") or []:
        key = "prefill" if t.get("n_gen") == 0 else "decode_b1" if t.get("n_prompt") == 0 else None
        if key:
            out[key] = median(t.get("samples_ts") or [])
            out["build_commit"] = t.get("build_commit")
    speeds = []
    try:
        for line in open(f"{work}/fwd-{col}-{rep}-batched.jsonl"):
            try:
                speeds.append(json.loads(line).get("speed_tg"))
            except ValueError:
                pass
    except OSError:
        pass
    out["decode_b16"] = median(speeds)
    return out


def forward(work, col, repeats):
    if col == "llmbus":
        return [kernel_bench(f"{work}/fwd-llmbus-{r}.txt") for r in range(1, repeats + 1)]
    return [llamacpp_forward(work, col, r) for r in range(1, repeats + 1)]


def ratio(a, b):
    return a / b if a == a and b == b and b else NAN


def fmt(v, digits=1):
    return "n/a" if v != v else f"{v:.{digits}f}"


def print_table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser()
    for name in ("work", "cpu", "commit", "model", "version", "serve-args"):
        ap.add_argument("--" + name, required=True)
    for name in ("repeats", "runs", "ncpu", "threads", "ctx", "slots"):
        ap.add_argument("--" + name, type=int, required=True)
    a = ap.parse_args()
    srv = {c: {s: serving(a.work, c, s, a.repeats) for s in SCENARIOS} for c in COLS}
    fwd = {c: forward(a.work, c, a.repeats) for c in COLS}
    build = next((f.get("build_commit") for f in fwd["llamacpp-q4_1"] if f.get("build_commit")), "?")

    print(f"llmbus vs llama.cpp, {time.strftime('%Y-%m-%d', time.gmtime())}, {a.cpu}, {a.ncpu} cores, "
          f"llmbus commit {a.commit}, {a.model}, {a.threads} threads each; medians of {a.repeats} "
          f"interleaved repeats (forward: of {a.runs} runs each)")
    print(f"llmbus: `llmbus serve --threads {a.threads} --max-model-len {a.ctx} {a.serve_args}`; llama.cpp "
          f"(llama-cpp-python {a.version}'s tree, build {build}, GGML_NATIVE=ON): `llama-server --parallel "
          f"{a.slots} -c {a.slots * a.ctx} -t {a.threads} -tb {a.threads} --cont-batching` on the same file "
          f"(Q4_1) and on its Q4_0 requantization (`llama-quantize --allow-requantize`, repacked at load)")
    loads = [r.get("loadavg_1m_start") for c in COLS for s in SCENARIOS for r in srv[c][s]]
    loads = [v for v in loads if isinstance(v, (int, float))]
    if loads:
        print(f"machine load average (1 min) during the runs: {min(loads):.1f} to {max(loads):.1f}")
    print()

    header = ["metric", "llmbus", "llama.cpp Q4_1", "llama.cpp Q4_0", "llmbus / Q4_1", "llmbus / Q4_0"]
    rows = []
    for scen, key, label, _ in SERVING_ROWS:
        v = [median(r.get(key) for r in srv[c][scen]) for c in COLS]
        rows.append([label, fmt(v[0]), fmt(v[1]), fmt(v[2]), fmt(ratio(v[0], v[1]), 2), fmt(ratio(v[0], v[2]), 2)])
    # peak of each repeat over its scenarios (the server runs them all), median over the repeats
    peak = []
    for c in COLS:
        per_rep = {}
        for s in SCENARIOS:
            for r in srv[c][s]:
                m = r.get("stack_peak_mib")
                if isinstance(m, (int, float)):
                    lbl = str(r.get("label", "")).rsplit("/", 1)[-1]
                    per_rep[lbl] = max(per_rep.get(lbl, 0.0), m)
        peak.append(median(per_rep.values()))
    rows.append(["peak resident memory, whole stack, shared pages once (MiB)", fmt(peak[0]), fmt(peak[1]),
                 fmt(peak[2]), fmt(ratio(peak[0], peak[1]), 2), fmt(ratio(peak[0], peak[2]), 2)])
    failed = [str(sum(int(r.get("failed", 0) or 0) for s in SCENARIOS for r in srv[c][s]))
              if any(srv[c][s] for s in SCENARIOS) else "n/a" for c in COLS]
    rows.append(["failed requests, all runs"] + failed + ["", ""])
    print("Serving (`llmbus-bench serve`, streamed /v1/completions):")
    print()
    print_table(header, rows)
    print()

    med = {c: {k: median(f.get(k) for f in fwd[c]) for k, _ in FORWARD_ROWS} for c in COLS}
    rows = []
    for key, label in FORWARD_ROWS:
        v = [med[c][key] for c in COLS]
        rows.append([label, fmt(v[0]), fmt(v[1]), fmt(v[2]), fmt(ratio(v[0], v[1]), 2), fmt(ratio(v[0], v[2]), 2)])
    print("Forward alone (llmbus: `llmbus-kernel-bench`; llama.cpp: `llama-bench`, `llama-batched-bench`):")
    print()
    print_table(header, rows)
    print()
    roofline(a, fwd, med)
    per_repeat(srv, fwd)


def roofline(a, fwd, med):
    """This machine's bounds (llmbus-kernel-bench --roofline, medians) and each forward's fraction.
    A bound in tok/s is llmbus's rate / its fraction in the same repeat; llama.cpp's Q4_1 column
    reads the same matrices, so the same bounds apply to it (Q4_0's matrices are smaller)."""
    lb = [f for f in fwd["llmbus"] if "dram_gbs" in f]
    if not lb:
        print("- roofline: no llmbus-kernel-bench --roofline output")
        return
    rest = lb[0]["roofline"].split(";", 1)[1].strip() if ";" in lb[0]["roofline"] else ""
    print(f"- roofline (medians of {len(lb)}): DRAM read {median(f['dram_gbs'] for f in lb):.1f} GB/s, int8 peak "
          f"{median(f['int8_gops'] for f in lb):.1f} GOPS ({lb[0]['path']}), {a.threads} threads; {rest}")
    what = {"prefill": "512-token prefill (int8 peak)", "decode_b1": "batch-1 decode (DRAM read)",
            "decode_b16": "batch-16 decode (DRAM read)"}
    bounds = {k: median(f[k] / f[k + "_frac"] for f in lb if f.get(k + "_frac")) for k in what}
    print("- bounds, tok/s: " + ", ".join(f"{what[k]} {fmt(bounds[k], 0)}" for k in what))
    fr = {k: median(f.get(k + "_frac") for f in lb) for k in what}
    print("- llmbus reaches: " + ", ".join(f"{what[k].split(' (')[0]} {fmt(fr[k], 2)}" for k in what)
          + " of its bound")
    q41 = med["llamacpp-q4_1"]
    print("- llama.cpp Q4_1 (same matrices, same bounds) reaches: "
          + ", ".join(f"{what[k].split(' (')[0]} {fmt(ratio(q41[k], bounds[k]), 2)}" for k in what))
    print()


def per_repeat(srv, fwd):
    for c in COLS:
        dec = [round(r.get("output_throughput", NAN), 1) for r in srv[c]["decode"]]
        ttft = [round(r.get("median_ttft_ms", NAN)) for r in srv[c]["prefill"]]
        c16 = [round(r.get("output_throughput", NAN), 1) for r in srv[c]["conc16"]]
        c32 = [round(r.get("output_throughput", NAN), 1) for r in srv[c]["conc32"]]
        fw = {k: [round(f.get(k, NAN), 1) for f in fwd[c]] for k, _ in FORWARD_ROWS}
        print(f"- {c} per repeat: decode tok/s {dec}, prefill TTFT ms {ttft}, conc16 tok/s {c16}, conc32 tok/s "
              f"{c32}; forward prefill {fw['prefill']}, decode b1 {fw['decode_b1']}, b16 {fw['decode_b16']}")


if __name__ == "__main__":
    main()
