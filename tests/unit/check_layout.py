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
    client runs the supervisor's stack for `llmbus run`); the in-process tools (cmd/client,
    cmd/bench) include only the actor headers CMD_ACTOR_HEADERS names (the sampler is
    model/sampling's, not the worker's);
  - inside model/ (model/README.md): a concern's subfolder includes no other model/ subfolder
    but as MODEL_ALLOWED says (the dependencies run from a concern to what it reads), and a
    model/ subfolder's *_internal.h is included only by its own folder (and tests/);
  - only bus/ includes nats.h, only schemas/ includes FlatBuffers headers (flatbuffers/...
    and the generated *_generated.h), only kernels/cuda/ includes CUDA headers;
  - a source file lives in a folder of the layout;
  - no include cycle between files;
  - no FNV constant (the 32- or 64-bit prime or offset basis) outside base/: every FNV hash
    goes through base/hash.h (FNV_EXEMPT names the one test that pins its published values).
  - no call cycle between source files outside tests/ (two files that call each other are
    one module cut in half): file A depends on file B when A uses (calls, or
    takes the address of) a function or variable B defines with external linkage; every
    strongly connected component of more than one file is reported with one symbol per
    edge. Read from the source, not a build: comments, literals, members, tags, labels and
    locals are no uses; a macro's body counts where the macro is used; calls inside a
    header's static inline functions are not followed.
  - no NATS subject formatted by hand outside bus/: every subject comes from a builder of
    bus/subject.h (SUBJECT_WORDS and subject_problems below say what looks like one).
  - every source file is compiled by the CMake of its own folder: a CMakeLists.txt (with the
    *.cmake files it includes from its subfolders) names only sources of its folder and of
    subfolders without a CMakeLists.txt of their own, and the root CMakeLists.txt names none
    (cmake_source_problems below; CMAKE_EXEMPT names the one separate project).
  - an actor's names carry its folder's whole name (actors/README.md): no name an
    actors/<folder>/ header declares starts with an actor's old short prefix (`inproc_`,
    `outproc_`, `api_` but not `api_server_`) or with its own folder's first word without the
    rest (`kv_` but not `kv_manager_`), except as the header's own file stem
    (actor_prefix_problems below).

Known violations that are still to be fixed are listed in ALLOWLIST and CALL_CYCLE_ALLOWLIST
with the reason; an entry that no longer matches anything is reported too, so the lists only
shrink.
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
# Which model/ subfolders each model/ subfolder may include besides itself (model/README.md):
# from a concern to what it reads. A subfolder not named here: only itself; a file directly in
# model/ (there is none) may include every subfolder.
MODEL_ALLOWED = {
    "model/gguf": set(),
    "model/reasoning": set(),
    "model/sampling": set(),  # the token sampler
    "model/tokenizer": {"model/gguf"},
    "model/template": {"model/gguf"},  # chat_template.h reads the template from the file
    "model/vision": {"model/gguf"},  # the mmproj is a GGUF file
    "model/forward": {"model/gguf"},
    "model/structured": {"model/tokenizer"},  # the vocabulary mask reads every token's bytes
}
# The tools that run the model in this process (cmd/client: generate --inproc; cmd/bench) reach
# it through model/ (the session, model/sampling's sampler), never through an actor's headers:
# the actor headers each may include (exact project paths). A cmd/ subfolder not named here is
# not restricted by this table.
CMD_ACTOR_HEADERS = {
    "cmd/client": set(),
    "cmd/bench": {"actors/gpu_worker/runner_sim.h"},  # --fit: the sim worker's cost model
}
MAIN_RE = re.compile(r"^\s*int\s+main\s*\(", re.MULTILINE)

# (including file, included file or pattern, reason). The included part is matched against
# the project path of the included file (or the include text when it does not resolve) as
# an exact string, or as a prefix when it ends in '/'. Remove an entry when its reason is
# gone; the checker fails on entries that match nothing.
ALLOWLIST = [
    # Empty: the CUDA forward pass went with the one-forward-pass issue (model/forward/forward.c over
    # kernels/backend.h for both backends); its GGUF-loading tools moved to tests/.
]

# Call cycles still to be broken: (the files of the cycle, exactly, reason). The goal is an
# empty list; an entry whose files no longer form a cycle fails as stale.
CALL_CYCLE_ALLOWLIST = []

# Files whose calls are read (C, CUDA, the C++ codecs); headers give their macros.
CALL_EXTENSIONS = (".c", ".cc", ".cu")

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


def tree_files(root, wanted):
    """Project paths of the files under root whose name `wanted(name)` accepts, sorted, without
    the folders is_skipped_dir skips."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        at_root = os.path.samefile(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if not is_skipped_dir(os.path.join(dirpath, d), d, at_root))
        for f in sorted(filenames):
            if wanted(f):
                out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return out


def source_files(root):
    return tree_files(root, lambda f: f.endswith(SOURCE_EXTENSIONS))


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


def model_unit(path):
    """'model/gguf' for model/gguf/x.c, 'model' for a file directly in model/."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else "model"


def model_include_problem(including, target):
    """Why `including` may not include the model/ file `target` (MODEL_ALLOWED and the
    folder-private *_internal.h), or None."""
    unit, tunit = model_unit(including), model_unit(target)
    if (target.endswith("_internal.h") and not including.startswith("tests/")
            and os.path.dirname(including) != os.path.dirname(target)):
        return f"{os.path.dirname(target)}/'s *_internal.h is private to that folder (model/README.md)"
    if (including.startswith("model/") and unit not in ("model", tunit)
            and tunit not in MODEL_ALLOWED.get(unit, set())):
        return f"{unit}/ may not include {tunit}/ (model/README.md)"
    return None


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


# CMake files that may name sources of other folders: (path, reason). The checker fails on an
# entry whose file no longer does.
CMAKE_EXEMPT = {
    "kernels/cuda/standalone/CMakeLists.txt":
        "a separate CMake project for GPU machines (ops/bench/cuda-bench.sh) that builds the CUDA "
        "backend with base/, kernels/, model/ and the sampler but without the bus dependencies, "
        "so it names their sources itself; the main build never adds it",
}
SOURCE_REF_RE = re.compile(r'[^\s()"\'#;<>]+\.(?:c|cc|cpp|cxx|cu)(?![\w.])')
CMAKE_COMMENT_RE = re.compile(r'(^|[\s(])#(?!\[).*$', re.MULTILINE)
CMAKE_PATH_VAR_RE = re.compile(
    r'^\s*(?:get_filename_component|set)\s*\(\s*(\w+)\s+"?([^\s")]+)"?\s*(?:ABSOLUTE\s*)?\)',
    re.MULTILINE)


def cmake_files(root):
    """Project paths of every CMakeLists.txt and *.cmake."""
    return tree_files(root, lambda f: f == "CMakeLists.txt" or f.endswith(".cmake"))


def cmake_owner(path, lists_dirs):
    """The folder whose CMakeLists.txt builds what `path` names: its own for a CMakeLists.txt,
    the nearest folder above with a CMakeLists.txt for an included *.cmake ('' = the root)."""
    d = os.path.dirname(path)
    if path.endswith("CMakeLists.txt"):
        return d
    while d and d not in lists_dirs:
        d = os.path.dirname(d)
    return d


def cmake_sources(root, path, owner):
    """[(project path or None when it leaves the checkout, line)] of each source file (.c, .cc,
    .cu...) that the CMake file `path` names, read from the text: comments skipped, the source
    dir variables and the path variables set or get_filename_component'ed in the file
    replaced, a relative path taken from `owner` (CMAKE_CURRENT_SOURCE_DIR). A name whose
    folder still holds an unknown ${...} is left out; one with ${...} in its file name only
    (${t}.c) is judged by its folder."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
        text = CMAKE_COMMENT_RE.sub(lambda m: m.group(1), fh.read())
    here = os.path.dirname(path)
    known = {"CMAKE_SOURCE_DIR": "", "PROJECT_SOURCE_DIR": "", "CMAKE_CURRENT_SOURCE_DIR": owner,
             "CMAKE_CURRENT_LIST_DIR": here}

    def expand(word):
        for name, val in known.items():
            word = word.replace("${%s}" % name, "/" + val if val else "/")
        return word

    for m in CMAKE_PATH_VAR_RE.finditer(text):
        val = expand(m.group(2))
        if val.startswith("/") and "${" not in val:
            val = os.path.normpath(val.lstrip("/")).replace(os.sep, "/")
            known[m.group(1)] = "" if val == "." else val
    out = []
    for m in SOURCE_REF_RE.finditer(text):
        word = expand(m.group())
        folder = os.path.dirname(word)
        if "${" in folder or "$<" in word:
            continue
        rel = word.lstrip("/") if word.startswith("/") else os.path.join(owner, word)
        rel = os.path.normpath(rel).replace(os.sep, "/")
        line = text.count("\n", 0, m.start()) + 1
        out.append((None if rel == ".." or rel.startswith("../") else rel, line))
    return out


def cmake_source_problems(root):
    """One problem per source file a CMake file names outside its own folder (cmake_owner):
    out of the checkout, in another folder, in a subfolder that has a CMakeLists.txt of its
    own, or named by the root at all; then one per stale CMAKE_EXEMPT entry."""
    files = cmake_files(root)
    lists_dirs = {os.path.dirname(f) for f in files if f.endswith("CMakeLists.txt")}
    problems, exempt_used = [], set()
    for f in files:
        owner = cmake_owner(f, lists_dirs)
        for src, line in cmake_sources(root, f, owner):
            if src is None:
                why = "a file outside the checkout"
            else:
                d = os.path.dirname(src)
                while d and d not in lists_dirs and d != owner:
                    d = os.path.dirname(d)
                if owner and d == owner:
                    continue
                why = (f"{src}: the root CMakeLists.txt only adds folders" if not owner
                       else f"{src}, which {d + '/' if d else 'the root '}CMakeLists.txt owns")
            if f in CMAKE_EXEMPT:
                exempt_used.add(f)
                continue
            problems.append((f, line, f"compiles {why}: every source is built by the CMakeLists.txt "
                                      "of its own folder (link that folder's library instead)"))
    for f, reason in CMAKE_EXEMPT.items():
        if f not in exempt_used:
            problems.append(("tests/unit/check_layout.py", 1,
                             f"stale CMAKE_EXEMPT entry ({f}: {reason}): it names no source of "
                             "another folder any more, remove it"))
    return problems


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
            elif (ok and ttop == "model" and model_include_problem(f, target)
                  and not allowlisted(f, target, used)):
                problems.append((f, lineno, f"includes {target}: {model_include_problem(f, target)}"))
            elif (top == "cmd" and ttop == "actors" and cmd_unit(f) in CMD_ACTOR_HEADERS
                  and target not in CMD_ACTOR_HEADERS[cmd_unit(f)] and not allowlisted(f, target, used)):
                problems.append((f, lineno, f"includes {target}: {cmd_unit(f)}/ runs the model through model/, "
                                            f"not an actor's headers (CMD_ACTOR_HEADERS, cmd/README.md)"))

    problems.extend(find_cycles(graph))
    problems.extend(find_call_cycles(root, files))
    problems.extend(subject_problems(root, files))
    problems.extend(cmake_source_problems(root))
    problems.extend(actor_shape_problems(root, files))
    problems.extend(actor_prefix_problems(root, files))
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


ACTOR_SHAPE = ("struct {a}_options", "struct {a}_stats", "{a}_create(", "{a}_start(", "{a}_stop(",
               "{a}_destroy(", "{a}_stats(")


def actor_shape_problems(root, files):
    """One problem per actors/<folder>/actor.h that does not declare the lifecycle every actor
    has (actors/README.md): <folder>_actor_options and _stats structs, create, start, stop,
    destroy and stats."""
    problems = []
    for f in files:
        parts = f.split("/")
        if len(parts) != 3 or parts[0] != "actors" or parts[2] != "actor.h":
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = " ".join(blank_comments_and_strings(fh.read()).split())
        text = re.sub(r"\s*\(", "(", text)
        a = parts[1] + "_actor"
        missing = [n.format(a=a) for n in ACTOR_SHAPE if not re.search(
            r"(?<!\w)" + re.escape(n.format(a=a)) + (r"(?!\w)" if not n.endswith("(") else ""), text)]
        if missing:
            problems.append((f, 1, f"the actor's lifecycle lacks {', '.join(missing)} (every actor "
                                   f"declares the shape of actors/README.md, named for its folder)"))
    return problems


# The short prefixes actors had before each took its folder's name (issue 33): a header in any
# actor folder that declares a name starting with one of them (and not with the full name
# after it) is caught.
OLD_ACTOR_PREFIXES = {"inproc_": "input_processor_", "outproc_": "output_processor_", "api_": "api_server_"}


def header_names(text):
    """[(name, line)] of what a C header declares for its includers: macros, the tags of the
    struct / union / enum it defines, enumerators, typedef names, and file-scope functions and
    variables. Members, parameters, tags only named (`struct x *p`, `struct x;`), names inside
    function bodies and initializers, comments and literals are not read."""
    clean = blank_comments_and_strings(text)
    names = []
    for m in DIRECTIVE_RE.finditer(clean):
        d = DEFINE_RE.match(m.group().strip())
        if d:
            names.append((d.group(1), clean.count("\n", 0, m.start()) + 1))
    toks, lines = tokens_of(DIRECTIVE_RE.sub(lambda m: "\n" * m.group().count("\n"), clean))
    toks.append(";")
    blocks, parens = [], 0  # blocks: 'enum', 'struct' or 'other' per open brace
    for k, t in enumerate(toks[:-1]):
        prev = toks[k - 1] if k else ";"
        if t == "{":
            back = [x for x in toks[max(0, k - 2):k] if x in ("enum", "struct", "union")]
            blocks.append("enum" if back == ["enum"] else "struct" if back else "other")
        elif t == "}" and blocks:
            blocks.pop()
        elif t in ("(", ")") and not blocks:
            parens += 1 if t == "(" else -1
        elif not is_ident(t):
            continue
        elif prev in ("struct", "union", "enum"):
            if toks[k + 1] == "{":  # a definition; `struct x *p` and `struct x;` name it only
                names.append((t, lines[k]))
        elif blocks:
            if blocks[-1] == "enum" and prev in ("{", ","):
                names.append((t, lines[k]))
        elif parens == 0 and toks[k + 1] in ("(", ";", ",", "=", "["):
            names.append((t, lines[k]))
        elif parens == 1 and prev == "*" and toks[k - 2] == "(" and toks[k + 1] == ")":
            names.append((t, lines[k]))  # typedef void (*name)(...)
    return names


def actor_prefix_problems(root, files):
    """One problem per name an actors/<folder>/ header declares (header_names) that starts with
    a short form of an actor's folder name instead of the whole name (actors/README.md: the
    prefix is the folder name): one of OLD_ACTOR_PREFIXES, or its own folder's first word
    (`kv_` in actors/kv_manager/) not followed by the rest unless the name starts with the
    header's own file stem (kv_block_pool.h: kv_block_pool_*). Compared in lower case, so
    macros count too."""
    problems = set()
    for f in files:
        parts = f.split("/")
        if len(parts) != 3 or parts[0] != "actors" or not f.endswith(".h"):
            continue
        folder, stem = parts[1], parts[2][:-2]
        own = folder.split("_")[0] + "_" if "_" in folder else None
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            declared = header_names(fh.read())
        for name, line in declared:
            low = name.lower()
            bad = next((p for p, full in OLD_ACTOR_PREFIXES.items()
                        if low.startswith(p) and not low.startswith(full)), None)
            if (not bad and own and low.startswith(own) and not low.startswith(folder + "_")
                    and low not in (folder, stem) and not low.startswith(stem + "_")):
                bad = own
            if bad:
                full = OLD_ACTOR_PREFIXES.get(bad, folder + "_")
                problems.add((f, line, f"`{name}` starts with `{bad}`, a short form of `{full}`: an "
                                       f"actor's names use its folder's whole name (actors/README.md)"))
    return sorted(problems)


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


# Words that can stand right before an identifier without declaring it: `return foo;` uses
# foo, `int foo;` declares a local named foo.
NOT_A_TYPE = {"return", "case", "goto", "sizeof", "else", "do", "if", "while", "for", "switch",
              "_Alignof", "alignof", "typeof", "__typeof__", "_Generic", "default", "break",
              "continue", "new", "delete", "throw"}
# Words whose next identifier is a tag or a label, never a function or variable.
TAG_WORDS = {"struct", "union", "enum", "class", "goto"}
DECL_END = {"=", ";", ",", "[", ")", ":"}
COMMENT_STRING_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|' r"'(?:\\.|[^'\\\n])*'",
                               re.DOTALL)
DIRECTIVE_RE = re.compile(r"^[ \t]*#(?:[^\n\\]|\\.|\\\n)*", re.MULTILINE)
DEFINE_RE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?(.*)", re.DOTALL)
TOKEN_RE = re.compile(r"\n|\d[\w.]*|[A-Za-z_]\w*|->|::|##|[^\s]")


def blank_comments_and_strings(text):
    """Comments blanked (newlines kept), string and character literals replaced by 0."""
    def blank(m):
        s = m.group()
        return " 0 " if s[0] in "\"'" else " " + "\n" * s.count("\n")
    return COMMENT_STRING_RE.sub(blank, text)


def tokens_of(text):
    """([token], [line]) of C text without comments, literals and directives."""
    toks, lines, line = [], [], 1
    for t in TOKEN_RE.findall(text):
        if t == "\n":
            line += 1
        else:
            toks.append(t)
            lines.append(line)
    return toks, lines


def is_ident(t):
    return t[0].isalpha() or t[0] == "_"


def macros_of(clean):
    """{macro name: identifiers its body names} of text without comments and literals: no
    parameters, members, #stringified or ##pasted pieces."""
    macros = {}
    for m in DIRECTIVE_RE.finditer(clean):
        d = DEFINE_RE.match(m.group().strip())
        if not d:
            continue
        params = set(re.findall(r"[A-Za-z_]\w*", d.group(2) or "")) | {"__VA_ARGS__"}
        body = [t for t in TOKEN_RE.findall(d.group(3).replace("\\\n", " ")) if t != "\n"]
        names = set()
        for k, t in enumerate(body):
            before = body[k - 1] if k else ""
            after = body[k + 1] if k + 1 < len(body) else ""
            if (is_ident(t) and t not in params and before not in (".", "->", "#", "##")
                    and after != "##" and before not in TAG_WORDS):
                names.add(t)
        macros.setdefault(d.group(1), set()).update(names)
    return macros


def close_of(toks, i, open_, close):
    """Index of the bracket closing the one at toks[i] (the last token when unbalanced)."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j] == open_:
            depth += 1
        elif toks[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def open_of(toks, j, lo):
    """Index of the '(' that the ')' at toks[j] closes, not before lo."""
    depth = 0
    for k in range(j, lo - 1, -1):
        if toks[k] == ")":
            depth += 1
        elif toks[k] == "(":
            depth -= 1
            if depth == 0:
                return k
    return lo


def declared_names(toks, lo, hi):
    """Names declared in toks[lo:hi] (parameters, locals, labels): an identifier after a
    type-like token (an identifier that is no statement word, or '*'s after one, or '(*' of
    a function pointer) and before = ; , [ ) or :, or a label."""
    names = set()
    for k in range(lo + 1, hi - 1):
        t = toks[k]
        if not is_ident(t) or toks[k + 1] not in DECL_END:
            continue
        p = k - 1
        while p > lo and toks[p] == "*":
            p -= 1
        prev = toks[p]
        if ((p < k - 1 and prev == "(") or (toks[k + 1] == ":" and prev in (";", "{", "}"))
                or (is_ident(prev) and prev not in NOT_A_TYPE and prev not in TAG_WORDS)):
            names.add(t)
    return names


def file_symbols(text, macro_uses):
    """What one C file defines and uses: ({function or variable it defines with external
    linkage: line}, {names with internal linkage}, {identifier it uses: first line}).
    A use is a call or a value (a function pointer in an initializer or an argument), also
    through a macro: macro_uses(name) -> the identifiers a macro's expansion names, or None.
    Members (.x, ->x), tags, labels and the non-call uses of a parameter's or local's own
    name are not uses."""
    clean = blank_comments_and_strings(text)
    toks, lines = tokens_of(DIRECTIVE_RE.sub(lambda m: "\n" * m.group().count("\n"), clean))
    toks.append(";")
    lines.append(lines[-1] if lines else 1)
    defined, static, uses = {}, set(), {}
    n = len(toks) - 1

    def add_uses(lo, hi, local):
        for k in range(lo, hi):
            t = toks[k]
            if not is_ident(t) or t in local and toks[k + 1] != "(":
                continue
            prev = toks[k - 1]
            if prev in (".", "->") or prev in TAG_WORDS:
                continue
            uses.setdefault(t, lines[k])
            for name in macro_uses(t) or ():
                if name not in local:
                    uses.setdefault(name, lines[k])

    anonymous = []  # one entry per open namespace: whether it is anonymous (C++)
    seg_start = i = 0  # seg_start: the first token of the current file-scope declaration
    while i < n:
        t = toks[i]
        if t == ";":
            seg = toks[seg_start:i]
            internal = "static" in seg or any(anonymous)
            call = next((k for k in range(seg_start, i - 1)
                         if is_ident(toks[k]) and toks[k + 1] == "("), None)
            if call is not None and macro_uses(toks[call]) is None:
                if internal:  # a prototype
                    static.add(toks[call])
            else:  # a variable: the name before its initializer or size
                end = next((k for k in range(seg_start, i) if toks[k] in ("=", "[", "{")), i)
                name = toks[end - 1] if end - 1 > seg_start else ""
                if (name and is_ident(name) and toks[end] != "{" and "(" not in seg
                        and not {"typedef", "extern", "using"} & set(seg)):
                    if internal:
                        static.add(name)
                    else:
                        defined.setdefault(name, lines[end - 1])
            if "=" in seg:  # a file-scope initializer: the function pointers in it are uses
                add_uses(seg_start + seg.index("=") + 1, i, set())
            seg_start = i = i + 1
            continue
        if t == "}":  # the end of an extern "C" or namespace block
            if anonymous:
                anonymous.pop()
            seg_start = i = i + 1
            continue
        if is_ident(t) and toks[i + 1] == "(" and macro_uses(t) is not None:
            close = close_of(toks, i + 1, "(", ")")  # a macro at file scope
            add_uses(i, close + 1, set())
            if toks[close + 1] != "{":
                seg_start = i = close + 1
                continue
        if t != "{":
            i += 1
            continue
        head = toks[seg_start:i]
        if head == ["extern", "0"] or (head and head[0] == "namespace"):
            anonymous.append(head == ["namespace"])
            seg_start = i = i + 1  # read the block as file scope
            continue
        end = close_of(toks, i, "{", "}")
        if i - 1 > seg_start and toks[i - 1] in (")", "const"):  # name ( parameters ) { body }
            j = i - 1 if toks[i - 1] == ")" else i - 2
            op = open_of(toks, j, seg_start)
            name = toks[op - 1] if op > seg_start else ""
            if name and is_ident(name) and name not in NOT_A_TYPE:
                if toks[op - 2] == "::":
                    pass  # a C++ method: called through its object
                elif "static" in toks[seg_start:op - 1] or any(anonymous):
                    static.add(name)
                else:
                    defined.setdefault(name, lines[op - 1])
                local = declared_names(toks, op, i) | declared_names(toks, i, end + 1)
                add_uses(i + 1, end, local)
                seg_start = i = end + 1
                continue
        if "=" in head:  # the braces of an initializer: the function pointers in it are uses
            add_uses(i + 1, end, set())
        i = end + 1
    return defined, static, uses


def symbol_graph(root, files):
    """{(file A, file B): [(symbol, line in A)]} for every source file outside tests/ that
    uses a symbol another one defines with external linkage."""
    clean, header_macros, file_macros = {}, {}, {}
    for f in files:
        if f.startswith("tests/"):
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            clean[f] = blank_comments_and_strings(fh.read())
        macros = macros_of(clean[f])
        if f.endswith(CALL_EXTENSIONS):
            file_macros[f] = macros
        else:
            for name, body in macros.items():
                header_macros.setdefault(name, set()).update(body)
    symbols, definers = {}, {}
    for f, macros in file_macros.items():
        symbols[f] = file_symbols(clean[f], macro_expander(header_macros, macros))
        for name in symbols[f][0]:
            definers.setdefault(name, []).append(f)
    edges = {}
    for f, (defined, internal, uses) in symbols.items():
        for name, line in sorted(uses.items(), key=lambda kv: kv[1]):
            if name in defined or name in internal:
                continue
            for g in definers.get(name, ()):
                if g != f:
                    edges.setdefault((f, g), []).append((name, line))
    return edges


def macro_expander(header_macros, file_macros):
    """name -> every identifier the macro's expansion names (through other macros too), or
    None when name is no macro; a file's own #defines hide a header's."""
    memo = {}

    def expand(name, stack=()):
        if name in memo:
            return memo[name]
        body = file_macros.get(name, header_macros.get(name))
        if body is None:
            return None
        out = set(body)
        for b in body:
            if b != name and b not in stack:
                out |= expand(b, stack + (name,)) or set()
        memo[name] = out
        return out
    return expand


def strongly_connected(edges):
    """The strongly connected components of more than one node (Tarjan, iterative), each a
    sorted list, in order of their first file."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return sorted(comps)


def find_call_cycles(root, files):
    """One problem per call cycle (a strongly connected component of the file graph of
    symbol_graph) not in CALL_CYCLE_ALLOWLIST, then one per stale entry of that list."""
    edges = symbol_graph(root, files)
    problems, used = [], set()
    for comp in strongly_connected(edges):
        allowed = [i for i, (fs, _r) in enumerate(CALL_CYCLE_ALLOWLIST) if sorted(fs) == comp]
        if allowed:
            used.update(allowed)
            continue
        why = "".join(f"\n    {a} -> {b} ({edges[(a, b)][0][0]}, line {edges[(a, b)][0][1]})"
                      for a in comp for b in comp if (a, b) in edges)
        first = edges[next((a, b) for a in comp for b in comp if (a, b) in edges)][0][1]
        problems.append((comp[0], first, f"call cycle between {len(comp)} files "
                                         f"(move the shared piece into a leaf file):{why}"))
    for i, (fs, reason) in enumerate(CALL_CYCLE_ALLOWLIST):
        if i not in used:
            problems.append(("tests/unit/check_layout.py", 1,
                             f"stale call-cycle allowlist entry ({', '.join(fs)}: {reason}): "
                             f"those files no longer form exactly that cycle, remove or update it"))
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
