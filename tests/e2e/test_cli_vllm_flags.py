"""`llmbus serve` takes a vLLM user's command line (and llama-server's short flags) on the first try.

Without a model loaded: every flag `serve --help` lists is accepted and reaches an actor that
accepts it in turn (`serve --dry-run` prints each actor's command line; each actor then parses
it, `--help` last); vLLM's and llama-server's spellings, `--flag=value`, `--max_num_seqs`
(underscores) and a `--config` YAML file give the same command lines as the plain flags; bad
flags are usage errors (exit 2). With the real model: `llmbus serve MODEL --host --port
--served-model-name a b --api-key K` (the model positional, as `vllm serve MODEL`) answers the
openai client under both names, refuses a wrong key (401) and another model (404), refuses
tools without --enable-auto-tool-choice as vLLM does (400), and `llmbus generate -- "-..."`
(found through the connection file) answers a prompt that starts with '-'; with `--seed 7` the
first unseeded request at temperature 1 gets the same answer again from a restarted serve. A serve whose
nats-server cannot start names its log, and the file is there to read.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from api_stack import free_port, http_get, run_cases, skip

SRC = os.environ.get("LLMBUS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("LLMBUS_BUILD_DIR", os.path.join(SRC, "build"))
LLMBUS = os.path.join(BUILD, "cmd", "llmbus")
MODEL = os.environ.get("LLMBUS_MODEL", os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))

# The brief's list: vLLM's `vllm serve` flags where the concept is the same, llama-server's short ones.
VLLM_FLAGS = ["--host", "--port", "--served-model-name", "--api-key", "--max-num-seqs", "--max-num-batched-tokens",
              "--max-model-len", "--seed", "--enable-prefix-caching", "--no-enable-prefix-caching",
              "--num-gpu-blocks-override", "--gpu-memory-utilization", "--scheduling-policy",
              "--enable-auto-tool-choice", "--tool-call-parser", "--chat-template", "--otlp-traces-endpoint",
              "--data-parallel-size", "--config"]
LLAMA_SERVER_FLAGS = ["-m", "-c", "-t", "-np"]

# A value each engine flag takes (anything else: 7).
VALUES = {"device": "cpu", "numerics": "packed", "policy": "priority", "router": "random", "chat-template": "chatml",
          "log-level": "info", "speculative-config": '{"method":"ngram","num_speculative_tokens":2}',
          "prefix": "llmx", "engine-id": "e7", "otlp-endpoint": "http://127.0.0.1:4318", "api-keys": "/tmp/keys",
          "mmproj": "/tmp/x.gguf", "packed-cache-dir": "/tmp", "allowed-origins": "*", "allowed-methods": "*",
          "allowed-headers": "*", "allowed-local-media-path": "/tmp", "tool-call-parser": "hermes",
          "gpu-memory-utilization": "0.5", "trace-sample-ratio": "0.5", "lora-modules": "sql-lora=/tmp/sql.gguf", "lora-dir": "/tmp"}
# Flags that need another to be accepted (vLLM's rule: adapters only with --enable-lora).
NEEDS = {"lora-modules": ["--enable-lora"], "lora-dir": ["--enable-lora"]}


def run(args, env=None, timeout=60):
    return subprocess.run([LLMBUS] + args, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def dry_run(args, env=None):
    """{actor name: [argv]} of `llmbus serve MODEL --dry-run ARGS` (--dry-run first: a flag that
    lacks its value must not take it)."""
    r = run(["serve", MODEL, "--dry-run"] + args, env)
    assert r.returncode == 0, (args, r.stderr)
    out = {}
    for line in r.stdout.splitlines():
        name, _, cmd = line.partition(": ")
        out[name] = cmd.split(" ")
    return out


def engine_flags(help_text):
    """[(name, takes_value)] of the "engine flags" section of serve --help (a value: its metavar)."""
    section = help_text.split("engine flags", 1)[1].split("\ndevelopment:", 1)[0]
    flags = []
    for line in section.splitlines():
        m = re.match(r"^  (?:-\w, )?--([a-z0-9-]+)(?:, [^ ,]+)*( [A-Z]+)?", line)
        if m:
            flags.append((m.group(1), bool(m.group(2))))
    return flags


def main():
    if not os.access(LLMBUS, os.X_OK):
        skip(f"{LLMBUS} not built")
    if not os.path.exists(MODEL):
        skip(f"model {MODEL} missing (run ops/fetch-model.sh)")
    help_text = run(["serve", "--help"]).stdout
    tmp = tempfile.mkdtemp(prefix="llmbus-cli-test-")

    def help_lists_vllm_and_llama_server_flags():
        missing = [f for f in VLLM_FLAGS + LLAMA_SERVER_FLAGS if not re.search(rf"(^|[ ,]){re.escape(f)}[ ,\n]", help_text, re.M)]
        assert not missing, f"serve --help lacks {missing}"

    def every_engine_flag_reaches_an_actor_that_accepts_it():
        flags = engine_flags(help_text)
        assert len(flags) > 30, flags
        for name, takes_value in flags:
            value = VALUES.get(name, "7")
            actors = dry_run(NEEDS.get(name, []) + [f"--{name}"] + ([value] if takes_value else []))
            takers = [a for a, argv in actors.items() if f"--{name}" in argv and
                      (not takes_value or argv[argv.index(f"--{name}") + 1] == value)]
            assert takers, f"--{name} reached no actor"
            for a in takers:  # the actor parses what serve gives it (--help last: no start)
                r = subprocess.run(actors[a] + ["--help"], capture_output=True, text=True, timeout=30)
                assert r.returncode == 0, f"{a} refused serve's --{name}: {r.stderr}"

    def vllm_and_llama_server_spellings_give_the_same_command_lines():
        plain = dry_run(["--max-num-seqs", "3", "--max-model-len", "512", "--threads", "1", "--num-blocks", "64",
                         "--policy", "priority", "--otlp-endpoint", "http://h:4318", "--no-prefix-caching",
                         "--engines", "2", "--served-model-name", "a", "b", "--http", "127.0.0.1:8123"])
        for spelling in (["-np", "3", "-c", "512", "-t", "1", "--num-gpu-blocks-override", "64", "--scheduling-policy",
                          "priority", "--otlp-traces-endpoint", "http://h:4318", "--no-enable-prefix-caching",
                          "--data-parallel-size", "2", "-a", "a", "b", "--host", "127.0.0.1", "--port", "8123"],
                         ["--max-num-seqs=3", "--max_model_len=512", "-t1", "--parallel=3", "--num-blocks=64",
                          "--policy=priority", "--otlp-endpoint=http://h:4318", "--no-prefix-caching", "-dp", "2",
                          "--served-model-name=a", "--served-model-name", "b", "--port=8123"]):
            assert dry_run(spelling) == plain, spelling
        assert plain["api-server"][plain["api-server"].index("--http") + 1] == "127.0.0.1:8123"
        assert "scheduler-1" in plain, "two engines"

    def config_yaml_gives_the_flags_and_the_command_line_wins():
        cfg = os.path.join(tmp, "serve.yaml")
        with open(cfg, "w") as f:
            f.write("max-num-seqs: 3\nmax_model_len: 512\nenable-prefix-caching: false\nserved-model-name: [a, b]\n"
                    "port: 8123\nspeculative-config: {method: ngram, num_speculative_tokens: 2}\nenable-auto-tool-choice: true\n")
        want = dry_run(["--max-num-seqs", "4", "--max-model-len", "512", "--no-prefix-caching", "--served-model-name",
                        "a", "b", "--port", "8123", "--speculative-config",
                        '{"method":"ngram","num_speculative_tokens":2}', "--enable-auto-tool-choice"])
        assert dry_run(["--config", cfg, "--max-num-seqs", "4"]) == want
        bad = os.path.join(tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("max-num-seq: 3\n")
        r = run(["serve", "--config", bad])
        assert r.returncode == 2 and "max-num-seq" in r.stderr, r.stderr

    def api_key_from_the_environment_goes_in_a_keys_file_not_argv():
        actors = dry_run([], env={"LLMBUS_API_KEY": "sk-env-0123456789"})
        api = " ".join(actors["api-server"])
        assert "--api-keys" in api and "sk-env" not in api, api
        assert all("sk-env" not in " ".join(argv) for argv in actors.values())

    def bad_flags_are_usage_errors():
        for args, says in ((["--bogus"], "bogus"), (["--max-num-seqs", "x"], "not an integer"), ([MODEL, "other"], "other"), (["--max-num-seqs"], "needs a value"),
                           (["--port", "x"], "not an integer"), (["--enable-prefix-caching=yes"], "takes no value"),
                           (["--api-key", "short"], "8"), ([MODEL, "--model", MODEL], "once")):
            r = run(["serve", "--dry-run"] + args, env={"XDG_RUNTIME_DIR": tmp})
            assert r.returncode == 2 and says in r.stderr, (args, r.returncode, r.stderr)

    def lora_modules_reach_the_worker_and_need_enable_lora():
        actors = dry_run(["--enable-lora", "--lora-modules", "sql=/tmp/sql.gguf", '{"name":"chat","path":"/tmp/c.gguf"}',
                          "--max-loras", "2", "--max-lora-rank", "32"])
        w, s = " ".join(actors["gpu-worker"]), " ".join(actors["scheduler"])
        assert "--lora-modules sql=/tmp/sql.gguf --lora-modules" in w and "--max-lora-rank 32" in w, w
        assert "--enable-lora" in s and "--max-loras 2" in s and "lora-modules" not in s, s
        for args, says in ((["--lora-modules", "a=/tmp/a.gguf"], "needs --enable-lora"),
                           (["--enable-lora", "--lora-modules", "../a=/tmp/a.gguf"], "model name"),
                           (["--enable-lora", "--lora-modules", "a=/tmp/x", "a=/tmp/y"], "given twice")):
            r = run(["serve", MODEL, "--dry-run"] + args, env={"XDG_RUNTIME_DIR": tmp})
            assert r.returncode != 0 and says in r.stderr, (args, r.returncode, r.stderr)

    def a_failed_start_names_a_log_file_that_is_still_there():
        import socket
        with socket.socket() as busy:  # nats-server cannot take this monitoring port: it exits at start
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            r = run(["serve", MODEL, "--nats-monitor-port", str(busy.getsockname()[1]), "--metrics-port", "0",
                     "--port", "0"], env={"TMPDIR": tmp, "XDG_RUNTIME_DIR": tmp}, timeout=120)
        assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
        m = re.search(r"its log: (\S+)", r.stderr)
        assert m, r.stderr[-2000:]
        assert os.path.isfile(m.group(1)), f"{m.group(1)} is gone"
        with open(m.group(1)) as f:
            assert "address already in use" in f.read().lower()

    failures = run_cases([
        ("a_failed_start_names_a_log_file_that_is_still_there", a_failed_start_names_a_log_file_that_is_still_there),
        ("help_lists_vllm_and_llama_server_flags", help_lists_vllm_and_llama_server_flags),
        ("every_engine_flag_reaches_an_actor_that_accepts_it", every_engine_flag_reaches_an_actor_that_accepts_it),
        ("vllm_and_llama_server_spellings_give_the_same_command_lines",
         vllm_and_llama_server_spellings_give_the_same_command_lines),
        ("config_yaml_gives_the_flags_and_the_command_line_wins", config_yaml_gives_the_flags_and_the_command_line_wins),
        ("api_key_from_the_environment_goes_in_a_keys_file_not_argv",
         api_key_from_the_environment_goes_in_a_keys_file_not_argv),
        ("bad_flags_are_usage_errors", bad_flags_are_usage_errors),
        ("lora_modules_reach_the_worker_and_need_enable_lora", lora_modules_reach_the_worker_and_need_enable_lora),
    ])
    failures += live_stack_cases(tmp)
    sys.exit(1 if failures else 0)


KEY = "sk-cli-test-0123456789"


class Serve:
    """`llmbus serve MODEL --host --port --served-model-name a b --api-key K --seed 7`, ready (its
    /health answers 200 with the key) when the `with` block starts, stopped with SIGTERM at its end."""

    def __init__(self, tmp):
        self.port, self.tmp = free_port(), tmp
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "XDG_RUNTIME_DIR": tmp}  # this test's own connection directory

    def __enter__(self):
        import urllib.request
        self.log = open(os.path.join(self.tmp, f"serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen([LLMBUS, "serve", MODEL, "--host", "127.0.0.1", "--port", str(self.port),
                                      "--served-model-name", "a", "b", "--api-key", KEY, "--seed", "7",
                                      "--metrics-port", "0"], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        deadline = time.monotonic() + 180
        try:
            while http_get(self.base + "/health")[0] != 401:  # up, and every route wants the key
                assert self.proc.poll() is None and time.monotonic() < deadline, open(self.log.name).read()[-3000:]
                time.sleep(0.25)
            while True:
                req = urllib.request.Request(self.base + "/health", headers={"Authorization": f"Bearer {KEY}"})
                try:
                    if urllib.request.urlopen(req, timeout=5).status == 200:
                        return self
                except OSError:
                    pass
                assert self.proc.poll() is None and time.monotonic() < deadline, open(self.log.name).read()[-3000:]
                time.sleep(0.25)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return False


def first_sampled_answer(client):
    """The answer to the first request a server gets, unseeded at temperature 1 (its seed is the
    first the --seed generator draws)."""
    r = client.completions.create(model="a", prompt="Once upon a time", max_tokens=24, temperature=1.0)
    return r.choices[0].text


def live_stack_cases(tmp):
    """`llmbus serve MODEL --host --port --served-model-name a b --api-key K` and the openai client."""
    import openai
    seeded = {}
    with Serve(tmp) as st:
        base, env, key = st.base, st.env, KEY
        client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
        seeded["first"] = first_sampled_answer(client)

        def both_served_names_are_listed_and_answer():
            assert [m.id for m in client.models.list().data] == ["a", "b"]
            for name in ("a", "b"):
                r = client.completions.create(model=name, prompt="The capital of France is", max_tokens=4, temperature=0)
                assert r.model == name and r.choices[0].text, r

        def a_wrong_key_is_401_and_another_model_404():
            bad = openai.OpenAI(base_url=base + "/v1", api_key="sk-wrong-0123456789", max_retries=0)
            try:
                bad.models.list()
                raise AssertionError("a wrong key was accepted")
            except openai.AuthenticationError:
                pass
            try:
                client.completions.create(model="c", prompt="x", max_tokens=1)
                raise AssertionError("model c was accepted")
            except openai.NotFoundError:
                pass

        def tools_without_enable_auto_tool_choice_are_refused_as_vllm_does():
            tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
            try:
                client.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}], tools=tools)
                raise AssertionError("tool_choice auto without --enable-auto-tool-choice was accepted")
            except openai.BadRequestError as e:
                assert "--enable-auto-tool-choice" in str(e), e

        def generate_takes_a_prompt_starting_with_a_dash_after_double_dash():
            r = subprocess.run([LLMBUS, "generate", "--temperature", "0", "--max-tokens", "8", "--",
                                "-5 plus 3 is"], capture_output=True, text=True, timeout=120, env=env)
            assert r.returncode == 0 and r.stdout.strip(), (r.returncode, r.stdout, r.stderr)
            r = subprocess.run([LLMBUS, "generate", "-5 plus 3 is"], capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 2, "without -- a leading '-' is a flag"

        failures = run_cases([
            ("both_served_names_are_listed_and_answer", both_served_names_are_listed_and_answer),
            ("a_wrong_key_is_401_and_another_model_404", a_wrong_key_is_401_and_another_model_404),
            ("tools_without_enable_auto_tool_choice_are_refused_as_vllm_does",
             tools_without_enable_auto_tool_choice_are_refused_as_vllm_does),
            ("generate_takes_a_prompt_starting_with_a_dash_after_double_dash",
             generate_takes_a_prompt_starting_with_a_dash_after_double_dash),
        ])

    def serve_seed_makes_unseeded_sampling_repeat_after_a_restart():
        with Serve(tmp) as again:
            client = openai.OpenAI(base_url=again.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
            assert first_sampled_answer(client) == seeded["first"], "the same first request gave another answer"

    return failures + run_cases([
        ("serve_seed_makes_unseeded_sampling_repeat_after_a_restart",
         serve_seed_makes_unseeded_sampling_repeat_after_a_restart)])


if __name__ == "__main__":
    main()
