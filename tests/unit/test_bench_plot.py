"""ops/bench/plot.py on result files shaped as llmbus-bench serve writes them: the throughput
picture takes the median of repeats per concurrency, prefill runs (one output token) are
left out, the latency picture uses each series' highest concurrency, and both PNGs are
written. Exit codes: 0 pass, 1 fail, 77 skipped (no matplotlib)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "..", "ops", "bench", "plot.py")


def result(label, conc, tps, ttfts, itls, out_per_req=4):
    n = len(ttfts)
    return {"label": label, "max_concurrency": conc, "output_throughput": tps, "completed": n,
            "total_output_tokens": n * out_per_req, "ttfts": ttfts, "itls": itls}


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib missing (ops/requirements-test.txt, make venv)")
        return 77
    d = tempfile.mkdtemp(prefix="plot-test-")
    files = {
        "a1.json": result("llmbus/decode/1", None, 300.0, [0.01], [[0.003, 0.004, 0.003]]),
        "a2.json": result("llmbus/conc16/1", 16, 800.0, [0.1, 0.2], [[0.01, 0.02], [0.03]]),
        "a3.json": result("llmbus/conc16/2", 16, 900.0, [0.1, 0.3], [[0.01], [0.02]]),
        "a4.json": result("llmbus/conc16/3", 16, 700.0, [0.2, 0.2], [[0.02], [0.02]]),
        "p.json": result("llmbus/prefill/1", None, 5.0, [0.2], [[]], out_per_req=1),
        "b.json": result("other/conc16/1", 16, 400.0, [0.5], [[0.05, 0.06]]),
    }
    for name, r in files.items():
        with open(os.path.join(d, name), "w") as f:
            json.dump(r, f)
    out = os.path.join(d, "out")
    p = subprocess.run([sys.executable, PLOT, "-o", out] + [os.path.join(d, n) for n in files],
                       capture_output=True, text=True)
    print(p.stdout + p.stderr)
    checks = [
        ("exit 0", p.returncode == 0),
        ("median of the three conc16 repeats", "throughput llmbus concurrency 16: 800.0 output tok/s (median of 3)" in p.stdout),
        ("concurrency 1 from a run without max_concurrency", "throughput llmbus concurrency 1: 300.0" in p.stdout),
        ("prefill runs left out", "5.0 output tok/s" not in p.stdout),
        ("latency from the highest concurrency: 6 TTFTs of llmbus", "ttft llmbus at 16: median 200.0 ms over 6 requests" in p.stdout),
        ("itl samples flattened", "itl llmbus at 16: median 20.00 ms over 7 gaps" in p.stdout),
        ("both pictures written", all(os.path.getsize(os.path.join(out, f)) > 1000
                                      for f in ("throughput.png", "latency.png")) if p.returncode == 0 else False),
    ]
    failures = 0
    for name, ok in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
        failures += not ok
    print(f"{len(checks) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
