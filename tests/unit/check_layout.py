#!/usr/bin/env python3
"""Checks every #include of the project against the layout of docs/design.md §1.

    check_layout.py [ROOT]        ROOT: the checkout (default: this file's ../..)

Reads each .c/.h/.cc/.cu/.cuh/.inc file under ROOT (build trees and hidden folders skipped)
and prints one line per violation, `file:line: message`, then exits 1; exits 0 when there
is none. What it enforces:

  - which top-level folder may include which (ALLOWED below): bus/, schemas/, model/ and
    kernels/ include nothing of each other except model -> kernels; every folder may
    include base/ and base/ includes only itself; an actor includes no other actor;
    nothing but tests/ includes tests/, nothing but cmd/ and tests/ includes cmd/;
  - inside cmd/ (cmd/README.md): cmd/ itself holds only mains, one .c defining main() per
    binary; its subfolders include no other cmd/ subfolder but as CMD_ALLOWED says (the
    client runs the supervisor's stack for `llmbus run`);
  - only bus/ includes nats.h, only schemas/ includes FlatBuffers headers (flatbuffers/...
    and the generated *_generated.h), only kernels/cuda/ includes CUDA headers;
  - a source file lives in a folder of the layout;
  - no include cycle between files;
  - no NATS subject formatted by hand outside bus/: every subject comes from a builder of
    bus/subject.h (SUBJECT_WORDS and subject_problems below say what looks like one).

Known violations that are still to be fixed are listed in ALLOWLIST with the reason; an
entry that no longer matches anything is reported too, so the list only shrinks.
tests/unit/test_check_layout.py runs this checker on small fake trees.
"""
import os
import re
import sys

SOURCE_EXTENSIONS = (".c", ".h", ".cc", ".cu", ".cuh", ".inc")

# Folders of docs/design.md §1 that hold source files. actors/<name> and kernels/<name> are
# named by their first two components; the rules below use the first one.
TOP_LEVEL = {"base", "bus", "schemas", "model", "kernels", "actors", "cmd", "clients", "tests"}

# Which top-level folders (the first path component of the included file) each folder may
# include. A folder always may include itself; for actors "itself" is its own actors/<name>.
ALLOWED = {
    "base": {"base"},
    "bus": {"base", "bus"},
    "schemas": {"base", "schemas"},
    "kernels": {"base", "kernels"},
    "model": {"base", "model", "kernels"},
    # docs/design.md: cmd -> actors -> {bus, schemas, model}. The worker also picks the backend
    # (docs/design.md §10, --device cpu|cuda), so actors/gpu_worker may include kernels/: see
    # ACTOR_EXTRA.
    "actors": {"base", "bus", "schemas", "model"},
    "cmd": {"base", "bus", "schemas", "model", "kernels", "actors", "cmd"},
    # clients/ (libllmbus-client) speaks the wire contract over the bus, nothing more.
    "clients": {"base", "bus", "schemas", "clients"},
    "tests": TOP_LEVEL,
}
ACTOR_EXTRA = {"actors/gpu_worker": {"kernels"}}

# Which cmd/ subfolders each cmd/ subfolder may include besides itself (a subfolder not named
# here: only itself). The mains directly in cmd/ may include every subfolder.
CMD_ALLOWED = {
    "cmd/flags": set(),
    "cmd/actor": {"cmd/flags"},
    "cmd/supervisor": {"cmd/flags"},
    "cmd/client": {"cmd/supervisor", "cmd/flags"},
    "cmd/bench": {"cmd/flags"},
}
MAIN_RE = re.compile(r"^\s*int\s+main\s*\(", re.MULTILINE)

# (including file, included file or pattern, reason). The included part is matched against
# the project path of the included file (or the include text when it does not resolve) as
# an exact string, or as a prefix when it ends in '/'. Remove an entry when its reason is
# gone; the checker fails on entries that match nothing.
ALLOWLIST = [
    # Empty: the CUDA forward pass went with the one-forward-pass issue (model/forward.c over
    # kernels/backend.h for both backends); its GGUF-loading tools moved to tests/.
]

NATS_RE = re.compile(r"^nats(\.h$|/)")
FLATBUFFERS_RE = re.compile(r"^flatbuffers/|_generated\.h$")
CUDA_RE = re.compile(
    r"^(cuda[A-Za-z0-9_]*\.h|cuda/|cublas[A-Za-z0-9_]*\.h|cublasLt\.h|cusparse[A-Za-z0-9_]*\.h"
    r"|cufft[A-Za-z0-9_]*\.h|curand[A-Za-z0-9_]*\.h|cusolver[A-Za-z0-9_]*\.h|nvrtc\.h"
    r"|nvToolsExt[A-Za-z0-9_]*\.h|nvtx3/|cub/|thrust/|cooperative_groups|mma\.h|cuda_runtime_api\.h"
    r"|driver_types\.h|vector_types\.h|device_launch_parameters\.h|library_types\.h|nvml\.h)"
)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# The words of the subjects of bus/subject.h (docs/design.md §2), the default prefix and NATS'
# inbox prefix. A printf into a buffer (snprintf, sprintf, asprintf and their v* forms) formats a
# subject when its format string, cut at '.', has a conversion and nothing but conversions,
# wildcards and these words, and either one of these words or a wildcard ("%s.engine.*.stats",
# "%s.tokenize.%s", "%s.*") or arguments that name a prefix or an inbox ("%s.%s.%s" of
# bus_prefix(bus), "%s.%" PRIu64 of an inbox). JSON paths ("%s.content") and GGUF keys
# ("%s.%s" of arch and suffix) have other words or arguments.
SUBJECT_WORDS = {"generate", "abort", "tokenize", "engine", "requests", "kv", "encoder", "execute",
                 "outputs", "stats", "dead_letter", "resync", "history", "health", "metrics", "trace",
                 "llm", "_INBOX"}
PRINTF_RE = re.compile(r"\b(v?snprintf|v?sprintf|v?asprintf)\s*\(")
CONVERSION_RE = re.compile(r"%[-+ #0]*(\*|\d+)?(\.(\*|\d+))?(hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcsp]")
PREFIX_OR_INBOX_RE = re.compile(r"prefix|inbox", re.IGNORECASE)
FORMAT_PART_RE = re.compile(r'"((?:[^"\\]|\\.)*)"|(PRI[A-Za-z0-9]+)')
FORMAT_ARG_RE = re.compile(r'(?:\s*(?:"(?:[^"\\]|\\.)*"|PRI[A-Za-z0-9]+))+\s*')


def is_skipped_dir(path, name, at_root):
    """Hidden folders, build trees (a CMakeCache.txt, or build*/ at the root), models/."""
    if name.startswith(".") or os.path.exists(os.path.join(path, "CMakeCache.txt")):
        return True
    return at_root and (name.startswith("build") or name == "models")


def source_files(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        at_root = os.path.samefile(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if not is_skipped_dir(os.path.join(dirpath, d), d, at_root))
        for f in sorted(filenames):
            if f.endswith(SOURCE_EXTENSIONS):
                out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return out


def unit_of(path):
    """'actors/scheduler' for actors/scheduler/x.c, else the top-level folder ('' at root)."""
    parts = path.split("/")
    if len(parts) == 1:
        return ""
    if parts[0] == "actors" and len(parts) > 2:
        return "actors/" + parts[1]
    return parts[0]


def cmd_unit(path):
    """'cmd/client' for cmd/client/x.c, 'cmd' for a file directly in cmd/."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else "cmd"


def cmd_include_ok(including, target):
    """Whether cmd file `including` may include cmd file `target` (CMD_ALLOWED)."""
    unit, tunit = cmd_unit(including), cmd_unit(target)
    if tunit == "cmd":
        return False  # a main is no library: nothing includes it
    return unit in ("cmd", tunit) or tunit in CMD_ALLOWED.get(unit, set())


def resolve(root, including, text, files):
    """Project path of a quoted include: next to the including file first, then from the
    root (the one -I the build passes); None when it is not a project file."""
    here = os.path.dirname(including)
    for cand in (os.path.normpath(os.path.join(here, text)), os.path.normpath(text)):
        cand = cand.replace(os.sep, "/")
        if cand in files:
            return cand
    return None


def allowlisted(including, target, used):
    for i, (src, pat, _reason) in enumerate(ALLOWLIST):
        if src != including:
            continue
        if target == pat or (pat.endswith("/") and target.startswith(pat)):
            used.add(i)
            return True
    return False


def check(root):
    files = source_files(root)
    file_set = set(files)
    problems = []  # (file, line, message)
    used = set()
    graph = {f: [] for f in files}  # file -> [(included file, line)]

    for f in files:
        top = f.split("/")[0] if "/" in f else ""
        unit = unit_of(f)
        if top not in TOP_LEVEL:
            problems.append((f, 1, "source file outside the folders of docs/design.md §1"))
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text_all = fh.read()
        lines = text_all.split("\n")
        if unit == "cmd" and f.count("/") == 1 and not (f.endswith(".c") and MAIN_RE.search(text_all)):
            problems.append((f, 1, "cmd/ itself holds only mains (one .c with main() per binary): "
                                   "move it into a cmd/ subfolder"))
        for lineno, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            quote, text = m.group(1), m.group(2).strip()
            if NATS_RE.search(text) and top != "bus" and not allowlisted(f, text, used):
                problems.append((f, lineno, f"includes {text}: only bus/ includes nats.h"))
            if FLATBUFFERS_RE.search(text) and top != "schemas" and not allowlisted(f, text, used):
                problems.append((f, lineno, f"includes {text}: only schemas/ includes FlatBuffers headers"))
            if CUDA_RE.search(text) and not f.startswith("kernels/cuda/") and not allowlisted(f, text, used):
                problems.append((f, lineno, f"includes {text}: only kernels/cuda/ includes CUDA headers"))
            if quote != '"':
                continue
            target = resolve(root, f, text, file_set)
            if target is not None:
                graph[f].append((target, lineno))
                ttop = target.split("/")[0]
                tunit = unit_of(target)
            else:
                # Not a project file (generated, or missing): judge it by the path written.
                first = text.split("/")[0]
                if "/" not in text or first not in TOP_LEVEL:
                    continue
                target, ttop = text, first
                tunit = unit_of(text)
            allowed = set(ALLOWED[top]) | ACTOR_EXTRA.get(unit, set())
            if top == "actors":
                ok = ttop in allowed or tunit == unit
            else:
                ok = ttop in allowed
            if not ok and not allowlisted(f, target, used):
                why = (f"{unit}/ includes another actor's folder ({tunit}/)" if top == ttop == "actors"
                       else f"{unit}/ may not include {ttop}/ (docs/design.md §1)")
                problems.append((f, lineno, f"includes {target}: {why}"))
            elif top == ttop == "cmd" and not cmd_include_ok(f, target) and not allowlisted(f, target, used):
                problems.append((f, lineno, f"includes {target}: {cmd_unit(f)}/ may not include "
                                            f"{cmd_unit(target)}/ (cmd/README.md)"))

    problems.extend(find_cycles(graph))
    problems.extend(subject_problems(root, files))
    for i, (src, pat, reason) in enumerate(ALLOWLIST):
        if i not in used:
            problems.append(("tests/unit/check_layout.py", 1,
                             f"stale allowlist entry ({src} -> {pat}: {reason}): nothing matches it any more, remove it"))
    return problems


def call_args(text, start):
    """The top-level arguments (stripped text) of the call whose '(' is at text[start - 1]."""
    args, depth, i, cur = [], 0, start, start
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}" and depth > 0:
            depth -= 1
        elif c == ")" or (c == "," and depth == 0):
            args.append(text[cur:i].strip())
            cur = i + 1
            if c == ")":
                break
        i += 1
    return args


def format_of(args):
    """(index, the format with PRI* macros as "d") of the first argument made of string literals
    and PRI* macros ("%s.%" PRIu64); None when there is none."""
    for k, a in enumerate(args):
        if a.startswith('"') and FORMAT_ARG_RE.fullmatch(a):
            return k, "".join("d" if mac else lit for lit, mac in FORMAT_PART_RE.findall(a))
    return None


def looks_like_subject(fmt, rest):
    comps = CONVERSION_RE.sub("\x01", fmt).split(".")
    if len(comps) < 2 or "\x01" not in comps:
        return False
    if not all(c in ("\x01", "*", ">") or c in SUBJECT_WORDS for c in comps):
        return False
    return any(c != "\x01" for c in comps) or any(PREFIX_OR_INBOX_RE.search(a) for a in rest)


def subject_problems(root, files):
    """One problem per printf outside bus/ that formats a NATS subject (SUBJECT_WORDS)."""
    problems = []
    for f in files:
        if f.startswith("bus/") or not f.endswith((".c", ".h", ".cc", ".inc")):
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for m in PRINTF_RE.finditer(text):
            args = call_args(text, m.end())
            found = format_of(args)
            if found and looks_like_subject(found[1], args[found[0] + 1:]):
                problems.append((f, text.count("\n", 0, m.start()) + 1,
                                 f"{m.group(1)} formats the NATS subject {args[found[0]]}: build it with "
                                 "bus/subject.h (docs/design.md §2)"))
    return problems


def find_cycles(graph):
    """One problem per include cycle found by depth-first search (each cycle once)."""
    problems, seen_cycles = [], set()
    state = {}  # 1 = on the stack, 2 = done
    stack = []  # (file, line of the include that led to the next file)

    def visit(node):
        state[node] = 1
        for target, lineno in graph.get(node, []):
            stack.append((node, lineno))
            if state.get(target) == 1:
                start = next(i for i, (n, _) in enumerate(stack) if n == target)
                cycle = stack[start:]
                key = frozenset(n for n, _ in cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    chain = " -> ".join(f"{n}:{l}" for n, l in cycle) + f" -> {target}"
                    problems.append((cycle[0][0], cycle[0][1], f"include cycle: {chain}"))
            elif state.get(target) is None:
                visit(target)
            stack.pop()
        state[node] = 2

    sys.setrecursionlimit(max(1000, 4 * len(graph) + 100))
    for node in sorted(graph):
        if node not in state:
            visit(node)
    return problems


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    root = os.path.abspath(root)
    problems = check(root)
    for f, line, msg in problems:
        print(f"{f}:{line}: {msg}")
    if problems:
        print(f"check_layout: {len(problems)} violation(s) of the layout (docs/design.md §1) under {root}")
        return 1
    print(f"check_layout: {len(source_files(root))} files under {root} follow the layout")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
