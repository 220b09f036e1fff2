"""Reading Prometheus' text exposition and PromQL, for tests of what dashboards ask of what is exported.

``exported(text)``: every series name a scrape of ``text`` stores, with its label names. ``selectors
(expr)``: the metric names a PromQL expression reads, with the label names it matches them on, and
the label names it groups by. Enough of PromQL for dashboards: strings, label matchers, ranges and
subqueries, functions, aggregations with ``by``/``without``, vector matching with ``on``/``ignoring``/
``group_left``/``group_right``, ``offset``, ``@``, numbers and Grafana's ``$variables``.
"""

from __future__ import annotations

import re

import attrs

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+\S+(\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_SCRAPED = frozenset({"job", "instance"})
"""Labels Prometheus adds to every series it scrapes."""


def exported(text: str) -> dict[str, set[str]]:
    """The series names a scrape of ``text`` stores, each with the label names seen on it.

    A family declared (``# TYPE``) with no sample yet counts with the names Prometheus would store:
    a counter's ``_total``, a histogram's ``_bucket``, ``_sum`` and ``_count``, a summary's ``_sum``
    and ``_count`` beside its own name. No other suffix is taken for granted.
    """
    names: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            for name in _stored(family, kind.strip()):
                names.setdefault(name, set(_SCRAPED) | ({"le"} if name.endswith("_bucket") else set()))
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match is not None, f"not a sample line: {line!r}"
            labels = names.setdefault(match[1], set(_SCRAPED))
            body = (match[2] or "{}")[1:-1]
            labels.update(label for label, _ in _LABEL.findall(body))
    return names


def _stored(family: str, kind: str) -> tuple[str, ...]:
    if kind == "counter":
        return (family if family.endswith("_total") else f"{family}_total",)
    if kind == "histogram":
        return (f"{family}_bucket", f"{family}_sum", f"{family}_count")
    if kind == "summary":
        return (family, f"{family}_sum", f"{family}_count")
    return (family,)


AGGREGATIONS = frozenset(
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio".split()
)
_LABEL_LISTS = frozenset("by without on ignoring group_left group_right".split())
_KEYWORDS = frozenset("bool and or unless offset atan2 inf nan".split()) | AGGREGATIONS | _LABEL_LISTS
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|[0-9][0-9a-zA-Z_.]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+")
_VARIABLE = re.compile(r"\$(?:\{[^}]*\}|[a-zA-Z_][a-zA-Z0-9_]*)")


@attrs.frozen
class Selector:
    """A metric name an expression reads, and the label names its matchers name."""

    name: str
    labels: frozenset[str]


@attrs.frozen
class Query:
    selectors: tuple[Selector, ...]
    grouping: frozenset[str]
    """Label names of ``by``, ``without``, ``on``, ``ignoring``, ``group_left`` and ``group_right``."""


def selectors(expr: str) -> Query:
    """What the PromQL ``expr`` reads: its metric selectors, and the labels it groups and matches by.

    Raises:
        ValueError: ``expr`` has something this reader does not know (an unclosed string or bracket,
            a stray character), rather than a guess.
    """
    found: list[Selector] = []
    grouping: set[str] = set()
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c.isspace() or c in "(),+-*/%^<>=!@":
            i += 1
        elif c in "\"'`":
            i = _skip_string(expr, i)
        elif c == "[":
            end = expr.find("]", i)
            if end < 0:
                raise ValueError(f"unclosed [ in {expr!r}")
            i = end + 1
        elif c == "{":  # matchers with no metric name before them: {__name__="x"} and the like
            labels, i = _matchers(expr, i)
            found.append(Selector("", frozenset(labels)))
        elif c == "$":
            match = _VARIABLE.match(expr, i)
            if match is None:
                raise ValueError(f"a stray $ in {expr!r}")
            i = match.end()
        elif (number := _NUMBER.match(expr, i)) is not None and not c.isalpha() and c not in "_:":
            i = number.end()
        elif (match := _IDENTIFIER.match(expr, i)) is not None:
            word, i = match[0], match.end()
            j = _skip_space(expr, i)
            following = expr[j] if j < n else ""
            if word in _LABEL_LISTS:
                if following == "(":
                    end = expr.index(")", j)
                    grouping.update(label.strip() for label in expr[j + 1 : end].split(",") if label.strip())
                    i = end + 1
            elif word.lower() in _KEYWORDS or following == "(":
                pass  # an operator, an aggregation or a function
            else:
                named: set[str] = set()
                if following == "{":
                    named, i = _matchers(expr, j)
                found.append(Selector(word, frozenset(named)))
        else:
            raise ValueError(f"unexpected {c!r} at {i} in {expr!r}")
    return Query(tuple(found), frozenset(grouping))


def _skip_space(expr: str, i: int) -> int:
    while i < len(expr) and expr[i].isspace():
        i += 1
    return i


def _skip_string(expr: str, i: int) -> int:
    quote = expr[i]
    j = i + 1
    while j < len(expr):
        if expr[j] == "\\" and quote != "`":
            j += 2
            continue
        if expr[j] == quote:
            return j + 1
        j += 1
    raise ValueError(f"unclosed string in {expr!r}")


def _matchers(expr: str, i: int) -> tuple[set[str], int]:
    """The label names of the matchers ``{...}`` opening at ``i``, and where they end."""
    labels: set[str] = set()
    j = i + 1
    while True:
        j = _skip_space(expr, j)
        if j >= len(expr):
            raise ValueError(f"unclosed {{ in {expr!r}")
        if expr[j] == "}":
            return labels, j + 1
        if expr[j] == ",":
            j += 1
            continue
        match = _IDENTIFIER.match(expr, j)
        if match is None:
            raise ValueError(f"a matcher without a label name at {j} in {expr!r}")
        labels.add(match[0])
        j = _skip_space(expr, match.end())
        op = re.compile(r"=~|!~|!=|=").match(expr, j)
        if op is None:
            raise ValueError(f"a matcher without an operator at {j} in {expr!r}")
        j = _skip_space(expr, op.end())
        if j >= len(expr) or expr[j] not in "\"'`":
            raise ValueError(f"a matcher without a quoted value at {j} in {expr!r}")
        j = _skip_string(expr, j)
