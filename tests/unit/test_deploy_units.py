"""The systemd units of ops/deploy/ stay deployable:
  1. `systemd-analyze verify` accepts every unit (instances as @0), with the program paths
     pointed at this build (ExecStart=llmbus-* -> <build>/cmd/llmbus-*);
  2. every actor's ExecStart, with llmbus.env's values substituted the way systemd does
     (${VAR} one word, $VAR split on spaces, %i / %H specifiers), is accepted by the actor's
     own flag parser: the command with --help appended exits 0 (an unknown or renamed flag
     exits 2 and fails this test).
argv: <source dir> <build dir>. Skips (77) without systemd-analyze or the actor binaries."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def parse_env(path):
    env = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def expand(cmd, env, instance, host):
    """systemd's ExecStart expansion: specifiers, then ${VAR} as one word, $VAR split."""
    cmd = cmd.replace("%i", instance).replace("%H", host)
    words = []
    for word in shlex.split(cmd):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            words += env.get(m.group(1), "").split()
            continue
        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda g: env.get(g.group(1), ""), word))
    return words


def main():
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    deploy = os.path.join(src, "ops", "deploy")
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("SKIP: systemd-analyze not installed (ops/install-deps.sh)")
        return SKIP
    units = sorted(f for f in os.listdir(deploy) if f.endswith((".service", ".target")))
    env = parse_env(os.path.join(deploy, "llmbus.env"))
    env["LLMBUS_MODEL"] = os.environ.get("LLMBUS_MODEL", env["LLMBUS_MODEL"])
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for unit in units:
            text = open(os.path.join(deploy, unit)).read()
            # ExecStart names the binary alone: systemd finds it in /usr/local/bin or /usr/bin
            text = re.sub(r"(?<=ExecStart=)(llmbus-[a-z-]+)", lambda m: os.path.join(build, "cmd", m.group(1)), text)
            inst = unit.replace("@.", "@0.")
            with open(os.path.join(tmp, inst), "w") as f:
                f.write(text)
            names.append(inst)
            for line in text.splitlines():
                if not line.startswith("ExecStart=") or "llmbus-" not in line:
                    continue
                argv = expand(line[len("ExecStart="):], env, "0", "host")
                if not os.access(argv[0], os.X_OK):
                    print(f"SKIP: {argv[0]} not built")
                    return SKIP
                r = subprocess.run(argv + ["--help"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                ok = r.returncode == 0
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {inst}: {os.path.basename(argv[0])} takes its flags"
                      + ("" if ok else f" (exit {r.returncode}: {r.stderr.strip().splitlines()[0]})"))
        r = subprocess.run([analyze, "verify"] + names, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        # verify also reports on units we do not ship (network-online.target wants); keep ours
        ours = [l for l in r.stdout.splitlines() if any(n.split("@")[0].split(".")[0] in l for n in names)]
        ok = r.returncode == 0 and not ours
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} systemd-analyze verify of {len(names)} units" +
              ("" if ok else ":\n" + r.stdout))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
