"""Every llmbus program parses its flags one way (cmd/flags/flags.h): `--help` prints the flags and
exits 0, an unknown flag is a usage error (exit 2) naming it, `--flag=value` and `--flag value`
both work (checked with one valued flag each, --help last so nothing starts), a flag without its
value is a usage error, and `--` ends the flags. No model is loaded: every command stops at
--help or at its usage error."""
import os
import subprocess
import sys
import tempfile

from api_stack import run_cases, skip

SRC = os.environ.get("LLMBUS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("LLMBUS_BUILD_DIR", os.path.join(SRC, "build"))

# (program and subcommand, one flag that takes a value, a value for it)
COMMANDS = [
    (["llmbus", "serve"], "--max-num-seqs", "4"),
    (["llmbus", "run"], "--max-tokens", "4"),
    (["llmbus", "generate"], "--temperature", "0.5"),
    (["llmbus", "generate", "--inproc"], "--threads", "1"),
    (["llmbus", "chat"], "--timeout-s", "5"),
    (["llmbus", "tokenize"], "--model", "m.gguf"),
    (["llmbus", "status"], "--wait-ms", "10"),
    (["llmbus", "perplexity"], "--ctx", "64"),
    (["llmbus-input-processor"], "--max-model-len", "64"),
    (["llmbus-scheduler"], "--max-num-seqs", "4"),
    (["llmbus-kv-manager"], "--block-size", "16"),
    (["llmbus-gpu-worker"], "--threads", "1"),
    (["llmbus-output-processor"], "--heartbeat-ms", "100"),
    (["llmbus-api-server"], "--http", "127.0.0.1:0"),
    (["llmbus-encoder-cache"], "--encoder-cache-size", "16"),
    (["llmbus-bench", "serve"], "--num-prompts", "3"),
    (["llmbus-bench", "engine"], "--tokens", "8"),
    (["llmbus-bench", "hash"], "--iterations", "10"),
    (["llmbus-kernel-bench"], "--runs", "1"),
    (["llmbus-clip-bench"], "--runs", "1"),
]


def run(cmd, *args):
    argv = [os.path.join(BUILD, "cmd", cmd[0])] + cmd[1:] + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def main():
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="llmbus-flags-test-")  # no running serve is found
    missing = [c[0] for c, _, _ in COMMANDS if not os.access(os.path.join(BUILD, "cmd", c[0]), os.X_OK)]
    if missing:
        skip(f"not built: {missing}")

    def each(check):
        def fn():
            bad = []
            for cmd, flag, value in COMMANDS:
                why = check(cmd, flag, value)
                if why:
                    bad.append(f"{' '.join(cmd)}: {why}")
            assert not bad, "\n".join(bad)
        return fn

    def help_exits_0(cmd, flag, value):
        r = run(cmd, "--help")
        if r.returncode != 0 or "--help" not in r.stdout or flag not in r.stdout:
            return f"--help gave {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}"

    def unknown_flag_exits_2_naming_it(cmd, flag, value):
        r = run(cmd, "--no-such-flag-here", "--help")
        if r.returncode != 2 or "no-such-flag-here" not in r.stderr:
            return f"gave {r.returncode}: {r.stderr[-300:]}"

    def both_value_forms_are_taken(cmd, flag, value):
        for args in ([f"{flag}={value}", "--help"], [flag, value, "--help"]):
            r = run(cmd, *args)
            if r.returncode != 0:
                return f"{args} gave {r.returncode}: {r.stderr[-300:]}"

    def a_missing_value_exits_2(cmd, flag, value):
        r = run(cmd, flag)
        if r.returncode != 2 or "needs a value" not in r.stderr:
            return f"gave {r.returncode}: {r.stderr[-300:]}"

    def double_dash_ends_the_flags(cmd, flag, value):
        before = ["--model", "/nonexistent.gguf"] if cmd[-1] == "run" else []  # nothing may start
        r = run(cmd, *before, "--", "--help")  # after --, "--help" is an argument, not the flag
        if r.returncode == 0 and "--help" in r.stdout and "usage" in r.stdout:
            return "--help after -- printed the help"

    sys.exit(1 if run_cases([
        ("help_exits_0", each(help_exits_0)),
        ("unknown_flag_exits_2_naming_it", each(unknown_flag_exits_2_naming_it)),
        ("both_value_forms_are_taken", each(both_value_forms_are_taken)),
        ("a_missing_value_exits_2", each(a_missing_value_exits_2)),
        ("double_dash_ends_the_flags", each(double_dash_ends_the_flags)),
    ]) else 0)


if __name__ == "__main__":
    main()
