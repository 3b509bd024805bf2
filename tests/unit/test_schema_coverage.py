#!/usr/bin/env python3
"""JSON Schema coverage of the structured-output engine, checked against Python's jsonschema.

    test_schema_coverage.py SO_WALK [first|second]

For every schema of schema_corpus.py (handwritten cases and seeded random ones; "first" /
"second" run one half each so that ctest can run them side by side):
  - the engine compiles it, or refuses it naming the expected word ("no value" for a schema
    nothing can meet; a generated schema may be refused so only when no candidate below is
    valid);
  - random walks under the mask (so_walk, test vocabulary, every token's bit checked at every
    step) end in texts that validate (Draft 2020-12, formats checked, numbers read exactly as
    Decimals);
  - candidate texts: every JSON value built from the schema's own atoms (property names,
    enum / const values, bounds and their neighbours, multiples, format examples, walk outputs)
    up to a small size, all of them, then a sample of larger ones; instances drawn by
    hypothesis-jsonschema that validate; near misses of both (a character dropped, inserted,
    replaced). The mask's verdict on each (so_walk --accept) must agree with jsonschema:
    accepted ⇒ valid, always; valid ⇒ accepted for texts in the engine's output form: compact,
    written as Python's json.dumps writes the value (numbers without exponent, no "-0", at most
    40 bytes), format strings in the forms docs/structured-output.md lists.
"""
import decimal
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import warnings
from decimal import Decimal

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema_corpus  # noqa: E402

decimal.getcontext().prec = 200  # exact remainders of 40-digit numbers (multipleOf)
WALK = sys.argv[1]
PART = sys.argv[2] if len(sys.argv) > 2 else "all"
failures = []
stats = {"unjudged": 0, "schemas": 0, "compiled": 0, "refused": 0, "walks": 0, "candidates": 0, "valid": 0, "accepted": 0,
         "hypothesis": 0, "complete_checked": 0}
TMP = tempfile.mkdtemp(prefix="so_cov_")

try:
    warnings.filterwarnings("ignore")
    from hypothesis import HealthCheck, given, settings
    from hypothesis_jsonschema import from_schema
    HAVE_HYPOTHESIS = True
except ImportError:
    HAVE_HYPOTHESIS = False

# The forms the engine writes for each format (so_format.c); jsonschema accepts more. DATE: every
# calendar date the engine writes is one jsonschema accepts; this only says the shape.
DATE = r"\d{4}-\d{2}-\d{2}"
TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
PCHAR = r"(?:[a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})"
OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
H16 = r"[0-9a-fA-F]{1,4}"
LS32 = f"(?:{H16}:{H16}|{OCTET}\\.{OCTET}\\.{OCTET}\\.{OCTET})"
IPV6 = "|".join([  # RFC 3986's IPv6address
    f"(?:{H16}:){{6}}{LS32}", f"::(?:{H16}:){{5}}{LS32}", f"(?:{H16})?::(?:{H16}:){{4}}{LS32}",
    f"(?:(?:{H16}:){{0,1}}{H16})?::(?:{H16}:){{3}}{LS32}", f"(?:(?:{H16}:){{0,2}}{H16})?::(?:{H16}:){{2}}{LS32}",
    f"(?:(?:{H16}:){{0,3}}{H16})?::{H16}:{LS32}", f"(?:(?:{H16}:){{0,4}}{H16})?::{LS32}",
    f"(?:(?:{H16}:){{0,5}}{H16})?::{H16}", f"(?:(?:{H16}:){{0,6}}{H16})?::"])
FORMAT_FORMS = {
    "date": DATE, "time": TIME, "date-time": DATE + "T" + TIME,
    "uuid": r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}",
    "email": r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@" + LABEL + r"(?:\." + LABEL + ")+",
    "ipv4": r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
    "ipv6": f"(?:{IPV6})",
    "uri": r"[a-zA-Z][a-zA-Z0-9+.-]*:(?://(?:[a-zA-Z0-9._~-]|%[0-9a-fA-F]{2})+(?::\d{1,5})?(?:/" + PCHAR + "*)*|/(?:"
           + PCHAR + "+(?:/" + PCHAR + "*)*)?|" + PCHAR + "+(?:/" + PCHAR + "*)*)?"
           r"(?:\?(?:" + PCHAR + r"|[/?])*)?(?:#(?:" + PCHAR + r"|[/?])*)?",
}
FORMAT_EXAMPLES = {
    "date": ["2024-02-29", "2023-02-29", "1999-12-31", "0001-01-01", "2024-13-01"],
    "time": ["12:30:00Z", "23:59:59.5+02:00", "24:00:00Z", "08:15:00"],
    "date-time": ["2024-06-01T12:00:00Z", "2024-06-01T25:00:00Z", "2024-06-01 12:00:00Z"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"],
    "email": ["a@b.co", "ab.c", "x.y@ex-ample.org"],
    "uri": ["https://example.com/a?b=c#d", "urn:isbn:0451450523", "not a uri"],
    "ipv4": ["192.168.0.1", "256.1.1.1", "01.2.3.4", "0.0.0.0"],
    "ipv6": ["::1", "::", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::ffff:192.168.0.1",
             "1::2::3", "1:2:3:4:5:6:7:8:9", "12345::", "fe80::1%eth0", "::ffff:01.2.3.4", "1:2:3:4:5:6:7::8"],
}


# ---- canonical text of a value (the engine's output form) ----

def num_text(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    d = x if isinstance(x, Decimal) else Decimal(repr(x))
    if not d.is_finite() or abs(d.adjusted()) > 40 or -d.as_tuple().exponent > 40:
        return None
    t = format(d, "f")
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    if t in ("-0", ""):
        t = "0"
    return t


def dumps(v):
    """Compact JSON as the engine writes it; None when the value has no such form."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, Decimal)):
        t = num_text(v)
        return t if t is not None and len(t) <= 40 else None
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        parts = [dumps(e) for e in v]
        return None if None in parts else "[" + ",".join(parts) + "]"
    if isinstance(v, dict):
        parts = []
        for k, e in v.items():
            t = dumps(e)
            if t is None:
                return None
            parts.append(dumps(k) + ":" + t)
        return "{" + ",".join(parts) + "}"
    return None


def exact_number(t):
    try:
        return Decimal(t)
    except decimal.InvalidOperation:
        return float(t)  # an exponent past Decimal's range: as Python's json reads it


def load(text):
    return json.loads(text, parse_float=exact_number)


def strings_in(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for e in v:
            yield from strings_in(e)
    elif isinstance(v, dict):
        for k, e in v.items():
            yield k
            yield from strings_in(e)


# ---- schema walking ----

def walk_schema(s):
    if isinstance(s, dict):
        yield s
        for v in s.values():
            yield from walk_schema(v)
    elif isinstance(s, list):
        for v in s:
            yield from walk_schema(v)


def formats_of(schema):
    return {s["format"] for s in walk_schema(schema) if isinstance(s.get("format"), str)}


def atoms_of(schema):
    """Scalar atoms and object keys the candidates are built from."""
    atoms = [None, True, False, 0, 1, -1, 2, 7, 10, 100, Decimal("0.5"), Decimal("-2.5"), "", "a", "ab", "x1"]
    keys = ["zz"]
    for s in walk_schema(schema):
        for k in s.get("properties", {}) if isinstance(s.get("properties"), dict) else {}:
            keys.append(k)
        for k in s.get("required", []) if isinstance(s.get("required"), list) else []:
            keys.append(k)
        for kw in ("enum",):
            if isinstance(s.get(kw), list):
                atoms.extend(s[kw])
        if "const" in s:
            atoms.append(s["const"])
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            b = s.get(kw)
            if isinstance(b, (int, float, Decimal)) and not isinstance(b, bool):
                b = Decimal(str(b))
                atoms.extend([b, b + 1, b - 1, b + Decimal("0.5"), b - Decimal("0.25")])
        m = s.get("multipleOf")
        if isinstance(m, (int, float, Decimal)) and not isinstance(m, bool) and m > 0:
            m = Decimal(str(m))
            atoms.extend([m, 2 * m, -3 * m, m / 2])
        if isinstance(s.get("format"), str):
            atoms.extend(FORMAT_EXAMPLES.get(s["format"], []))
        for kw in ("minLength", "maxLength"):
            if isinstance(s.get(kw), int) and s[kw] <= 12:
                atoms.append("b" * s[kw])
                atoms.append("c" * (s[kw] + 1))
    keys = list(dict.fromkeys(keys))
    return atoms + keys, keys


def values_of_cost(atoms, keys, cost, memo):
    """Every value of exactly `cost` (atom 1; [] / {} 1 + their parts; a key 1)."""
    if cost in memo:
        return memo[cost]
    out = []
    if cost == 1:
        out = list(atoms) + [[], {}]
    else:
        out += [list(p) for p in sequences(atoms, keys, cost - 1, memo)]
        for pairs in pair_sequences(atoms, keys, cost - 1, memo):
            out.append(dict(pairs))
    memo[cost] = out
    return out


def sequences(atoms, keys, cost, memo):
    """Non-empty lists of values whose costs sum to cost."""
    for first in range(1, cost + 1):
        for v in values_of_cost(atoms, keys, first, memo):
            if first == cost:
                yield (v,)
            else:
                for rest in sequences(atoms, keys, cost - first, memo):
                    yield (v,) + rest


def pair_sequences(atoms, keys, cost, memo, used=()):
    for k in keys:
        if k in used:
            continue
        for first in range(1, cost):
            for v in values_of_cost(atoms, keys, first, memo):
                if first + 1 == cost:
                    yield ((k, v),)
                else:
                    for rest in pair_sequences(atoms, keys, cost - first - 1, memo, used + (k,)):
                        yield ((k, v),) + rest


def random_value(rng, atoms, keys, cost):
    """A random value of at most `cost` (the same costs as values_of_cost)."""
    if cost <= 1 or rng.random() < 0.3:
        return rng.choice(atoms)
    budget = cost - 1
    if rng.random() < 0.5:
        out = []
        while budget > 0 and rng.random() < 0.8:
            c = rng.randrange(1, budget + 1)
            out.append(random_value(rng, atoms, keys, c))
            budget -= c
        return out
    out = {}
    for k in rng.sample(keys, len(keys)):
        if budget < 2 or rng.random() < 0.3:
            break
        c = rng.randrange(1, budget)
        out[k] = random_value(rng, atoms, keys, c)
        budget -= c + 1
    return out


def candidate_texts(schema, extra_values, rng):
    atoms, keys = atoms_of(schema)
    for v in extra_values:
        if not isinstance(v, (list, dict)):
            atoms.append(v)
    uniq = {}
    for a in atoms:
        t = dumps(a)
        if t is not None:
            uniq.setdefault(t, a)
    atoms = list(uniq.values())[:48]
    keys = keys[:8]
    memo = {}
    texts = []
    for cost in (1, 2, 3):  # all of them
        texts += [dumps(v) for v in values_of_cost(atoms, keys, cost, memo)]
    texts += [dumps(random_value(rng, atoms, keys, rng.randrange(4, 8))) for _ in range(1500)]
    return [t for t in dict.fromkeys(texts) if t is not None]


def near_misses(text, rng, n):
    alphabet = '{}[]",:0123456789.-eEabcxyz\\ '
    out = []
    for _ in range(n):
        i = rng.randrange(len(text) + 1)
        op = rng.randrange(3)
        if op == 0 and i < len(text):
            out.append(text[:i] + text[i + 1:])
        elif op == 1:
            out.append(text[:i] + rng.choice(alphabet) + text[i:])
        elif i < len(text):
            out.append(text[:i] + rng.choice(alphabet) + text[i + 1:])
    return out


# ---- verdicts ----

def strict(s):
    """s with OpenAI strict mode's default made explicit, schema by schema: properties without
    additionalProperties close the object. The engine closes a whole conjunction instead (the
    union of what its allOf / $ref members declare), which accepts at least this."""
    if isinstance(s, list):
        return [strict(e) for e in s]
    if not isinstance(s, dict):
        return s
    out = {k: strict(v) for k, v in s.items()}
    if "properties" in s and "additionalProperties" not in s:
        out["additionalProperties"] = False
    return out


def ascii_pattern(validator, pattern, instance, schema):
    """`pattern` with ECMA-262's ASCII classes (\\d \\w as JSON Schema reads them; Python's re
    would take any Unicode digit or letter): the engine's reading. Its \\s is ASCII too, where
    ECMA-262's also takes Unicode spaces: the engine writes none of those."""
    if isinstance(instance, str) and not re.search(pattern, instance, re.ASCII):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


class Judge:
    def __init__(self, schema):
        exact = json.loads(json.dumps(schema), parse_float=Decimal)
        cls = jsonschema.validators.validator_for(exact, default=jsonschema.Draft202012Validator)
        cls = jsonschema.validators.extend(cls, {"pattern": ascii_pattern})
        self.checker = cls.FORMAT_CHECKER  # the draft's own ("time" differs between drafts)
        self.validator = cls(exact, format_checker=self.checker)
        self.strict = cls(strict(exact), format_checker=self.checker)
        self.floats = cls(schema, format_checker=self.checker)
        self.formats = formats_of(schema)

    def value(self, text):
        """(valid, expected): valid by jsonschema; expected = valid, in the engine's output form
        and valid under strict mode's default (the mask must accept it)."""
        try:
            v = json.loads(text, parse_float=exact_number, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except (ValueError, RecursionError, decimal.InvalidOperation):
            return False, False
        try:
            valid = self.validator.is_valid(v)
        except decimal.InvalidOperation:  # a remainder past Decimal's range (1e300 % 0.1): as floats
            try:
                return self.floats.is_valid(json.loads(text)), False
            except OverflowError:  # 1e999 is infinite as a float: jsonschema cannot judge it
                stats["unjudged"] += 1
                return True, False
        except (RecursionError, OverflowError):
            return False, False
        return valid, valid and self.canonical(text, v) and self.strict.is_valid(v)

    def errors(self, text):
        try:
            return [e.message for e in self.validator.iter_errors(load(text))][:1]
        except (ValueError, decimal.InvalidOperation) as e:
            return [repr(e)]

    def canonical(self, text, v):
        if dumps(v) != text:
            return False
        for s in strings_in(v):
            for f in self.formats:
                if self.checker.conforms(s, f) and not re.fullmatch(FORMAT_FORMS[f], s):
                    return False
        return True


def so_walk(args, timeout=300):
    return subprocess.run([WALK, *args], capture_output=True, timeout=timeout)


def verdicts(path, texts):
    hexfile = os.path.join(TMP, "accept.hex")
    with open(hexfile, "w") as fh:
        for t in texts:
            fh.write(t.encode("utf-8").hex() + "\n")
    r = so_walk(["--schema", path, "--accept", hexfile])
    if r.returncode != 0:
        raise RuntimeError(f"so_walk --accept rc {r.returncode}: {r.stderr.decode(errors='replace')[-300:]}")
    return [line == "1" for line in r.stdout.decode().split("\n")[:-1]]


def hypothesis_values(schema, n):
    if not HAVE_HYPOTHESIS:
        return []
    out = []
    try:
        @settings(max_examples=n, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(from_schema(schema))
        def draw(v):
            out.append(v)
        draw()
    except Exception:  # schemas hypothesis-jsonschema cannot handle (recursion, prefixItems, ...)
        pass
    return out


def check_case(index, name, schema, refused):
    stats["schemas"] += 1
    path = os.path.join(TMP, "schema.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(schema, fh, ensure_ascii=False)
    try:
        judge = Judge(schema)
    except jsonschema.SchemaError as e:
        failures.append(f"{name}: corpus schema is not valid JSON Schema: {e.message}")
        return
    rng = random.Random(index)
    r = so_walk(["--schema", path, "--samples", "6", "--seed", str(index + 1), "--max-steps", "600"])
    err = r.stderr.decode(errors="replace").strip()
    if r.returncode == 3:
        stats["refused"] += 1
        if refused and refused in err:
            return
        if not refused and "allows no value" in err:  # must really be empty: no candidate may validate
            found = [t for t in candidate_texts(schema, [], rng) if judge.value(t)[0]]
            found += [t for t in map(dumps, hypothesis_values(schema, 10)) if t and judge.value(t)[0]]
            if found:
                failures.append(f"{name}: refused as allowing no value, but {found[0]!r} is valid")
            return
        failures.append(f"{name}: refused ({err}), want {('a refusal naming ' + repr(refused)) if refused else 'it compiled'}")
        return
    if r.returncode != 0:
        failures.append(f"{name}: so_walk rc {r.returncode}: {err[-400:]}")
        return
    if refused:
        failures.append(f"{name}: compiled, want a refusal naming {refused!r}")
        return
    stats["compiled"] += 1
    walks = r.stdout.decode("utf-8").split("\n")[:-1]
    stats["walks"] += len(walks)
    walk_values = []
    for line in walks:
        valid, _ = judge.value(line)
        if not valid:
            failures.append(f"{name}: walk output {line!r} is not valid: {judge.errors(line)}")
        else:
            walk_values.append(load(line))
    drawn = []
    for v in hypothesis_values(schema, 12):
        t = dumps(v)
        if t is not None and judge.value(t)[0]:
            drawn.append(t)
    stats["hypothesis"] += len(drawn)
    extra = [s for v in walk_values for s in strings_in(v)][:10] + [load(t) for t in drawn][:10]
    texts = candidate_texts(schema, extra, rng) + drawn + walks
    for t in drawn[:6] + walks[:4]:
        texts += near_misses(t, rng, 25)
    texts = list(dict.fromkeys(texts))
    stats["candidates"] += len(texts)
    try:
        got = verdicts(path, texts)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        failures.append(f"{name}: {e}")
        return
    if len(got) != len(texts):
        failures.append(f"{name}: {len(got)} verdicts for {len(texts)} texts")
        return
    bad = 0
    for t, accepted in zip(texts, got):
        valid, canonical = judge.value(t)
        stats["valid"] += valid
        stats["accepted"] += accepted
        stats["complete_checked"] += canonical
        if accepted and not valid:
            failures.append(f"{name}: mask accepts {t!r}, which is not valid")
            bad += 1
        elif canonical and not accepted:
            failures.append(f"{name}: mask refuses {t!r}, which is valid")
            bad += 1
        if bad >= 3:
            break


def main():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for f in ("date-time", "time", "uri"):
        if checker.conforms("not a " + f, f):
            sys.exit(f"jsonschema does not check format {f}: install ops/requirements-test.txt (rfc3339-validator, rfc3986-validator)")
    cases = schema_corpus.CASES + schema_corpus.generated(260, 2026)
    if PART == "first":
        cases = cases[: len(cases) // 2]
    elif PART == "second":
        cases = cases[len(cases) // 2:]
    for i, (name, schema, refused) in enumerate(cases):
        try:
            check_case(i, name, schema, refused)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: so_walk timed out")
    print(f"{stats['schemas']} schemas: {stats['compiled']} compiled, {stats['refused']} refused; "
          f"{stats['walks']} walk outputs valid-checked; {stats['candidates']} candidate texts, {stats['valid']} valid, "
          f"{stats['accepted']} accepted by the mask, {stats['complete_checked']} in output form "
          f"(completeness checked); {stats['hypothesis']} hypothesis instances; {stats['unjudged']} numbers "
          f"past float range unjudged"
          + ("" if HAVE_HYPOTHESIS else " (hypothesis-jsonschema missing: none drawn)"))
    if failures:
        print(f"{len(failures)} failures:")
        print("\n".join(failures[:60]))
        sys.exit(1)


if __name__ == "__main__":
    main()
