"""A reference reading of GBNF for tests, written apart from the engine's C compiler.

parse(text) reads a grammar of the dialect model/structured/so_gbnf.c accepts (llama.cpp's GBNF and
xgrammar's EBNF) into rules of nodes; Reference(text) builds a Lark (Earley) parser for the
language, so membership comes from a well-kept library, and draws random strings of the
language. Nodes: ("alt", [seq...]), ("seq", [node...]), ("lit", str), ("cls", negated,
[(lo, hi)...]), ("ref", name), ("rep", node, min, max or None).
"""
import random
import re

import lark

_ESC = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "b": "\b", "e": "\x1b", "0": "\0"}
_RULE_START = re.compile(r"[A-Za-z0-9_-]+[ \t]*::=")
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class _Parser:
    def __init__(self, text):
        self.s, self.i, self.rules = text, 0, {}

    def space(self):
        while self.i < len(self.s):
            if self.s[self.i] == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            elif self.s[self.i] in " \t\r\n":
                self.i += 1
            else:
                return

    def char(self):
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = self.s[self.i + 1]
        n = {"x": 2, "u": 4, "U": 8}.get(e)
        if n:
            v = int(self.s[self.i + 2:self.i + 2 + n], 16)
            self.i += 2 + n
            return chr(v)
        self.i += 2
        return _ESC.get(e, e)

    def parse(self):
        self.space()
        while self.i < len(self.s):
            m = _NAME.match(self.s, self.i)
            name = m.group(0)
            self.i = self.s.index("::=", m.end()) + 3
            self.rules[name] = self.alternates()
            self.space()
        return self.rules

    def alternates(self):
        seqs = [self.sequence()]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            seqs.append(self.sequence())
        return ("alt", seqs)

    def sequence(self):
        items = []
        while True:
            self.space()
            if self.i >= len(self.s) or self.s[self.i] in ")|" or _RULE_START.match(self.s, self.i):
                return ("seq", items)
            c = self.s[self.i]
            if c in "*+?":
                self.i += 1
                items[-1] = ("rep", items[-1], 1 if c == "+" else 0, 1 if c == "?" else None)
            elif c == "{":
                m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(self.s, self.i)
                lo = int(m.group(1))
                hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
                self.i = m.end()
                items[-1] = ("rep", items[-1], lo, hi)
            else:
                items.append(self.item())

    def item(self):
        c = self.s[self.i]
        if c == '"':
            self.i += 1
            out = []
            while self.s[self.i] != '"':
                out.append(self.char())
            self.i += 1
            return ("lit", "".join(out))
        if c == "[":
            self.i += 1
            neg = self.s[self.i] == "^"
            if neg:
                self.i += 1
            ranges = []
            while self.s[self.i] != "]":
                lo = hi = self.char()
                if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                    self.i += 1
                    hi = self.char()
                ranges.append((ord(lo), ord(hi)))
            self.i += 1
            return ("cls", neg, ranges)
        if c == ".":
            self.i += 1
            return ("cls", True, [])
        if c == "(":
            self.i += 1
            node = self.alternates()
            assert self.s[self.i] == ")"
            self.i += 1
            return node
        m = _NAME.match(self.s, self.i)
        self.i = m.end()
        return ("ref", m.group(0))


def parse(text):
    return _Parser(text).parse()


def _re_char(c):
    """c as a regex character that survives Lark's own unescaping of /.../ literals."""
    if c < 0x80 and chr(c).isalnum():
        return chr(c)
    if 0x20 <= c < 0x7F:
        return "\\" + chr(c)
    return f"\\U{c:08x}"


def _cls_regex(neg, ranges):
    body = "".join(f"{_re_char(lo)}-{_re_char(hi)}" for lo, hi in ranges)
    if neg and not ranges:
        return "/[\\U00000000-\\U0010ffff]/"
    return f"/[{'^' if neg else ''}{body}]/"


class Reference:
    """The language of a GBNF grammar: accepts(text) by Lark's Earley parser, sample(rng)."""

    def __init__(self, text):
        self.rules = parse(text)
        self.names = {n: f"r{i}" for i, n in enumerate(self.rules)}
        self.terms = {}
        lines = ["start: " + self.names["root"]]
        for n, node in self.rules.items():
            lines.append(f"{self.names[n]}: {self._lark(node)}")
        lines += [f"{t}: {p}" for p, t in self.terms.items()]
        self.lark_text = "\n".join(lines)
        self.parser = lark.Lark(self.lark_text, parser="earley", lexer="dynamic")

    def _term(self, pattern):
        return self.terms.setdefault(pattern, f"T{len(self.terms)}")

    def _lark(self, node):
        kind = node[0]
        if kind == "alt":
            return "(" + " | ".join(self._lark(s) for s in node[1]) + ")"
        if kind == "seq":
            return " ".join(self._lark(x) for x in node[1])
        if kind == "lit":
            return " ".join(self._term(_cls_regex(False, [(ord(c), ord(c))])) for c in node[1])
        if kind == "cls":
            return self._term(_cls_regex(node[1], node[2]))
        if kind == "ref":
            return self.names[node[1]]
        inner, lo, hi = "(" + self._lark(node[1]) + ")", node[2], node[3]
        if hi is None:
            return f"{inner} ~ {lo} {inner}*" if lo else f"{inner}*"
        return f"({inner} ~ {lo}..{hi})" if hi else ""

    def accepts(self, text):
        try:
            self.parser.parse(text)
            return True
        except lark.exceptions.LarkError:
            return False

    def sample(self, rng):
        """A random string of the language, or None when a draw ran too deep."""
        out = []
        try:
            self._gen(("ref", "root"), rng, 0, out)
        except RecursionError:
            return None
        return "".join(out)

    def _gen(self, node, rng, depth, out):
        if depth > 40:
            raise RecursionError
        kind = node[0]
        if kind == "alt":
            seqs = node[1]
            # deep down, prefer the shortest alternatives so that draws end
            if depth > 20:
                seqs = sorted(seqs, key=lambda s: len(s[1]))[:1]
            self._gen(rng.choice(seqs), rng, depth + 1, out)
        elif kind == "seq":
            for x in node[1]:
                self._gen(x, rng, depth + 1, out)
        elif kind == "lit":
            out.append(node[1])
        elif kind == "cls":
            out.append(_draw_char(rng, node[1], node[2]))
        elif kind == "ref":
            self._gen(self.rules[node[1]], rng, depth + 1, out)
        else:
            lo, hi = node[2], node[3]
            n = lo + (rng.randint(0, min(3, hi - lo)) if hi is not None else min(int(rng.expovariate(0.7)), 4))
            for _ in range(n):
                self._gen(node[1], rng, depth + 1, out)


def _draw_char(rng, neg, ranges):
    def inside(c):
        return any(lo <= c <= hi for lo, hi in ranges)
    if not neg:
        lo, hi = rng.choice(ranges)
        c = rng.randint(lo, hi)
        while 0xD800 <= c <= 0xDFFF:
            c = rng.randint(lo, hi)
        return chr(c)
    while True:
        c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0, 0x7F), rng.randint(0x80, 0x7FF),
                        rng.randint(0x800, 0xFFFF), rng.randint(0x10000, 0x10FFFF)])
        if not inside(c) and not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def mutants(rng, text, alphabet, n):
    """n near misses of text: a character dropped, inserted or replaced."""
    out = []
    for _ in range(n):
        i = rng.randint(0, len(text))
        op = rng.randint(0, 2)
        if op == 0 and text:
            i = min(i, len(text) - 1)
            out.append(text[:i] + text[i + 1:])
        elif op == 1:
            out.append(text[:i] + rng.choice(alphabet) + text[i:])
        elif text:
            i = min(i, len(text) - 1)
            out.append(text[:i] + rng.choice(alphabet) + text[i + 1:])
    return out
