"""Threshold mutation testing of rules: ``watchdog rules test --mutate``.

Each numeric literal of a rule's ``condition``, ``clear`` and ``for`` (window durations
and percentages included, found with the rule language's own tokenizer so the mutant
differs from the original only in that number) is moved by x0.75 and x1.33, one at a
time. The rule tests that load the mutated rule's file are run against the mutated rule
set, in-process, with the parsed test cases reused. A mutant is *caught* when some case
fails; a mutant no case notices is a threshold no test pins, and is reported with the
rule, field, original and mutated text and ``file:line``. Hex literals (clock-event bit
masks) and the codes of an ``in (…)`` list (XIDs) are not thresholds and are not mutated.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from watchdog.detect.lang import LangError, compile_expr, tokenize
from watchdog.detect.loader import Rule, RuleSet, load_rules
from watchdog.detect.waits import parse_learned_wait
from watchdog.errors import InputError
from watchdog.pipeline.ruletest import Case, load_cases, run_case
from watchdog.units import parse_duration

FACTORS = (0.75, 1.33)
FIELDS = ("condition", "clear", "for")
_FOR_NUM = re.compile(r"(?<![A-Za-z_])(\d+\.?\d*|\.\d+)(ms|s|m|h|d)?(?![A-Za-z0-9_.])")


@dataclass(frozen=True)
class Mutant:
    """One moved number: ``src`` is the field's text with ``old`` replaced by ``new``."""

    rule: str
    field: str
    old: str
    new: str
    src: str
    where: str  # file:line of the field


@dataclass
class Result:
    """Outcome of a mutation run: every mutant and the ones no case caught."""

    mutants: list[Mutant]
    survivors: list[Mutant]
    broken: list[str]  # cases failing on the unmutated rules (score is meaningless then)

    @property
    def caught(self) -> int:
        return len(self.mutants) - len(self.survivors)

    @property
    def score(self) -> float:
        return self.caught / len(self.mutants) if self.mutants else 1.0


def _moved(text: str, factor: float) -> str | None:
    """``text`` (a number, no unit) times ``factor``, written like the original; None when
    rounding gives the original back."""
    v = float(text)
    nv = v * factor
    if "." not in text and "e" not in text.lower():
        out = str(round(nv))
    else:
        decimals = len(text.split(".", 1)[1]) if "." in text else 0
        out = f"{nv:.{max(decimals, 2)}f}".rstrip("0").rstrip(".")
    return None if float(out) == v else out


def _spans(field: str, src: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, digits) of every mutable number in ``src`` (0-based, end exclusive)."""
    if field == "for":
        for m in _FOR_NUM.finditer(src):
            yield m.start(1), m.end(1), m.group(1)
        return
    toks = tokenize(src)
    in_list = False
    for tok in toks:
        if tok.kind == "kw" and tok.text == "in":
            in_list = True  # `x in (13, 31)` lists codes (XIDs), not thresholds
        elif in_list and tok.kind == "op" and tok.text == ")":
            in_list = False
        if in_list or tok.kind != "num" or tok.text.lower().startswith("0x"):
            continue
        digits = tok.text[:len(tok.text) - len(tok.unit or "")]
        yield tok.col - 1, tok.col - 1 + len(digits), digits


def _raw_fields(path: str) -> dict[tuple[str, str], str]:
    """The written ``clear`` and ``for`` text of every rule of ``path``, by (rule, key): the
    loaded Rule keeps only their values, and a mutant must differ in one number only."""
    import yaml

    from watchdog import yamlsafe

    # read within the bounds of every rule file (size, aliases, depth); it was loaded as
    # rules just before, but may have changed since: anything odd gives no raw text
    root = yamlsafe.compose(yamlsafe.read_text(path, "rule file"), str(path))
    items = root
    if isinstance(root, yaml.MappingNode):
        items = dict((k.value, v) for k, v in root.value).get("rules")
    out: dict[tuple[str, str], str] = {}
    if not isinstance(items, yaml.SequenceNode):
        return out
    for item in items.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        f = {k.value: v for k, v in item.value}
        name = f.get("name")
        for key in ("clear", "for"):
            if key in f and isinstance(f[key], yaml.ScalarNode) and \
                    isinstance(name, yaml.ScalarNode):
                out[(name.value, key)] = str(f[key].value)
    return out


def mutants(rules: Sequence[Rule]) -> list[Mutant]:
    """Every x0.75 / x1.33 mutant of every rule's condition, clear and for."""
    out: list[Mutant] = []
    raw: dict[str, dict[tuple[str, str], str]] = {}
    for r in rules:
        if r.file not in raw:
            raw[r.file] = _raw_fields(r.file) if Path(r.file).is_file() else {}
        for field in FIELDS:
            src = (r.condition_src if field == "condition"
                   else raw[r.file].get((r.name, field)))
            if not src:
                continue
            line = r.key_lines.get(field, r.line)
            for a, b, digits in _spans(field, src):
                for f in FACTORS:
                    new = _moved(digits, f)
                    if new is None:
                        continue
                    unit = _unit_after(src, b)
                    out.append(Mutant(r.name, field, src[a:b] + unit, new + unit,
                                      src[:a] + new + src[b:], f"{_shown(r.file)}:{line}"))
    return out


def _shown(file: str) -> str:
    """``file`` relative to the working folder when it lies under it (shorter lines)."""
    try:
        return str(Path(file).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return file


def _unit_after(src: str, b: int) -> str:
    m = re.match(r"(ms|s|m|h|d|%)?", src[b:])
    return m.group(0) if m else ""


def apply(rule: Rule, m: Mutant) -> Rule | None:
    """``rule`` with the mutant's field text; None when the mutated text is invalid (a
    window moved past 1 h, say): such a mutant is not counted."""
    try:
        if m.field == "condition":
            return dataclasses.replace(rule, condition=compile_expr(m.src, rule.scope),
                                       condition_src=m.src)
        if m.field == "clear":
            return dataclasses.replace(rule, clear=compile_expr(m.src, rule.scope))
        lm = re.match(r"^\s*learned\((.*)\)\s*$", m.src, re.S)
        if lm:
            learned = parse_learned_wait(lm.group(1))
            return dataclasses.replace(rule, learned=learned, for_s=learned.default)
        return dataclasses.replace(rule, for_s=parse_duration(m.src, what="for"))
    except (LangError, InputError):
        return None


def run(test_files: Sequence[str | Path]) -> Result:
    """Mutate every rule the test files load and run the cases that load it."""
    cases: list[Case] = []
    for p in test_files:
        cases.extend(load_cases(p))
    groups: dict[tuple[str, ...] | None, tuple[RuleSet, list[Case]]] = {}
    for c in cases:
        key = None if c.rule_files is None else tuple(map(str, c.rule_files))
        if key not in groups:
            groups[key] = (load_rules(c.rule_files), [])
        groups[key][1].append(c)
    broken: list[str] = []
    for rs, cs in groups.values():  # a case failing already would "catch" every mutant
        bad = [c for c in cs if run_case(c, rs)]
        broken.extend(f"{c.file}:{c.line}: {c.name}" for c in bad)
        cs[:] = [c for c in cs if all(c is not b for b in bad)]
    # rule identity: (file, name); each group whose rule set holds it runs its cases,
    # the group that loads fewest rules (the rule's own test file) first
    by_rule: dict[tuple[str, str], Rule] = {}
    for rs, _ in groups.values():
        for r in rs:
            by_rule.setdefault((r.file, r.name), r)
    all_mutants: list[Mutant] = []
    survivors: list[Mutant] = []
    order = sorted(groups.values(), key=lambda g: len(g[0]))
    for _key, rule in sorted(by_rule.items()):
        for m in mutants([rule]):
            mutated = apply(rule, m)
            if mutated is None:
                continue
            all_mutants.append(m)
            if not _caught(rule, mutated, order):
                survivors.append(m)
    return Result(all_mutants, survivors, broken)


def _caught(rule: Rule, mutated: Rule, groups: list[tuple[RuleSet, list[Case]]]) -> bool:
    for rs, cs in groups:
        same = [r for r in rs if (r.file, r.name) == (rule.file, rule.name)]
        if not same:
            continue
        mrs = RuleSet([mutated if r is same[0] else r for r in rs], rs.sources)
        for c in cs:
            if run_case(c, mrs):
                return True
    return False


def report(res: Result) -> list[str]:
    """Lines for the terminal: survivors (unpinned thresholds), then the score."""
    lines = [f"BROKEN {b} (fails on the unmutated rules)" for b in res.broken]
    for m in res.survivors:
        lines.append(f"unpinned {m.where}: {m.rule} {m.field}: {m.old} -> {m.new} "
                     "passes every test")
    lines.append(f"mutation score: {res.caught}/{len(res.mutants)} caught "
                 f"({100 * res.score:.0f} %)")
    return lines

