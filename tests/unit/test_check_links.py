#!/usr/bin/env python3
"""check_links.py on small fake checkouts: each kind of broken reference is reported (with its
file and line), and a tree whose references all resolve passes. Exits 0 when every case holds."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_links  # noqa: E402


def tree(files):
    root = tempfile.mkdtemp(prefix="check-links-")
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return root


GOOD = {
    "README.md": "# Title\n\nSee [the guide](docs/guide.md#two-words), [top](#title), "
                 "`ops/run.sh`, the module bus/peer_watch, docs/guide.md \"Two words\",\n"
                 "design.md §1, ![pic](docs/pic.svg) and [a site](https://example.com/x).\n",
    "docs/guide.md": "# Guide\n\n## Two words\n\n[back](../README.md) and [design](design.md#1-layout)\n"
                     "```\n[not a link](nowhere.md) in code\n```\n",
    "docs/design.md": "# Design\n\n## 1. Layout\n",
    "docs/pic.svg": "<svg/>",
    "ops/run.sh": "",
    "bus/peer_watch.h": "",
}

CASES = [
    ("missing file", {"README.md": "[x](docs/none.md)\n"}, "README.md:1: link to a missing file"),
    ("missing anchor", {"README.md": "# A\n[x](#b)\n"}, "README.md:2: link to a missing section: #b"),
    ("missing anchor in another file", {"README.md": "[x](docs/guide.md#nope)\n"},
     "link to a missing section: docs/guide.md#nope"),
    ("path in text", {"README.md": "see tests/e2e/gone.py\n"},
     "names a path that does not exist: tests/e2e/gone.py"),
    ("quoted section", {"README.md": "docs/guide.md \"Missing part\"\n"},
     "docs/guide.md has no section \"Missing part\""),
    ("design section", {"README.md": "design.md §9\n"}, "docs/design.md has no section 9"),
    ("outside the repository", {"README.md": "see ../shared/notes.md\n"}, "refers outside the repository"),
    ("link leaving the tree", {"docs/guide.md": "# Guide\n## Two words\n[x](../../etc/passwd)\n"},
     "link points outside the repository"),
]


def main():
    failures = 0
    errors = check_links.Checker(tree(GOOD)).run()
    if errors:
        print("FAIL good tree reported:", errors)
        failures += 1
    for name, extra, expected in CASES:
        files = dict(GOOD)
        files.update(extra)
        errors = check_links.Checker(tree(files)).run()
        if not any(expected in e for e in errors):
            print(f"FAIL {name}: expected '{expected}' in {errors}")
            failures += 1
        else:
            print(f"ok   {name}")
    print(f"{len(CASES) + 1 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
