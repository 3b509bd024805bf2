"""Long commands show progress on a terminal and only there: `llmbus perplexity` with stderr
on a pty draws a progress line with an ETA (stdout elsewhere) or prints llama-perplexity's
"seconds per chunk - ETA" line (stdout on the terminal too); with stderr on a pipe it prints
neither.

usage: test_progress_pty.py LLMBUS MODEL       Exit codes: 0 pass, 1 fail, 77 skipped.
"""
import os
import pty
import select
import subprocess
import sys
import tempfile

SKIP = 77


def run(argv, stdout_tty, stderr_tty):
    """(stdout text, stderr text) of argv with each stream on a pty or a pipe."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=slave if stdout_tty else subprocess.PIPE,
                            stderr=slave if stderr_tty else subprocess.PIPE)
    os.close(slave)
    tty = b""
    while True:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            tty += chunk
        elif proc.poll() is not None:
            break
    out, err = proc.communicate(timeout=600)
    os.close(master)
    tty = tty.decode(errors="replace")
    return (tty if stdout_tty else out.decode()), (tty if stderr_tty else err.decode()), proc.returncode


def main():
    llmbus, model = sys.argv[1], sys.argv[2]
    if not os.access(llmbus, os.X_OK) or not os.path.exists(model):
        print(f"SKIP: {llmbus} or {model} missing")
        return SKIP
    text = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    with open("/usr/share/common-licenses/GPL-3") if os.path.exists("/usr/share/common-licenses/GPL-3") else \
            open(__file__) as src:
        text.write(src.read())
    text.close()
    # small chunks, and the line drawn from the start (LLMBUS_PROGRESS_AFTER_MS=0): the test
    # does not depend on how fast this machine is
    os.environ["LLMBUS_PROGRESS_AFTER_MS"] = "0"
    argv = [llmbus, "perplexity", "--model", model, "--file", text.name, "--ctx", "32", "--chunks", "12"]
    failures = 0

    _, err, rc = run(argv + ["--json"], stdout_tty=False, stderr_tty=True)
    ok = rc == 0 and "perplexity" in err and "ETA" in err and "/12 chunks" in err and "\r" in err
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} progress line on a terminal (stdout a pipe){'' if ok else ': ' + repr(err[-400:])}")

    out, _, rc = run(argv, stdout_tty=True, stderr_tty=True)
    ok = rc == 0 and "seconds per chunk - ETA" in out and "[12]" in out
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} llama-perplexity's ETA line when the values go to the terminal"
          f"{'' if ok else ': ' + repr(out[-400:])}")

    out, err, rc = run(argv, stdout_tty=False, stderr_tty=False)
    ok = rc == 0 and "ETA" not in err and "ETA" not in out and "[12]" in out
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} no progress in pipes and files{'' if ok else ': ' + repr(err[-400:])}")
    os.unlink(text.name)
    print(f"{3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
