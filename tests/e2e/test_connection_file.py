"""`llmbus serve &` then `llmbus chat` works, as a user types it: serve writes a connection file
(0600, in its own 0700 directory under $XDG_RUNTIME_DIR/llmbus) saying how to reach it, and
chat (in a pty), generate, status and tokenize use the newest live one with no flag;
`--connect NAME` picks one and an unknown name says which are running; a later serve removes
the files of serves that are gone, and serve removes its own when it stops. `llmbus chat --url
http://HOST:PORT/v1` talks to the OpenAI endpoint over HTTP (as `vllm chat --url`), answers as
the bus does, and Ctrl-C stops an answer there too. Against `llmbus serve` with the real model,
greedy."""
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

from api_stack import free_port, http_get, run_cases, skip
from test_chat_pty import PROMPT, Pty, prompts

SRC = os.environ.get("LLMBUS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("LLMBUS_BUILD_DIR", os.path.join(SRC, "build"))
LLMBUS = os.path.join(BUILD, "cmd", "llmbus")
MODEL = os.environ.get("LLMBUS_MODEL", os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
QUESTION = b"What is the capital of France?"
LONG = b"Write a very long story about a dragon who learns to cook, with many chapters."
FLAGS = ["--temperature", "0", "--max-tokens", "40", "--timeout-s", "120"]


def llmbus(*args, timeout=180):
    return subprocess.run([LLMBUS] + list(args), capture_output=True, text=True, timeout=timeout)


def pty_answer(argv, question):
    """Asks `question` in a chat on a pty; returns (the answer, the chat) with the chat at its next prompt."""
    chat = Pty(argv)
    chat.read_until(lambda b: prompts(b) >= 1, 60, "first prompt")
    time.sleep(0.5)  # past libedit's switch of the terminal mode (test_chat_pty.py)
    mark = len(chat.out)
    chat.send(question + b"\r")
    out = chat.read_until(lambda b: prompts(b[mark + len(question):]) >= 1, 180, "the answer and the next prompt")
    answer = out[mark:].split(question, 1)[1].rsplit(PROMPT, 1)[0].decode(errors="replace")
    return answer.replace("\r\n", "\n").strip(), chat


def end_chat(chat):
    time.sleep(0.5)
    chat.send(b"\x04")  # Ctrl-D at an empty prompt
    assert chat.wait(30) == 0


def main():
    if not os.access(LLMBUS, os.X_OK):
        skip(f"{LLMBUS} not built")
    if not os.path.exists(MODEL):
        skip(f"model {MODEL} missing (run ops/fetch-model.sh)")
    runtime = tempfile.mkdtemp(prefix="llmbus-conn-test-")
    os.environ["XDG_RUNTIME_DIR"] = runtime  # every llmbus command of this test looks here
    conn_dir = os.path.join(runtime, "llmbus")
    os.makedirs(conn_dir, mode=0o700)
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    stale = os.path.join(conn_dir, "gone.json")
    with open(stale, "w") as f:
        json.dump({"name": "gone", "pid": dead.pid, "nats_url": "nats://127.0.0.1:1"}, f)
    port = free_port()
    log = open(os.path.join(runtime, "serve.log"), "w")
    serve = subprocess.Popen([LLMBUS, "serve", MODEL, "--port", str(port), "--served-model-name", "smol",
                              "--metrics-port", "0"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    path = os.path.join(conn_dir, "smol.json")
    try:
        deadline = time.monotonic() + 180
        while http_get(f"http://127.0.0.1:{port}/health")[0] != 200 or not os.path.exists(path):
            assert serve.poll() is None and time.monotonic() < deadline, open(log.name).read()[-3000:]
            time.sleep(0.25)
        failures = cases(path, stale, port)
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
    gone = not os.path.exists(path)
    print(("ok   " if gone else "FAIL ") + "serve_removes_its_connection_file_when_it_stops")
    sys.exit(1 if failures or not gone else 0)


def cases(path, stale, port):
    alone = {}

    def connection_file_is_private_and_says_how_to_connect():
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        with open(path) as f:
            c = json.load(f)
        assert c["nats_url"].startswith("nats://127.0.0.1:"), c
        assert c["http_url"] == f"http://127.0.0.1:{port}/v1", c
        assert c["models"] == ["smol"], c
        assert c["nats_user"] == "tenant-default" and os.path.isfile(c["nats_password_file"]), c
        assert os.path.samefile(c["model_path"], MODEL), c

    def a_later_serve_removed_the_file_of_one_that_is_gone():
        assert not os.path.exists(stale)

    def generate_status_and_tokenize_find_it_with_no_flag():
        r = llmbus("generate", *FLAGS, QUESTION.decode())
        assert r.returncode == 0 and r.stdout.strip(), (r.returncode, r.stderr)
        alone["text"] = r.stdout.strip()
        # two heartbeat intervals: the default window (2.5 s for 2 s beats) can miss one on a
        # loaded machine
        r = llmbus("status", "--json", "--wait-ms", "4500")
        assert r.returncode == 0, r.stderr
        actors = {a["actor"] for a in json.loads(r.stdout)["actors"]}
        assert "scheduler" in actors, actors
        r = llmbus("tokenize", "Hello world")
        assert r.returncode == 0 and r.stdout.split() == ["19556", "905"], (r.stdout, r.stderr)

    def chat_in_a_pty_finds_the_serve_with_no_flag():
        answer, chat = pty_answer([LLMBUS, "chat"] + FLAGS, QUESTION)
        end_chat(chat)
        assert answer == alone["text"], (answer, alone["text"])

    def chat_quick_answers_one_message_over_nats_and_http():
        with open(path) as f:
            url = json.load(f)["http_url"]
        for extra in ([], ["--url", url]):  # vllm chat -q MESSAGE
            r = llmbus("chat", *extra, *FLAGS, "-q", QUESTION.decode())
            assert r.returncode == 0 and r.stdout.strip() == alone["text"], (extra, r.stdout, r.stderr)

    def connect_picks_by_name_and_an_unknown_name_says_which_run():
        r = llmbus("generate", "--connect", "smol", *FLAGS, QUESTION.decode())
        assert r.returncode == 0 and r.stdout.strip() == alone["text"], (r.stdout, r.stderr)
        r = llmbus("generate", "--connect", "nope", "hi")
        assert r.returncode != 0 and "nope" in r.stderr and "smol" in r.stderr, r.stderr

    def chat_url_answers_over_http_as_the_bus_does():
        with open(path) as f:
            url = json.load(f)["http_url"]
        answer, chat = pty_answer([LLMBUS, "chat", "--url", url] + FLAGS, QUESTION)
        try:
            assert answer == alone["text"], (answer, alone["text"])
            mark = len(chat.out)
            time.sleep(0.5)
            chat.send(LONG + b"\r")  # Ctrl-C mid-answer cancels the HTTP request, the chat goes on

            def streams(b):
                return len(b[mark:].partition(b"chapters.")[2].partition(b"\n")[2].strip()) > 20

            chat.read_until(streams, 120, "answer text over HTTP")
            chat.send(b"\x03")
            chat.read_until(lambda b: b"[answer aborted]" in b[mark:] and prompts(b[mark:]) >= 1, 20,
                            "'[answer aborted]' and the prompt back")
        finally:
            end_chat(chat)

    return run_cases([
        ("connection_file_is_private_and_says_how_to_connect", connection_file_is_private_and_says_how_to_connect),
        ("a_later_serve_removed_the_file_of_one_that_is_gone", a_later_serve_removed_the_file_of_one_that_is_gone),
        ("generate_status_and_tokenize_find_it_with_no_flag", generate_status_and_tokenize_find_it_with_no_flag),
        ("chat_in_a_pty_finds_the_serve_with_no_flag", chat_in_a_pty_finds_the_serve_with_no_flag),
        ("chat_quick_answers_one_message_over_nats_and_http", chat_quick_answers_one_message_over_nats_and_http),
        ("connect_picks_by_name_and_an_unknown_name_says_which_run",
         connect_picks_by_name_and_an_unknown_name_says_which_run),
        ("chat_url_answers_over_http_as_the_bus_does", chat_url_answers_over_http_as_the_bus_does),
    ])


if __name__ == "__main__":
    main()
