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
  - no FNV constant (the 32- or 64-bit prime or offset basis) outside base/: every FNV hash
    goes through base/hash.h (FNV_EXEMPT names the one test that pins its published values).

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

# FNV-1a's primes and offset bases, 64- and 32-bit, in hex or decimal, with C suffixes: written
# once, in base/hash.h. Anywhere else they mean an inline copy of the hash.
FNV_RE = re.compile(r"\b(0x0*100000001b3|1099511628211|0xcbf29ce484222325|14695981039346656037"
                    r"|0x0*1000193|16777619|0x811c9dc5|2166136261)[uUlL]*\b", re.IGNORECASE)
FNV_EXEMPT = {
    "tests/unit/test_base_containers.c": "checks base/hash.h's FNV-1a against its published values",
}


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


def fnv_constants(path, lines):
    """One problem per line of `path` outside base/ that writes an FNV constant."""
    if path.startswith("base/") or path in FNV_EXEMPT:
        return []
    return [(path, lineno, f"FNV constant {m.group(1)}: hash with base/hash.h (llb_fnv1a64*), not an inline copy")
            for lineno, line in enumerate(lines, 1) for m in [FNV_RE.search(line)] if m]


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
        problems.extend(fnv_constants(f, lines))
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
    for i, (src, pat, reason) in enumerate(ALLOWLIST):
        if i not in used:
            problems.append(("tests/unit/check_layout.py", 1,
                             f"stale allowlist entry ({src} -> {pat}: {reason}): nothing matches it any more, remove it"))
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
