"""LoRA adapters restricted to tenants (docs/design.md §7; the tenants file's `loras=a,b`):
`llmbus serve --tenants` (default, a loras=sql-lora, b) with an API key each and two adapters,
sql-lora (listed for a) and open-lora (listed for none). As tenant b, over HTTP and over NATS,
sql-lora must be exactly an unknown model: the same 404 body as a name nobody serves, absent
from /v1/models, the NATS error an unknown adapter gets; tenant a and everyone's open-lora work.

usage: test_lora_tenants.py --pydir DIR   (LLMBUS_BUILD_DIR, LLMBUS_SOURCE_DIR from ctest)
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import api_stack  # noqa: E402
import test_lora_serve  # noqa: E402  (generate_request with a lora_request)
from test_security import KEY_A, KEY_B, SecureStack, http  # noqa: E402

MAKE_LORA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "make_lora.py")


class LoraTenantsStack(SecureStack):
    def __init__(self, work, adapters):
        super().__init__(work)
        with open(os.path.join(work, "tenants"), "w") as f:  # replaces SecureStack's
            f.write("default\na loras=sql-lora\nb\n")
        self.args += ["--enable-lora", "--lora-modules", f"sql-lora={adapters[0]}", f"open-lora={adapters[1]}",
                      "--max-loras", "2", "--threads", "2"]


def completion(stack, key, model):
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode()
    status, _, data = http("POST", stack.base + "/v1/completions", body, key=key)
    return status, json.loads(data or b"{}")


def models(stack, key):
    status, _, data = http("GET", stack.base + "/v1/models", key=key)
    assert status == 200, (status, data)
    return {m["id"] for m in json.loads(data)["data"]}


async def nats_error(stack, user, lora):
    """The error message (or "" on success) of a request naming `lora` as NATS user `user`."""
    import nats
    from llmbus import RequestOutput as RO
    with open(os.path.join(stack.auth_dir, f"{user}.password")) as f:
        nc = await nats.connect(stack.nats_url, user=user, password=f.read().strip(), allow_reconnect=False)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        tenant = user.split("-", 1)[1]
        await nc.publish(f"llm.generate.{tenant}", test_lora_serve.generate_request(f"t-{lora}", lora), reply=inbox)
        while True:
            ro = RO.RequestOutput.GetRootAs((await sub.next_msg(timeout=120)).data, 4)
            if ro.Error() is not None:
                return ro.Error().Message().decode()
            if ro.Finished():
                return ""
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
    model = os.environ.get("LLMBUS_MODEL") or os.path.join(os.environ.get("LLMBUS_SOURCE_DIR", "."),
                                                           "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        api_stack.skip(f"model {model} missing (run ops/fetch-model.sh)")
    with tempfile.TemporaryDirectory(prefix="llmbus-lora-tenants-") as work:
        adapters = [os.path.join(work, "sql.gguf"), os.path.join(work, "open.gguf")]
        for i, path in enumerate(adapters):
            subprocess.run([sys.executable, MAKE_LORA, model, path, "--seed", str(i + 1), "--rank", "4"], check=True)
        with LoraTenantsStack(work, adapters) as stack:
            deadline = time.monotonic() + 30
            while "open-lora" not in models(stack, KEY_B) and time.monotonic() < deadline:
                time.sleep(0.25)

            def another_tenants_adapter_is_hidden_from_models():
                assert {"sql-lora", "open-lora"} <= models(stack, KEY_A)
                seen = models(stack, KEY_B)
                assert "open-lora" in seen and "sql-lora" not in seen, seen
                assert http("GET", stack.base + "/v1/models/sql-lora", key=KEY_A)[0] == 200
                assert http("GET", stack.base + "/v1/models/sql-lora", key=KEY_B)[0] == 404

            def another_tenants_adapter_is_the_unknown_model_404():
                assert completion(stack, KEY_A, "sql-lora")[0] == 200
                assert completion(stack, KEY_B, "open-lora")[0] == 200
                status, body = completion(stack, KEY_B, "sql-lora")
                status_unknown, unknown = completion(stack, KEY_B, "xyz-lora")
                assert status == status_unknown == 404, (status, body)
                assert body["error"]["message"].replace("sql-lora", "X") == \
                    unknown["error"]["message"].replace("xyz-lora", "X"), (body, unknown)
                assert body["error"]["code"] == unknown["error"]["code"] == "model_not_found"

            def over_nats_another_tenants_adapter_is_unknown_too():
                assert asyncio.run(nats_error(stack, "tenant-a", "sql-lora")) == ""
                msg = asyncio.run(nats_error(stack, "tenant-b", "sql-lora"))
                unknown = asyncio.run(nats_error(stack, "tenant-b", "xyz-lora"))
                assert msg and msg.replace("sql-lora", "X") == unknown.replace("xyz-lora", "X"), (msg, unknown)

            failures = api_stack.run_cases([
                ("another_tenants_adapter_is_hidden_from_models", another_tenants_adapter_is_hidden_from_models),
                ("another_tenants_adapter_is_the_unknown_model_404", another_tenants_adapter_is_the_unknown_model_404),
                ("over_nats_another_tenants_adapter_is_unknown_too", over_nats_another_tenants_adapter_is_unknown_too),
            ])
            if failures:
                print(f"--- serve log (tail) ---\n{stack.tail(60)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
