"""The condition language: tokenizer, recursive-descent parser and static checks.

Grammar and semantics are in ``docs/rules.md``. The parser builds a small immutable AST;
:func:`compile_expr` checks names, arities, window durations and scope, and returns the
AST. Evaluation (vectorised, over numpy arrays) is in :mod:`watchdog.detect.evaluate`.
Nothing here calls Python's ``eval``; names resolve only to catalogue metrics, derived
signals and the functions listed below.

Every expression is bounded where it is parsed (``docs/rules.md``, "Limits"), so no rule
file can exhaust the parser's stack or the evaluator's: at most :data:`MAX_TOKENS` tokens,
:data:`MAX_NESTING` levels of parentheses, calls, ``not`` and unary minus, and an AST of at
most :data:`MAX_NODES` nodes and :data:`MAX_DEPTH` levels (a chain ``a or b or …`` is as
deep as it is long). Each is at least 4x the largest of the shipped rules and the
documented examples (124 tokens, 5 levels of nesting, 67 nodes, 12 levels). A longer
expression is a :class:`LangError` at the column where it goes over, never a
``RecursionError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from watchdog import catalogue, units
from watchdog.detect.signal_names import SIGNALS

# function name -> (min args, max args or None, kind)
#   kind: "window" (expr, duration) | "plain" (per-sample) | "node" (across GPUs)
WINDOW_FUNCS = ("mean", "min", "max", "last", "slope", "frac", "delta", "rate")
PLAIN_FUNCS = {"present": (1, 1), "coalesce": (2, None), "abs": (1, 1)}
NODE_FUNCS = ("count", "frac_gpus", "any_gpu", "all_gpus",
              "peer_median", "peer_mean", "peer_min", "peer_max", "job_first")
MAX_WINDOW_S = 3600.0
#: the most tokens one expression may have (the shipped rules: at most 124)
MAX_TOKENS = 1024
#: the deepest nesting of parentheses, calls, ``not`` and unary minus (shipped: 5)
MAX_NESTING = 32
#: the most AST nodes one expression may have (shipped: 67)
MAX_NODES = 512
#: the deepest AST, a chain of ``and``/``or``/``+``… included (shipped: 12)
MAX_DEPTH = 64

_DURATION_UNITS = units.UNITS  # one grammar with options and `for:` (watchdog.units)
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<hex>0[xX][0-9a-fA-F]+)
  | (?P<dur>""" + units.DURATION_PATTERN + r""")(?![A-Za-z0-9_.%])
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<unit>ms|s|m|h|%)?(?![A-Za-z0-9_])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<op><=|>=|==|!=|<|>|\+|-|\*|/|\(|\)|,)
""", re.VERBOSE)
KEYWORDS = ("and", "or", "not", "in", "true", "false")


class LangError(Exception):
    """A condition that does not parse or check; ``col`` is 1-based in the expression."""

    def __init__(self, message: str, col: int) -> None:
        super().__init__(message)
        self.col = col


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # num | name | op | kw | end
    text: str
    col: int  # 1-based
    value: float = 0.0
    unit: str | None = None


def tokenize(src: str) -> list[Tok]:
    """Split ``src`` into tokens; an unknown character is a LangError at its column."""
    out: list[Tok] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m or m.end() == pos:
            raise LangError(f"unexpected character {src[pos]!r}", pos + 1)
        col = pos + 1
        pos = m.end()
        if len(out) >= MAX_TOKENS:
            raise LangError(f"more than {MAX_TOKENS} tokens in one expression", col)
        # the alternative that matched (``unit`` closes after ``num``): one lookup, not a
        # group() per alternative (rules are parsed on every `watchdog check`)
        kind = m.lastgroup
        if kind == "ws":
            continue
        text = m.group(0)
        if kind == "hex":
            out.append(Tok("num", text, col, float(int(text, 16))))
        elif kind == "dur":
            v = units.parse_duration(text, what="window")
            out.append(Tok("num", text, col, v, "s"))  # value in seconds
        elif kind in ("num", "unit"):
            unit = m.group("unit")
            v = float(m.group("num"))
            if unit in _DURATION_UNITS:
                v *= _DURATION_UNITS[unit]
            out.append(Tok("num", text, col, v, unit))
        elif kind == "name":
            out.append(Tok("kw" if text in KEYWORDS else "name", text, col))
        else:
            out.append(Tok("op", text, col))
    out.append(Tok("end", "", len(src) + 1))
    return out


# --- AST ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    """Base of every AST node; ``key`` is a canonical text used for caching and state.

    ``key`` is computed once at construction (evaluation looks it up constantly).
    """

    col: int
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self._key())

    def _key(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Num(Node):
    value: float
    unit: str | None = None

    def _key(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class Name(Node):
    name: str

    def _key(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Unary(Node):
    op: str  # "not" | "-"
    arg: Node

    def _key(self) -> str:
        return f"({self.op} {self.arg.key})"


@dataclass(frozen=True, slots=True)
class Binary(Node):
    op: str  # and or < <= > >= == != + - * /
    left: Node
    right: Node

    def _key(self) -> str:
        return f"({self.left.key} {self.op} {self.right.key})"


@dataclass(frozen=True, slots=True)
class In(Node):
    arg: Node
    values: tuple[float, ...]

    def _key(self) -> str:
        return f"({self.arg.key} in {self.values!r})"


@dataclass(frozen=True, slots=True)
class Call(Node):
    fn: str
    args: tuple[Node, ...]
    window: float | None = None  # seconds, for window functions

    def _key(self) -> str:
        inner = ", ".join(a.key for a in self.args)
        if self.window is not None:
            inner += f", {self.window!r}s"
        return f"{self.fn}({inner})"


# --- parser ---------------------------------------------------------------------------


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.i = 0
        self.level = 0  # current nesting (parentheses, calls, not, unary minus)

    def enter(self, t: Tok) -> None:
        """One nesting level deeper (at ``t``); refused beyond :data:`MAX_NESTING`."""
        self.level += 1
        if self.level > MAX_NESTING:
            raise LangError(f"nested more than {MAX_NESTING} levels deep (parentheses, "
                            "calls, not, unary minus)", t.col)

    def peek(self) -> Tok:
        return self.toks[self.i]

    def take(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, kind: str, text: str) -> Tok | None:
        t = self.peek()
        if t.kind == kind and t.text == text:
            self.i += 1
            return t
        return None

    def expect(self, kind: str, text: str) -> Tok:
        t = self.accept(kind, text)
        if t is None:
            raise _unexpected(self.peek(), f"expected {text!r}")
        return t

    def parse(self) -> Node:
        node = self.or_()
        if self.peek().kind != "end":
            raise _unexpected(self.peek(), "expected an operator or the end")
        return node

    def or_(self) -> Node:
        left = self.and_()
        while t := self.accept("kw", "or"):
            left = Binary(t.col, "or", left, self.and_())
        return left

    def and_(self) -> Node:
        left = self.not_()
        while t := self.accept("kw", "and"):
            left = Binary(t.col, "and", left, self.not_())
        return left

    def not_(self) -> Node:
        if t := self.accept("kw", "not"):
            self.enter(t)
            node = Unary(t.col, "not", self.not_())
            self.level -= 1
            return node
        return self.cmp()

    def cmp(self) -> Node:
        left = self.sum_()
        t = self.peek()
        if t.kind == "op" and t.text in ("<", "<=", ">", ">=", "==", "!="):
            self.take()
            return Binary(t.col, t.text, left, self.sum_())
        if t.kind == "kw" and t.text == "in":
            self.take()
            self.expect("op", "(")
            vals = [self.number()]
            while self.accept("op", ","):
                vals.append(self.number())
            self.expect("op", ")")
            return In(t.col, left, tuple(vals))
        return left

    def number(self) -> float:
        neg = self.accept("op", "-") is not None
        t = self.take()
        if t.kind != "num":
            raise _unexpected(t, "expected a number")
        return -t.value if neg else t.value

    def sum_(self) -> Node:
        left = self.prod()
        while (t := self.peek()).kind == "op" and t.text in ("+", "-"):
            self.take()
            left = Binary(t.col, t.text, left, self.prod())
        return left

    def prod(self) -> Node:
        left = self.unary()
        while (t := self.peek()).kind == "op" and t.text in ("*", "/"):
            self.take()
            left = Binary(t.col, t.text, left, self.unary())
        return left

    def unary(self) -> Node:
        if t := self.accept("op", "-"):
            self.enter(t)
            node = Unary(t.col, "-", self.unary())
            self.level -= 1
            return node
        return self.atom()

    def atom(self) -> Node:
        t = self.take()
        if t.kind == "num":
            return Num(t.col, t.value, t.unit)
        if t.kind == "kw" and t.text in ("true", "false"):
            return Num(t.col, 1.0 if t.text == "true" else 0.0)
        if t.kind == "op" and t.text == "(":
            self.enter(t)
            node = self.or_()
            self.expect("op", ")")
            self.level -= 1
            return node
        if t.kind == "name":
            if self.accept("op", "("):
                self.enter(t)
                node = self.call(t)
                self.level -= 1
                return node
            return Name(t.col, t.text)
        raise _unexpected(t, "expected a number, a name or '('")

    def call(self, name: Tok) -> Node:
        fn = name.text
        args: list[Node] = []
        if not self.accept("op", ")"):
            args.append(self.or_())
            while self.accept("op", ","):
                args.append(self.or_())
            self.expect("op", ")")
        if fn in WINDOW_FUNCS:
            if len(args) != 2:
                raise LangError(f"{fn}() takes (expression, duration), got {len(args)} "
                                "argument(s)", name.col)
            w = args[1]
            if not isinstance(w, Num) or w.unit not in _DURATION_UNITS:
                raise LangError(f"{fn}(): the window must be a duration such as 60s or 5m",
                                w.col)
            if not 0 < w.value <= MAX_WINDOW_S:
                raise LangError(f"{fn}(): window {w.value:g}s out of range (0, 1h]", w.col)
            return Call(name.col, fn, (args[0],), w.value)
        if fn in PLAIN_FUNCS:
            lo, hi = PLAIN_FUNCS[fn]
            if len(args) < lo or (hi is not None and len(args) > hi):
                want = f"{lo}" if lo == hi else f"at least {lo}"
                raise LangError(f"{fn}() takes {want} argument(s), got {len(args)}", name.col)
            return Call(name.col, fn, tuple(args))
        if fn in NODE_FUNCS:
            if len(args) != 1:
                raise LangError(f"{fn}() takes 1 argument, got {len(args)}", name.col)
            return Call(name.col, fn, tuple(args))
        raise LangError(f"unknown function {fn!r}", name.col)


def _unexpected(t: Tok, what: str) -> LangError:
    shown = "end of expression" if t.kind == "end" else repr(t.text)
    return LangError(f"{what}, found {shown}", t.col)


def parse(src: str) -> Node:
    """Parse ``src`` into an AST; raises LangError with a 1-based column."""
    if not src or not src.strip():
        raise LangError("empty expression", 1)
    node = _Parser(src).parse()
    _check_size(node)
    return node


def _check_size(root: Node) -> None:
    """Refuse an AST of more than :data:`MAX_NODES` nodes or :data:`MAX_DEPTH` levels
    (walked without recursion: this is what keeps every recursive walk after it safe)."""
    stack = [(root, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise LangError(f"more than {MAX_NODES} terms in one expression", node.col)
        if depth > MAX_DEPTH:
            raise LangError(f"more than {MAX_DEPTH} levels deep (a chain of and/or/+ "
                            "counts one level per term)", node.col)
        stack.extend((c, depth + 1) for c in children(node))


# --- static checks --------------------------------------------------------------------


def names_known() -> set[str]:
    """Every name an expression may use: catalogue metrics and derived signals."""
    return set(catalogue.NAMES) | set(SIGNALS)


def has_node_func(node: Node) -> bool:
    """True if ``node`` contains a node (across-GPU) function."""
    if isinstance(node, Call) and node.fn in NODE_FUNCS:
        return True
    return any(has_node_func(c) for c in children(node))


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Unary):
        return (node.arg,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, In):
        return (node.arg,)
    if isinstance(node, Call):
        return node.args
    return ()


def check(node: Node, scope: str) -> None:
    """Check names and scope rules; raises LangError at the offending node."""
    known = names_known()

    def walk(n: Node, in_window: bool, in_node_fn: bool) -> None:
        if isinstance(n, Name) and n.name not in known:
            raise LangError(f"unknown metric or signal {n.name!r}", n.col)
        if isinstance(n, Call):
            if n.fn in NODE_FUNCS:
                if scope != "node":
                    raise LangError(f"{n.fn}() is a node function: only in scope: node rules",
                                    n.col)
                if in_window:
                    raise LangError(f"{n.fn}() may not appear inside a window function",
                                    n.col)
                if in_node_fn:
                    raise LangError(f"{n.fn}() may not be nested in another node function",
                                    n.col)
            for a in n.args:
                walk(a, in_window or n.fn in WINDOW_FUNCS, in_node_fn or n.fn in NODE_FUNCS)
            return
        for c in children(n):
            walk(c, in_window, in_node_fn)

    walk(node, False, False)


def compile_expr(src: str, scope: str = "gpu") -> Node:
    """Parse and check ``src`` for a rule of ``scope`` (``gpu`` or ``node``)."""
    node = parse(src)
    check(node, scope)
    return node


def max_window(node: Node) -> float:
    """Longest window (s) in ``node``, nested windows added up; 0 if none."""
    inner = max((max_window(c) for c in children(node)), default=0.0)
    if isinstance(node, Call) and node.window is not None:
        return inner + node.window
    return inner
