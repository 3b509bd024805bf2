"""LoRA adapters served as vLLM serves them: `llmbus serve --enable-lora --lora-modules a=A b=B`
on the default model, with two random adapters written by tests/tools/make_lora.py (a: rank 8
on q,k,v,o,gate,up,down, F32; b: rank 4 on q,v,down, F16).

- /v1/models lists the base and each adapter (id = name, parent = the base's id);
- a request's `model` naming an adapter (completions, chat, responses) runs it: greedy output
  other than the base's; an unknown name is the unknown-model 404;
- a request's greedy output alone equals its output among concurrent requests of the other
  adapter and the base (per-row adapters, docs/design.md §5);
- over NATS a GenerateRequest's lora_request names the adapter (its id is ignored): the same
  tokens as over HTTP; an unknown adapter is the error an unknown model gets;
- `llmbus-bench serve --lora-mix a,b,base` sends request i to model i mod 3 (a name nobody
  serves fails its requests).

usage: test_lora_serve.py --pydir DIR   (LLMBUS_BUILD_DIR, LLMBUS_SOURCE_DIR from ctest)
"""
import argparse
import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import api_stack

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_LORA = os.path.join(os.path.dirname(HERE), "tools", "make_lora.py")
PROMPT = "The capital of France is"
MAX_TOKENS = 12


def post(base, path, body, timeout=120):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def complete(base, model, prompt=PROMPT):
    status, body = post(base, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS,
                                                  "temperature": 0, "ignore_eos": True})
    assert status == 200, (model, status, body)
    assert body["model"] == model, body
    return body["choices"][0]["text"]


def wait_for_adapters(stack, names, timeout_s=30):
    """The adapters reach the front door with the workers' heartbeats (every 2 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body = api_stack.http_get(stack.base + "/v1/models")
        if status == 200 and names <= {m["id"] for m in json.loads(body)["data"]}:
            return json.loads(body)["data"]
        time.sleep(0.25)
    raise AssertionError(f"/v1/models never listed {names}")


def generate_request(rid, lora):
    import flatbuffers
    from llmbus import GenerateRequest as GR, LoRARequest as LR, OutputKind, SamplingParams as SP
    b = flatbuffers.Builder(256)
    SP.SamplingParamsStart(b)
    SP.SamplingParamsAddTemperature(b, 0.0)
    SP.SamplingParamsAddMaxTokens(b, MAX_TOKENS)
    SP.SamplingParamsAddIgnoreEos(b, True)
    SP.SamplingParamsAddOutputKind(b, OutputKind.OutputKind.Delta)
    sp = SP.SamplingParamsEnd(b)
    name = b.CreateString(lora)
    LR.LoRARequestStart(b)
    LR.LoRARequestAddLoraName(b, name)
    LR.LoRARequestAddLoraIntId(b, 424242)  # a client's id: ignored, the name is resolved
    lr = LR.LoRARequestEnd(b)
    rid_s = b.CreateString(rid)
    prompt = b.CreateString(PROMPT)
    GR.GenerateRequestStart(b)
    GR.GenerateRequestAddVersion(b, 1)
    GR.GenerateRequestAddRequestId(b, rid_s)
    GR.GenerateRequestAddPrompt(b, prompt)
    GR.GenerateRequestAddRaw(b, True)
    GR.GenerateRequestAddSamplingParams(b, sp)
    GR.GenerateRequestAddLoraRequest(b, lr)
    root = GR.GenerateRequestEnd(b)
    b.FinishSizePrefixed(root, file_identifier=b"LGRQ")
    return bytes(b.Output())


async def nats_generate(stack, lora):
    """(text, error code, error message) of one greedy request naming adapter `lora` over NATS."""
    import nats
    from llmbus import RequestOutput as RO
    url, user, pw_file = stack.nats_login()
    with open(pw_file) as f:
        nc = await nats.connect(url, user=user, password=f.read().strip(), allow_reconnect=False)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("llm.generate.default", generate_request(f"nats-{lora}", lora), reply=inbox)
        text = ""
        while True:
            ro = RO.RequestOutput.GetRootAs((await sub.next_msg(timeout=120)).data, 4)
            if ro.Error() is not None:
                return text, ro.Error().Code(), ro.Error().Message().decode()
            text += (ro.Outputs(0).Text() or b"").decode()
            if ro.Finished():
                return text, 0, ""
    finally:
        await nc.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pydir", required=True, help="flatc's Python output (llmbus package)")
    args = ap.parse_args()
    try:
        import flatbuffers  # noqa: F401
        import gguf  # noqa: F401
        import nats  # noqa: F401
    except ImportError as e:
        api_stack.skip(f"python module missing: {e}")
    sys.path.insert(0, args.pydir)
    with tempfile.TemporaryDirectory(prefix="llmbus-lora-") as work:
        failures = run(work)
    sys.exit(1 if failures else 0)


def bad_adapter_stops_serve_with_the_loaders_reason(model):
    """serve with a file that is no adapter (the base model itself): the worker fails at start and
    serve ends naming the loader's reason. Returns 1 on failure."""
    def case():
        stack = api_stack.Stack(args=[])
        r = subprocess.run([stack.llmbus, "serve", "--model", model, "--http", f"127.0.0.1:{api_stack.free_port()}",
                            "--metrics-port", "0", "--threads", "1", "--enable-lora", "--lora-modules", f"bad={model}"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "bad=" in r.stderr and "expected 'adapter'" in r.stderr, (r.returncode,
                                                                                               r.stderr[-1500:])
    return api_stack.run_cases([("bad_adapter_stops_serve_with_the_loaders_reason", case)])


def run(work):
    """The cases against one stack serving two adapters made in `work`; returns the failures."""
    model = os.environ.get("LLMBUS_MODEL") or os.path.join(os.environ.get("LLMBUS_SOURCE_DIR", "."),
                                                           "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        api_stack.skip(f"model {model} missing (run ops/fetch-model.sh)")
    a, b = os.path.join(work, "a.gguf"), os.path.join(work, "b.gguf")
    subprocess.run([sys.executable, MAKE_LORA, model, a, "--seed", "1", "--rank", "8"], check=True)
    subprocess.run([sys.executable, MAKE_LORA, model, b, "--seed", "2", "--rank", "4", "--targets", "q,v,down",
                    "--type", "f16"], check=True)
    bad_start = bad_adapter_stops_serve_with_the_loaders_reason(model)
    serve_args = ["--enable-lora", "--lora-modules", f"sql-lora={a}", json.dumps({"name": "chat-lora", "path": b}),
                  "--max-loras", "2", "--max-num-seqs", "8", "--threads", "2"]
    with api_stack.Stack(args=serve_args) as stack:
        base_id = None
        alone = {}

        def models_list_the_base_and_each_adapter_with_its_parent():
            nonlocal base_id
            data = wait_for_adapters(stack, {"sql-lora", "chat-lora"})
            base_id = data[0]["id"]
            cards = {m["id"]: m for m in data}
            for name in ("sql-lora", "chat-lora"):
                assert cards[name]["parent"] == base_id and cards[name]["root"] == name, cards[name]
            assert cards[base_id]["parent"] is None, cards[base_id]
            status, body = api_stack.http_get(stack.base + "/v1/models/sql-lora")
            assert status == 200 and json.loads(body)["parent"] == base_id, (status, body)
            assert api_stack.http_get(stack.base + "/v1/models/no-such-lora")[0] == 404

        def adapter_output_differs_from_the_base():
            for m in (base_id, "sql-lora", "chat-lora"):
                alone[m] = complete(stack.base, m)
            assert alone["sql-lora"] != alone[base_id] and alone["chat-lora"] != alone[base_id], alone
            assert alone["sql-lora"] != alone["chat-lora"], alone
            status, body = post(stack.base, "/v1/chat/completions", {
                "model": "chat-lora", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                "temperature": 0})
            assert status == 200 and body["model"] == "chat-lora", (status, body)
            status, body = post(stack.base, "/v1/responses", {"model": "sql-lora", "input": "Hi",
                                                               "max_output_tokens": 4, "temperature": 0})
            assert status == 200 and body["model"] == "sql-lora", (status, body)

        def output_alone_equals_output_among_other_adapters_and_the_base():
            order = [base_id, "sql-lora", "chat-lora"] * 3
            with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
                got = list(pool.map(lambda m: (m, complete(stack.base, m)), order))
            for m, text in got:
                assert text == alone[m], (m, text, alone[m])

        def unknown_adapter_is_the_unknown_model_404():
            status, body = post(stack.base, "/v1/completions", {"model": "no-such-lora", "prompt": PROMPT})
            assert status == 404 and body["error"]["code"] == "model_not_found", (status, body)

        def nats_lora_request_runs_the_named_adapter():
            text, code, msg = asyncio.run(nats_generate(stack, "sql-lora"))
            assert code == 0 and text == alone["sql-lora"], (text, code, msg, alone["sql-lora"])
            text, code, msg = asyncio.run(nats_generate(stack, "no-such-lora"))
            assert code != 0 and "does not exist" in msg, (code, msg)

        def cli_generate_lora_runs_the_adapter_over_nats():
            llmbus = os.path.join(os.environ.get("LLMBUS_BUILD_DIR", "build"), "cmd", "llmbus")

            def gen(*extra):
                return subprocess.run([llmbus, "generate", "--raw", "--temperature", "0", "--max-tokens", "6", *extra,
                                       PROMPT], capture_output=True, text=True, timeout=120, env=stack.client_env())
            base, lora, bad = gen(), gen("--lora", "sql-lora"), gen("--lora", "no-such-lora")
            assert base.returncode == 0 and lora.returncode == 0, (base.stderr, lora.stderr)
            assert lora.stdout.strip() and lora.stdout != base.stdout, (base.stdout, lora.stdout)
            assert lora.stdout.strip()[:8] in alone["sql-lora"], (lora.stdout, alone["sql-lora"])
            assert bad.returncode != 0 and "does not exist" in bad.stderr, (bad.returncode, bad.stderr)

        def bench_lora_mix_sends_each_request_to_its_adapter():
            bench = os.path.join(os.environ.get("LLMBUS_BUILD_DIR", "build"), "cmd", "llmbus-bench")
            out = subprocess.run([bench, "serve", "--base-url", stack.base, "--lora-mix",
                                  f"sql-lora,chat-lora,{base_id}", "--num-prompts", "6", "--input-len", "16",
                                  "--output-len", "4", "--ignore-eos", "--no-memory", "--no-progress", "--json"],
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr[-2000:]
            r = json.loads(out.stdout.strip().splitlines()[-1])
            assert r["completed"] == 6 and r["failed"] == 0 and r["lora_mix"].startswith("sql-lora"), r
            bad = subprocess.run([bench, "serve", "--base-url", stack.base, "--lora-mix", "sql-lora,nope",
                                  "--num-prompts", "2", "--input-len", "8", "--output-len", "2", "--no-memory",
                                  "--no-progress", "--json"], capture_output=True, text=True, timeout=300)
            assert json.loads(bad.stdout.strip().splitlines()[-1])["failed"] == 1, bad.stdout[-2000:]

        failures = bad_start + api_stack.run_cases([
            ("models_list_the_base_and_each_adapter_with_its_parent", models_list_the_base_and_each_adapter_with_its_parent),
            ("adapter_output_differs_from_the_base", adapter_output_differs_from_the_base),
            ("output_alone_equals_output_among_other_adapters_and_the_base",
             output_alone_equals_output_among_other_adapters_and_the_base),
            ("unknown_adapter_is_the_unknown_model_404", unknown_adapter_is_the_unknown_model_404),
            ("nats_lora_request_runs_the_named_adapter", nats_lora_request_runs_the_named_adapter),
            ("cli_generate_lora_runs_the_adapter_over_nats", cli_generate_lora_runs_the_adapter_over_nats),
            ("bench_lora_mix_sends_each_request_to_its_adapter", bench_lora_mix_sends_each_request_to_its_adapter),
        ])
        if failures:
            print(f"--- serve log (tail) ---\n{stack.tail(60)}")
    return failures


if __name__ == "__main__":
    main()
