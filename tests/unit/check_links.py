#!/usr/bin/env python3
"""Checks that every reference in the checkout's Markdown files points at something that exists.

    check_links.py [ROOT]        ROOT: the checkout (default: this file's ../..)

Reads every *.md under ROOT (build trees, hidden folders and models/ skipped) and prints one
line per broken reference, `file:line: message`, then exits 1; exits 0 when there is none.
What counts as a reference:

  - a Markdown link or image, `[text](target)`, `![alt](target)`, `[name]: target`, and an
    HTML `src="..."` / `href="..."`: a relative target must exist inside ROOT (resolved from
    the file's folder); a `#anchor` must be a heading of the target file (GitHub's slugs);
    http(s)/mailto targets are not fetched;
  - a path of the repository written out in text or in code, starting with one of the
    top-level folders (`tests/e2e/test_tracing.py`, `ops/bench/`, the module `bus/peer_watch`):
    it must exist, read from ROOT or from the file's own folder. Paths with placeholders (`<eid>`, `*`, `$X`, `...`)
    and paths under build trees are not checked;
  - a Markdown file named with a section in quotes, `model/README.md "Image encoder"`: the
    file must have a heading containing those words;
  - `design.md §N`: docs/design.md must have a section numbered N;
  - anything pointing outside the checkout (`../shared/...`) is an error: docs stay inside.

tests/unit/test_check_links.py runs this checker on small fake trees.
"""
import glob
import os
import re
import sys

TOP_LEVEL = ("actors", "base", "bus", "clients", "cmd", "docs", "kernels", "model", "ops",
             "schemas", "tests")
SKIP_DIRS = {"models", "node_modules", "__pycache__"}

LINK_RE = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)")
HTML_RE = re.compile(r"\b(?:src|href)=\"([^\"]+)\"")
PATH_RE = re.compile(r"(?<![\w./<>@-])((?:%s)/[A-Za-z0-9_./+-]*)" % "|".join(TOP_LEVEL))
SECTION_RE = re.compile(r"([\w./-]*\.md),? \"([^\"]+)\"")
DESIGN_SECTION_RE = re.compile(r"design\.md(?:'s)? §(\d+)")
OUTSIDE_RE = re.compile(r"\.\./shared\b|\.\./\.\./\.\./")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
HEADING_RE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
PLACEHOLDER_RE = re.compile(r"[<>*$]|\.\.\.|\{")


def github_slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|__", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class Checker:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.headings = {}
        self.errors = []

    def md_files(self):
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                                 and not d.startswith("build") and d not in SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(".md"):
                    yield os.path.join(dirpath, name)

    def file_headings(self, path):
        """(slugs, heading texts) of a Markdown file, outside code fences; duplicates numbered."""
        if path not in self.headings:
            slugs, texts, seen, in_fence = set(), [], {}, False
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if FENCE_RE.match(line):
                        in_fence = not in_fence
                        continue
                    m = None if in_fence else HEADING_RE.match(line)
                    if m:
                        slug = github_slug(m.group(2))
                        n = seen.get(slug, 0)
                        seen[slug] = n + 1
                        slugs.add(slug if n == 0 else "%s-%d" % (slug, n))
                        texts.append(m.group(2))
            self.headings[path] = (slugs, texts)
        return self.headings[path]

    def error(self, path, lineno, message):
        self.errors.append("%s:%d: %s" % (os.path.relpath(path, self.root), lineno, message))

    def inside(self, path):
        return path == self.root or path.startswith(self.root + os.sep)

    def check_link(self, path, lineno, target):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
            return
        file_part, _, anchor = target.partition("#")
        if file_part:
            resolved = os.path.realpath(os.path.join(os.path.dirname(path), file_part))
            if not self.inside(resolved):
                self.error(path, lineno, "link points outside the repository: %s" % target)
                return
            if not os.path.exists(resolved):
                self.error(path, lineno, "link to a missing file: %s" % target)
                return
        else:
            resolved = path
        if anchor:
            if not resolved.endswith(".md") or os.path.isdir(resolved):
                return  # anchors into source files are line numbers on a forge; not checked
            if anchor not in self.file_headings(resolved)[0]:
                self.error(path, lineno, "link to a missing section: %s" % target)

    def check_path(self, path, lineno, ref):
        ref = ref.rstrip(".,:;")
        if PLACEHOLDER_RE.search(ref) or ref.startswith("build"):
            return
        for base in (self.root, os.path.dirname(path)):
            full = os.path.join(base, ref)
            if os.path.exists(full) or glob.glob(glob.escape(full) + ".*"):
                return  # a file, a folder, or a module named by its stem (bus/peer_watch)
        self.error(path, lineno, "names a path that does not exist: %s" % ref)

    def resolve_md(self, path, name):
        for base in (self.root, os.path.dirname(path), os.path.join(self.root, "docs")):
            candidate = os.path.join(base, name)
            if os.path.isfile(candidate):
                return candidate
        return None

    def check_section(self, path, lineno, name, section):
        target = path if name == "" else self.resolve_md(path, name)
        if target is None:
            return  # a missing file is reported by check_path when it is a repository path
        wanted = section.lower()
        if not any(wanted in github_slug(t).replace("-", " ") or wanted in t.lower()
                   for t in self.file_headings(target)[1]):
            self.error(path, lineno, "%s has no section \"%s\"" % (name, section))

    def check_design_section(self, path, lineno, number):
        design = os.path.join(self.root, "docs", "design.md")
        if not os.path.isfile(design):
            self.error(path, lineno, "cites design.md §%s, but docs/design.md is missing" % number)
            return
        if not any(t.startswith("%s. " % number) for t in self.file_headings(design)[1]):
            self.error(path, lineno, "docs/design.md has no section %s" % number)

    def check_file(self, path):
        in_fence = False
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for lineno, line in enumerate(lines, 1):
            if FENCE_RE.match(line):
                in_fence = not in_fence
                continue
            if OUTSIDE_RE.search(line):
                self.error(path, lineno, "refers outside the repository: %s" % line.strip())
            for m in DESIGN_SECTION_RE.finditer(line):
                self.check_design_section(path, lineno, m.group(1))
            for m in PATH_RE.finditer(line):
                self.check_path(path, lineno, m.group(1))
            if in_fence:
                continue
            targets = [m.group(1) for m in LINK_RE.finditer(line)]
            targets += [m.group(1) for m in HTML_RE.finditer(line)]
            m = REFDEF_RE.match(line)
            if m:
                targets.append(m.group(1))
            for target in targets:
                self.check_link(path, lineno, target)
            for m in SECTION_RE.finditer(line):
                self.check_section(path, lineno, m.group(1), m.group(2))

    def run(self):
        for path in self.md_files():
            self.check_file(path)
        return self.errors


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    errors = Checker(root).run()
    for e in errors:
        print(e)
    if errors:
        print("%d broken reference(s)" % len(errors))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
