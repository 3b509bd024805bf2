"""llama.cpp's own forward speed, without a server: the counterpart of llmbus-kernel-bench.

Run with the private llama-cpp-python venv (ops/bench/compare-llamacpp.sh makes it):
  .cache/llamacpp-venv/bin/python ops/bench/llamacpp_kernel_bench.py MODEL.gguf THREADS RUNS

Prints the same two lines llmbus-kernel-bench prints (medians of RUNS):
  prefill 512 <tok/s>   one 512-token batch (n_batch 512), logits of the last row only
  decode b1   <tok/s>   128 single-token steps after a 16-token prompt
Through llama-cpp-python's Llama.eval (llama_decode per batch; a few microseconds of Python
per call against milliseconds of forward), so these are llama.cpp's kernels and threads, not
its server's per-request costs.
"""
import statistics
import sys
import time

from llama_cpp import Llama


def main():
    model, threads, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=2048,
                n_batch=512, n_ubatch=512, verbose=False)
    vocab = llm.n_vocab()
    prompt = [(i * 7919 + 13) % (vocab - 200) + 100 for i in range(512)]
    prefill, decode = [], []
    llm.reset()
    llm.eval(prompt[:32])  # warm-up: pages in the weights
    for _ in range(runs):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        prefill.append(512 / (time.perf_counter() - t0))
        llm.reset()
        llm.eval(prompt[:16])
        t0 = time.perf_counter()
        for i in range(128):
            llm.eval([prompt[16 + i]])
        decode.append(128 / (time.perf_counter() - t0))
    print(f"prefill 512 {statistics.median(prefill):10.2f} tok/s  (median of {runs})")
    print(f"decode b1   {statistics.median(decode):10.2f} tok/s  (median of {runs})")


if __name__ == "__main__":
    main()
