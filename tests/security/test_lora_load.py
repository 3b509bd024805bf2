"""LoRA adapters loaded and unloaded at run time (vLLM's /v1/load_lora_adapter and
/v1/unload_lora_adapter; actors/api_server/api_server_lora_admin.h): `llmbus serve --tenants` (default,
a, b) with an API key each, `--enable-lora --lora-dir DIR` and, for comparison, the same file as
`--lora-modules same=DIR/a.gguf`.

- no key: 401; a load as tenant a answers vLLM's success text, the adapter is listed for a (not
  for b: an adapter belongs to the tenant that loaded it) and its greedy output equals the one
  the same file gives through --lora-modules; loading it twice is vLLM's 400;
- a path outside DIR, through a symbolic link, or missing: one 400 text (no existence oracle);
  an absolute path inside DIR loads;
- a bad adapter (rank over --max-lora-rank, not a GGUF): 400 with the loader's reason, nothing
  listed;
- b cannot unload a's adapter (as unknown), nobody unloads a --lora-modules one; a's unload
  answers the success text and new requests get the unknown-model 404;
- a tenant's NATS user cannot publish a LoRAUpdate (<prefix>.lora.update is the api server's);
- a worker killed after a load comes back (serve restarts it) without the adapter; the api
  server sends it again and it serves the same tokens.

usage: test_lora_load.py --pydir DIR   (LLMBUS_BUILD_DIR, LLMBUS_SOURCE_DIR from ctest)
"""
import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import api_stack  # noqa: E402
from test_security import KEY_A, KEY_B, SecureStack, http  # noqa: E402

MAKE_LORA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "make_lora.py")
NOT_FOUND = "no such adapter file under the LoRA directory"


class LoraLoadStack(SecureStack):
    def __init__(self, work, lora_dir):
        super().__init__(work)
        self.args += ["--enable-lora", "--lora-dir", lora_dir, "--lora-modules",
                      f"same={os.path.join(lora_dir, 'a.gguf')}", "--max-loras", "2", "--threads", "2"]


def call(stack, path, body, key):
    status, _, data = http("POST", stack.base + path, json.dumps(body).encode(), key=key)
    return status, data.decode(errors="replace")


def error_message(text):
    return json.loads(text)["error"]["message"]


def models(stack, key):
    status, _, data = http("GET", stack.base + "/v1/models", key=key)
    assert status == 200, (status, data)
    return {m["id"] for m in json.loads(data)["data"]}


def complete(stack, key, model):
    body = json.dumps({"model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                       "ignore_eos": True}).encode()
    status, _, data = http("POST", stack.base + "/v1/completions", body, key=key)
    out = json.loads(data or b"{}")
    return status, (out["choices"][0]["text"] if status == 200 else out)


def wait_listed(stack, key, name, listed=True, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (name in models(stack, key)) == listed:
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} {'never listed' if listed else 'still listed'} for that key")


def lora_update(name, path, tenant):
    import flatbuffers
    from llmbus import LoRAUpdate as LU
    b = flatbuffers.Builder(256)
    n, p, t = b.CreateString(name), b.CreateString(path), b.CreateString(tenant)
    LU.LoRAUpdateStart(b)
    LU.LoRAUpdateAddVersion(b, 1)
    LU.LoRAUpdateAddOp(b, 0)
    LU.LoRAUpdateAddLoraName(b, n)
    LU.LoRAUpdateAddLoraPath(b, p)
    LU.LoRAUpdateAddTenant(b, t)
    b.FinishSizePrefixed(LU.LoRAUpdateEnd(b), file_identifier=b"LLUP")
    return bytes(b.Output())


async def tenant_publishes_update(stack):
    """(errors the server reported, replies got) for a LoRAUpdate published as tenant b's user."""
    import nats
    errors = []

    async def on_error(e):
        errors.append(str(e))

    with open(os.path.join(stack.auth_dir, "tenant-b.password")) as f:
        nc = await nats.connect(stack.nats_url, user="tenant-b", password=f.read().strip(), allow_reconnect=False,
                                error_cb=on_error)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("llm.lora.update", lora_update("evil", "a.gguf", "b"), reply=inbox)
        await nc.flush()
        replies = 0
        try:
            await sub.next_msg(timeout=2)
            replies += 1
        except Exception:  # noqa: BLE001 - nats.errors.TimeoutError: nobody answered
            pass
        return errors, replies
    finally:
        await nc.close()


def run(work, model):
    lora_dir = os.path.join(work, "loras")
    os.mkdir(lora_dir)
    a = os.path.join(lora_dir, "a.gguf")
    subprocess.run([sys.executable, MAKE_LORA, model, a, "--seed", "1", "--rank", "8"], check=True)
    subprocess.run([sys.executable, MAKE_LORA, model, os.path.join(lora_dir, "big.gguf"), "--seed", "3", "--rank",
                    "32", "--targets", "q"], check=True)
    outside = os.path.join(work, "outside.gguf")
    subprocess.run([sys.executable, MAKE_LORA, model, outside, "--seed", "4", "--rank", "4", "--targets", "q"],
                   check=True)
    os.symlink(outside, os.path.join(lora_dir, "link.gguf"))
    with open(os.path.join(lora_dir, "junk.gguf"), "w") as f:
        f.write("not a gguf")
    with LoraLoadStack(work, lora_dir) as stack:
        def load_needs_a_key():
            for key in (None, "sk-wrong-key-000000000"):
                status, _ = call(stack, "/v1/load_lora_adapter", {"lora_name": "dyn", "lora_path": "a.gguf"}, key)
                assert status == 401, status

        def loaded_adapter_is_its_loaders_and_answers_as_lora_modules():
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "dyn", "lora_path": "a.gguf"}, KEY_A)
            assert (status, text) == (200, "Success: LoRA adapter 'dyn' added successfully."), (status, text)
            wait_listed(stack, KEY_A, "dyn")
            assert "dyn" not in models(stack, KEY_B)
            got, same = complete(stack, KEY_A, "dyn"), complete(stack, KEY_A, "same")
            base = complete(stack, KEY_A, stack.model_name)
            assert got[0] == 200 and got == same and got != base, (got, same, base)
            status, out = complete(stack, KEY_B, "dyn")
            assert status == 404 and out["error"]["code"] == "model_not_found", (status, out)
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "dyn", "lora_path": "a.gguf"}, KEY_A)
            assert status == 400 and error_message(text) == "The lora adapter 'dyn' has already been loaded.", text

        def paths_outside_through_links_or_missing_get_one_text():
            for path in ("../outside.gguf", outside, "link.gguf", "missing.gguf", "sub/../../outside.gguf"):
                status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": path}, KEY_A)
                assert status == 400 and error_message(text) == f"LoRA adapter 'x': '{path}': {NOT_FOUND}", (path,
                                                                                                          text)
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "abs", "lora_path": a}, KEY_A)
            assert status == 200, (status, text)
            status, text = call(stack, "/v1/unload_lora_adapter", {"lora_name": "abs"}, KEY_A)
            assert status == 200, (status, text)
            assert "x" not in models(stack, KEY_A)

        def bad_adapters_are_refused_with_the_loaders_reason():
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "big", "lora_path": "big.gguf"}, KEY_A)
            assert status == 400 and "rank 32" in error_message(text), (status, text)
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "junk", "lora_path": "junk.gguf"},
                                KEY_A)
            assert status == 400 and "junk.gguf" in error_message(text), (status, text)
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "big"}, KEY_A)
            assert status == 400 and "must be provided" in error_message(text), (status, text)
            assert not {"big", "junk"} & models(stack, KEY_A)

        def only_the_owner_unloads_and_new_requests_then_get_404():
            status, text = call(stack, "/v1/unload_lora_adapter", {"lora_name": "dyn"}, KEY_B)
            assert status == 400 and error_message(text) == "The lora adapter 'dyn' cannot be found.", text
            status, text = call(stack, "/v1/unload_lora_adapter", {"lora_name": "same"}, KEY_A)
            assert status == 400 and "--lora-modules" in error_message(text), text
            status, text = call(stack, "/v1/unload_lora_adapter", {"lora_name": "dyn"}, KEY_A)
            assert (status, text) == (200, "Success: LoRA adapter 'dyn' removed successfully."), (status, text)
            wait_listed(stack, KEY_A, "dyn", listed=False)
            status, out = complete(stack, KEY_A, "dyn")
            assert status == 404 and out["error"]["code"] == "model_not_found", (status, out)
            status, text = call(stack, "/v1/unload_lora_adapter", {"lora_name": "dyn"}, KEY_A)
            assert status == 400 and error_message(text) == "The lora adapter 'dyn' cannot be found.", text

        def a_tenant_cannot_publish_lora_updates_over_nats():
            errors, replies = asyncio.run(tenant_publishes_update(stack))
            assert replies == 0 and any("ermission" in e for e in errors), (errors, replies)
            time.sleep(1)
            assert "evil" not in models(stack, KEY_B) and "evil" not in models(stack, KEY_A)

        def a_restarted_worker_gets_the_adapter_back():
            status, text = call(stack, "/v1/load_lora_adapter", {"lora_name": "back", "lora_path": "a.gguf"}, KEY_A)
            assert status == 200, (status, text)
            want = complete(stack, KEY_A, "same")
            assert complete(stack, KEY_A, "back") == want
            pid = api_stack.child_pid(stack.proc.pid, "llmbus-gpu-worker")
            assert pid, "no gpu worker child of serve"
            os.kill(pid, signal.SIGKILL)
            deadline, got = time.monotonic() + 90, None
            while time.monotonic() < deadline:
                new = api_stack.child_pid(stack.proc.pid, "llmbus-gpu-worker")
                if new and new != pid:
                    got = complete(stack, KEY_A, "back")
                    if got == want:
                        break
                time.sleep(0.5)
            assert got == want, (got, want)
            assert "event=lora_resend name=back" in stack.tail(400), "the api server sent no load again"

        failures = api_stack.run_cases([
            ("load_needs_a_key", load_needs_a_key),
            ("loaded_adapter_is_its_loaders_and_answers_as_lora_modules",
             loaded_adapter_is_its_loaders_and_answers_as_lora_modules),
            ("paths_outside_through_links_or_missing_get_one_text", paths_outside_through_links_or_missing_get_one_text),
            ("bad_adapters_are_refused_with_the_loaders_reason", bad_adapters_are_refused_with_the_loaders_reason),
            ("only_the_owner_unloads_and_new_requests_then_get_404", only_the_owner_unloads_and_new_requests_then_get_404),
            ("a_tenant_cannot_publish_lora_updates_over_nats", a_tenant_cannot_publish_lora_updates_over_nats),
            ("a_restarted_worker_gets_the_adapter_back", a_restarted_worker_gets_the_adapter_back),
        ])
        if failures:
            print(f"--- serve log (tail) ---\n{stack.tail(80)}")
    return failures


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
    model = os.environ.get("LLMBUS_MODEL") or os.path.join(os.environ.get("LLMBUS_SOURCE_DIR", "."),
                                                           "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        api_stack.skip(f"model {model} missing (run ops/fetch-model.sh)")
    with tempfile.TemporaryDirectory(prefix="llmbus-lora-load-") as work:
        failures = run(work, model)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
