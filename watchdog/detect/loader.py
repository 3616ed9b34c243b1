"""YAML rule files -> validated :class:`Rule` objects, with ``FILE:LINE`` errors.

Files are composed with PyYAML into nodes (which carry line marks) and walked by hand, so
every error names the file, the line and the offending key or token. The format is in
``docs/rules.md``. Every problem raises :class:`watchdog.errors.InputError` (one line).

Everything a rule holds is bounded here, where it is read (``docs/rules.md``, "Limits"):
the expressions by :mod:`watchdog.detect.lang`; a summary's format specs to a width of
:data:`MAX_FORMAT_WIDTH` and a precision of :data:`MAX_FORMAT_PRECISION` (a
``{temp:.1500000000f}`` once took 2.9 GB to check, and ended a reload in MemoryError), with
no nested ``{}`` inside a spec; ``for:``, ``keep_firing_for:`` and a ``learned()`` wait's
durations to :data:`MAX_FOR_S` (7 days: less than the 90 days the state database keeps
anything, and a condition that must hold for a week before it pages is not an alert).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from watchdog.detect.lang import LangError, Node, compile_expr, max_window
from watchdog.detect.waits import LearnedWait, parse_learned_wait
from watchdog.errors import InputError
from watchdog.incident import KINDS, OWN_KINDS, SEVERITIES
from watchdog.units import parse_duration
from watchdog.untyped import Json, JsonDoc

#: a rule's error for the key it is about: ``err(key, message)`` (``FILE:LINE: rule NAME: …``)
Err = Callable[[str, str], InputError]

RULE_KINDS = tuple(k for k in KINDS if k not in OWN_KINDS)  # `agent` is the agent's own

KEYS = ("name", "kind", "severity", "scope", "condition", "for", "clear", "keep_firing_for",
        "inhibited_by", "evidence", "summary", "labels", "runbook")
TEMPLATE_FIELDS = ("for_s", "gpus", "host", "rule", "kind", "n_gpus")
#: the widest field a summary may format (characters; the shipped rules use none)
MAX_FORMAT_WIDTH = 40
#: the most digits after the point a summary may format (the shipped rules use 1; a double
#: holds 17 significant digits)
MAX_FORMAT_PRECISION = 12
#: the longest ``for:``, ``keep_firing_for:`` or ``learned()`` duration (s): 7 days (the
#: shipped rules: at most 5 min)
MAX_FOR_S = 7 * 86400.0
#: a format spec: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_SPEC = re.compile(r"^(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<prec>\d+))?"
                   r"[bcdeEfFgGnosxX%]?$", re.S)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_LEARNED = re.compile(r"^learned\((.*)\)$", re.S)


@dataclass(frozen=True)
class Rule:
    """One validated rule. Durations in seconds; expressions compiled to ASTs."""

    name: str
    kind: str
    severity: str
    scope: str
    condition: Node
    condition_src: str
    for_s: float
    learned: LearnedWait | None = None  # for: learned(...): for_s is its default
    clear: Node | None = None
    keep_firing_for: float = 0.0
    inhibited_by: tuple[str, ...] = ()
    evidence: dict[str, Node] = field(default_factory=dict)
    summary: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    runbook: str | None = None
    file: str = "<memory>"
    line: int = 0
    key_lines: dict[str, int] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def lookback(self) -> float:
        """Longest window any of the rule's expressions uses (s)."""
        nodes = [self.condition, *( [self.clear] if self.clear else []),
                 *self.evidence.values()]
        return max(max_window(n) for n in nodes)


class RuleSet(Sequence[Rule]):
    """Loaded rules in evaluation order: every rule after the rules that inhibit it."""

    def __init__(self, rules: Sequence[Rule], sources: Sequence[str] = ()) -> None:
        self.rules = _order(list(rules))
        self.sources = tuple(sources)
        self.by_name = {r.name: r for r in self.rules}

    def __getitem__(self, i):  # an index or a slice, as a list's
        return self.rules[i]

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def inhibitors(self, rule: Rule) -> list[Rule]:
        """Rules that inhibit ``rule`` (named directly or by kind)."""
        names = set(rule.inhibited_by)
        return [r for r in self.rules
                if r is not rule and (r.name in names or r.kind in names)]


def _order(rules: list[Rule]) -> list[Rule]:
    """Topological order by ``inhibited_by``; a cycle is an InputError."""
    names = {r.name for r in rules}
    kinds: dict[str, list[str]] = {}
    for r in rules:
        kinds.setdefault(r.kind, []).append(r.name)
    deps: dict[str, set[str]] = {}
    for r in rules:
        d: set[str] = set()
        for ref in r.inhibited_by:
            if ref in names:
                d.add(ref)
            elif ref in kinds:
                d.update(n for n in kinds[ref] if n != r.name)
            elif ref not in KINDS:
                at = r.key_lines.get("inhibited_by", r.line)
                raise InputError(f"{r.file}:{at}: rule {r.name}: inhibited_by: unknown rule "
                                 f"or kind {ref!r}")
        deps[r.name] = d
    out: list[Rule] = []
    state: dict[str, int] = {}
    by = {r.name: r for r in rules}

    def visit(n: str, chain: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            cyc = " -> ".join([*chain[chain.index(n):], n])
            raise InputError(f"{by[n].where}: rule {n}: inhibited_by cycle: {cyc}")
        state[n] = 1
        for m in sorted(deps[n]):
            visit(m, [*chain, n])
        state[n] = 2
        out.append(by[n])

    for r in rules:
        visit(r.name, [])
    return out


# --- loading ----------------------------------------------------------------------------


def default_rules_dir() -> Path:
    """The shipped rules of *this* copy of watchdog.

    An installed wheel has them beside the package (``watchdog/default_rules``); a source
    checkout or an editable install has the repository's top-level ``rules/``. Looking next
    to this file (rather than asking ``importlib.resources`` for the namespace package,
    which may span several folders) keeps the rules and the code from different installs
    apart.
    """
    pkg = Path(__file__).resolve().parents[1]
    for candidate in (pkg / "default_rules", pkg.parent / "rules"):
        if candidate.is_dir():
            return candidate
    return Path(str(resources.files("watchdog.default_rules")))


def rule_files(paths: Sequence[str | Path] | None, *, what: str = "rule") -> list[Path]:
    """Expand files and folders (``*.yaml``/``*.yml``, not recursive) in a stable order;
    ``None`` is the shipped rules. ``what`` names the files in the error for a missing
    path (``rule``, ``rule test``)."""
    out: list[Path] = []
    for p in [default_rules_dir()] if paths is None else paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted([*path.glob("*.yaml"), *path.glob("*.yml")]))
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{path}: no such {what} file or folder")
    return out


def load_rules(paths: Sequence[str | Path] | None = None) -> RuleSet:
    """Load and validate rules from files/folders; ``None`` = the shipped defaults."""
    rules: list[Rule] = []
    seen: dict[str, Rule] = {}
    files = rule_files(paths)
    for f in files:
        for r in load_file(f):
            if r.name in seen:
                raise InputError(f"{r.where}: rule {r.name}: duplicate rule name (first "
                                 f"defined at {seen[r.name].where})")
            seen[r.name] = r
            rules.append(r)
    return RuleSet(rules, [str(f) for f in files])


def load_file(path: str | Path) -> list[Rule]:
    """Rules of one file (duplicates within the file are errors)."""
    from watchdog import yamlsafe

    path = Path(path)
    return parse_rules_text(yamlsafe.read_text(path, "rule file"), str(path))


def parse_rules_text(text: str, file: str = "<memory>") -> list[Rule]:
    """Rules from YAML text; ``file`` names it in errors."""
    root = _compose(text, file)
    if root is None:
        raise InputError(f"{file}: no rules in file")
    items = root
    if isinstance(root, yaml.MappingNode):
        top = {k.value: v for k, v in root.value}
        if set(top) != {"rules"}:
            bad = next(k for k, _ in root.value if k.value != "rules")
            raise InputError(f"{file}:{_line(bad)}: unexpected top-level key {bad.value!r} "
                             "(a rule file is a list of rules, or `rules:` holding one)")
        items = top["rules"]
    if not isinstance(items, yaml.SequenceNode) or not items.value:
        raise InputError(f"{file}:{_line(items)}: expected a list of rules")
    out: list[Rule] = []
    names: dict[str, int] = {}
    for item in items.value:
        r = _rule(item, file)
        if r.name in names:
            raise InputError(f"{file}:{r.line}: rule {r.name}: duplicate rule name (first "
                             f"defined at {file}:{names[r.name]})")
        names[r.name] = r.line
        out.append(r)
    return out


def _compose(text: str, file: str = "<memory>") -> yaml.Node | None:
    """The YAML node tree of ``text``, read within the bounds of :mod:`watchdog.yamlsafe`
    (size, aliases, depth: through libyaml where PyYAML has it; an invalid file is named
    in the pure-Python parser's words)."""
    from watchdog import yamlsafe

    return yamlsafe.compose(text, file)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _plain(node: yaml.Node) -> Json:
    """A YAML node as plain Python (scalars stay strings)."""
    if isinstance(node, yaml.ScalarNode):
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [_plain(n) for n in node.value]
    return {k.value: _plain(v) for k, v in node.value}


def _rule(node: yaml.Node, file: str) -> Rule:
    line = _line(node)
    if not isinstance(node, yaml.MappingNode):
        raise InputError(f"{file}:{line}: a rule must be a mapping of keys")
    fields: dict[str, yaml.Node] = {}
    for k, v in node.value:
        fields[k.value] = v
    name = fields["name"].value if isinstance(fields.get("name"), yaml.ScalarNode) else "?"
    here = f"{file}:{line}: rule {name}"

    def err(key: str, msg: str) -> InputError:
        at = _line(fields[key]) if key in fields else line
        return InputError(f"{file}:{at}: rule {name}: {msg}")

    for k, _v in node.value:
        if k.value not in KEYS:
            raise InputError(f"{file}:{_line(k)}: rule {name}: unknown key {k.value!r} "
                             f"(expected one of: {', '.join(KEYS)})")
    for req in ("name", "kind", "severity", "condition"):
        if req not in fields:
            raise InputError(f"{here}: missing required key {req!r}")

    def scalar(key: str, default: str | None = None) -> str | None:
        if key not in fields:
            return default
        n = fields[key]
        if not isinstance(n, yaml.ScalarNode):
            raise err(key, f"{key}: expected a single value")
        return n.value

    if not _NAME.match(name):
        raise err("name", f"name {name!r}: use lower-case letters, digits and _")
    kind = scalar("kind")
    if kind not in RULE_KINDS:
        raise err("kind", f"kind {kind!r} is not one of: {', '.join(RULE_KINDS)}")
    severity = scalar("severity")
    if severity not in SEVERITIES:
        raise err("severity", f"severity {severity!r} is not one of: {', '.join(SEVERITIES)}")
    scope = scalar("scope", "gpu")
    if scope not in ("gpu", "node"):
        raise err("scope", f"scope {scope!r} is not gpu or node")

    def expr(key: str, src: str | None = None) -> Node:
        text = src if src is not None else scalar(key) or ""
        try:
            return compile_expr(str(text), scope or "gpu")
        except LangError as e:
            tok = f" at column {e.col}" if text else ""
            raise err(key, f"{key}: {e}{tok} in {str(text).strip()!r}") from None

    cond_src = str(scalar("condition"))
    condition = expr("condition")
    clear = expr("clear") if "clear" in fields else None
    for_text = scalar("for", "0") or "0"
    learned = None
    m = _LEARNED.match(for_text.strip())
    try:
        if m:
            learned = parse_learned_wait(m.group(1))
            for_s = learned.default
            longest = max(learned.default, learned.min, learned.margin)
        else:
            for_s = longest = parse_duration(for_text, what="for")
        keep = parse_duration(scalar("keep_firing_for", "0") or "0", what="keep_firing_for")
    except InputError as e:
        raise err("for" if "keep_firing_for" not in str(e) else "keep_firing_for",
                  str(e)) from None
    for key, secs in (("for", longest), ("keep_firing_for", keep)):
        if secs > MAX_FOR_S:
            raise err(key, f"{key}: {secs / 86400:.4g} days is longer than the "
                      f"{MAX_FOR_S / 86400:g} days a rule may wait (docs/rules.md, Limits)")

    inhibited: list[str] = []
    if "inhibited_by" in fields:
        raw = _plain(fields["inhibited_by"])
        inhibited = [raw] if isinstance(raw, str) else raw
        if not isinstance(inhibited, list) or not all(isinstance(x, str) for x in inhibited):
            raise err("inhibited_by", "inhibited_by: expected a list of rule names or kinds")
    evidence: dict[str, Node] = {}
    if "evidence" in fields:
        ev = fields["evidence"]
        if not isinstance(ev, yaml.MappingNode):
            raise err("evidence", "evidence: expected a mapping of name: expression")
        for k, v in ev.value:
            if not _NAME.match(k.value) or k.value in TEMPLATE_FIELDS:
                raise InputError(f"{file}:{_line(k)}: rule {name}: evidence name {k.value!r} "
                                 "invalid or reserved")
            if not isinstance(v, yaml.ScalarNode):
                raise InputError(f"{file}:{_line(v)}: rule {name}: evidence {k.value}: "
                                 "expected an expression")
            try:
                evidence[k.value] = compile_expr(v.value, scope)
            except LangError as e:
                raise InputError(f"{file}:{_line(v)}: rule {name}: evidence {k.value}: {e} "
                                 f"at column {e.col} in {v.value!r}") from None
    summary = scalar("summary", "") or ""
    _check_template(summary, set(evidence), err)
    labels = _plain(fields["labels"]) if "labels" in fields else {}
    if not isinstance(labels, dict):
        raise err("labels", "labels: expected a mapping")
    runbook = scalar("runbook")
    if runbook is not None:
        runbook = _runbook(runbook, file, err)
    return Rule(name=name, kind=kind, severity=severity, scope=scope, condition=condition,
                condition_src=cond_src, for_s=for_s, learned=learned, clear=clear,
                keep_firing_for=keep, inhibited_by=tuple(inhibited), evidence=evidence,
                summary=summary, labels={str(k): str(v) for k, v in labels.items()},
                runbook=runbook, file=file, line=line,
                key_lines={k: _line(v) for k, v in fields.items()})


def _runbook(value: str, file: str, err: Err) -> str:
    """A rule's ``runbook:``: an http(s) URL as written, or a file path, returned absolute
    so that a page quoting it can be followed on the node.

    A relative path is looked up beside the rule file, then beside the shipped rules: the
    shipped rules name ``../docs/runbooks/KIND.md`` (the wheel carries the pages too), and
    a shipped rule file copied elsewhere to edit a threshold keeps its runbook. A path
    found in neither place is an error here rather than a dead link in a page at 3 a.m."""
    if re.match(r"^https?://\S+$", value):
        return value
    if "://" in value or not value.strip() or any(c.isspace() for c in value):
        raise err("runbook", f"runbook {value!r} is neither an http(s) URL nor a file path")
    bases = [Path(file).parent if file != "<memory>" else Path.cwd(), default_rules_dir()]
    for base in bases:
        path = (base / value).resolve()
        if path.is_file():
            return str(path)
    raise err("runbook", f"runbook {value!r}: no such file {(bases[0] / value).resolve()} "
              "(a path is relative to the rule file, or to the shipped rules)")


def _check_spec(fname: str, spec: str, err: Err) -> None:
    """A summary field's format spec, bounded before anything is formatted with it."""
    m = _SPEC.match(spec)
    if "{" in spec or "}" in spec or m is None:
        raise err("summary", f"summary: field {{{fname}:{spec[:40]}}}: not a plain format "
                  "spec (e.g. .0f, >6.1f)")
    # compared as digit strings first: int() of a 5,000-digit width is an error of its own
    width, prec = (m.group(k) or "0" for k in ("width", "prec"))
    if len(width.lstrip("0")) > 6 or len(prec.lstrip("0")) > 6 or \
            int(width) > MAX_FORMAT_WIDTH or int(prec) > MAX_FORMAT_PRECISION:
        raise err("summary", f"summary: field {{{fname}:{spec[:40]}}}: width at most "
                  f"{MAX_FORMAT_WIDTH} and precision at most {MAX_FORMAT_PRECISION} "
                  "(docs/rules.md, Limits)")


def _check_template(summary: str, evidence: set[str], err: Err) -> None:
    """Only plain names from evidence and TEMPLATE_FIELDS; the format must work."""
    allowed = evidence | set(TEMPLATE_FIELDS)
    try:
        parsed = list(string.Formatter().parse(summary))
    except ValueError as e:
        raise err("summary", f"summary: {e}") from None
    dummy: JsonDoc = {}
    for _, fname, spec, _conv in parsed:
        if fname is None:
            continue
        _check_spec(fname, spec or "", err)
        if not fname.isidentifier():
            raise err("summary", f"summary: field {{{fname}}}: only plain names are allowed")
        if fname not in allowed:
            raise err("summary", f"summary: unknown field {{{fname}}} (evidence names and "
                                 f"{', '.join(TEMPLATE_FIELDS)})")
    for f in allowed:
        dummy[f] = "x" if f in ("gpus", "host", "rule", "kind") else 1.0
    try:
        summary.format_map(dummy)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise err("summary", f"summary: {e}") from None
