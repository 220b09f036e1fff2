"""A reader for the subset of YAML the repository's manifests are written in, with the stdlib alone.

The subset: ``---`` between documents; block mappings and block sequences (a sequence may sit at its
key's indent, as Kubernetes manifests write them); plain, single- and double-quoted scalars; literal
block scalars (``|``, ``|-``, ``|+``); flow collections only when they are JSON; ``#`` comments. It
refuses the rest (anchors, tags, folded or multi-line plain scalars, tabs, duplicate keys) rather
than guess. Plain scalars are typed as YAML 1.2's core schema does (int, float, true/false, null),
and YAML 1.1's other booleans (``yes``, ``no``, ``on``, ``off``, ``True``...) are refused unquoted:
Kubernetes reads them as booleans where a string was meant, as in an env var's value.
"""

from __future__ import annotations

import json
import re
from typing import Any

_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_AMBIGUOUS = re.compile(r"y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|True|TRUE|False|FALSE|Null|NULL")
_REFUSED_FIRST = "&*!%@`>?{["
"""A plain scalar may not start with these here: anchors, aliases, tags, directives, folded
scalars, complex keys; ``{`` and ``[`` start flow collections, read as JSON."""


class YamlSubsetError(ValueError):
    """The text is outside the subset (or not YAML): the message says where."""


def load_all(text: str) -> list[Any]:
    """Every document of ``text``, in order (empty documents left out)."""
    if "\t" in text:
        raise YamlSubsetError("a tab: indent with spaces")
    docs: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.rstrip() == "---":
            docs.append([])
        else:
            docs[-1].append(line)
    out = []
    for lines in docs:
        reader = _Reader(lines)
        value = reader.document()
        if value is not None:
            out.append(value)
    return out


class _Reader:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.i = 0

    def fail(self, why: str) -> YamlSubsetError:
        line = self.lines[self.i] if self.i < len(self.lines) else ""
        return YamlSubsetError(f"line {self.i + 1} ({line.strip()!r}): {why}")

    def peek(self) -> tuple[int, str] | None:
        """The next line with content: its indent and text; comment and blank lines are skipped."""
        while self.i < len(self.lines):
            line = self.lines[self.i]
            text = line.strip()
            if text and not text.startswith("#"):
                return len(line) - len(line.lstrip(" ")), text
            self.i += 1
        return None

    def document(self) -> Any:
        first = self.peek()
        if first is None:
            return None
        if first[0] != 0:
            raise self.fail("a document starts at column 0")
        value = self.node(0)
        if self.peek() is not None:
            raise self.fail("text after the document's end")
        return value

    def node(self, indent: int) -> Any:
        """The block at ``indent`` (or deeper) starting on the next line with content."""
        found = self.peek()
        if found is None or found[0] < indent:
            return None
        at, text = found
        if text == "-" or text.startswith("- "):
            return self.sequence(at)
        return self.mapping(at)

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while (found := self.peek()) is not None and found[0] == indent:
            text = found[1]
            if text == "-" or text.startswith("- "):
                break
            key, rest = self.key(text)
            if key in out:
                raise self.fail(f"the key {key!r} twice")
            out[key] = self.value(rest, indent, sequence_here=True)
        if found is not None and found[0] > indent:
            raise self.fail("indented deeper than its mapping")
        return out

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while (found := self.peek()) is not None and found[0] == indent:
            text = found[1]
            if not (text == "-" or text.startswith("- ")):
                break
            item = text[1:].strip()
            if item == "-" or item.startswith("- ") or (item and _starts_mapping(item)):
                # "- key: value" opens a mapping whose keys sit two columns in, and "- - x" a
                # sequence: read the line as if the dash were a space.
                line = self.lines[self.i]
                self.lines[self.i] = line[:indent] + " " + line[indent + 1 :]
                out.append(self.node(indent + 2))
            else:
                out.append(self.value(item, indent, sequence_here=False))
        if found is not None and found[0] > indent:
            raise self.fail("indented deeper than its sequence")
        return out

    def value(self, rest: str, indent: int, *, sequence_here: bool) -> Any:
        """A key's (or an item's) value: ``rest`` of its line (the next to read), or the block below."""
        if rest.startswith("|"):
            self.i += 1
            return self.literal(rest, indent)
        if rest:
            value = self.scalar(rest)
            self.i += 1
            return value
        self.i += 1
        found = self.peek()
        if found is None:
            return None
        at, text = found
        if at > indent:
            return self.node(at)
        if sequence_here and at == indent and (text == "-" or text.startswith("- ")):
            return self.sequence(at)
        return None

    def literal(self, header: str, indent: int) -> str:
        chomp = header[1:].split("#", 1)[0].strip()
        if chomp not in ("", "-", "+"):
            self.i -= 1
            raise self.fail(f"a block scalar header {header!r}: only |, |- and |+ here")
        lines: list[str] = []
        content = None
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.strip():
                at = len(line) - len(line.lstrip(" "))
                if at <= indent:
                    break
                if content is None:
                    content = at
                elif at < content:
                    raise self.fail("a block scalar's line is indented less than its first")
                lines.append(line[content:])
            else:
                lines.append("")
            self.i += 1
        while lines and not lines[-1] and chomp != "+":
            lines.pop()
        text = "\n".join(lines)
        return text if chomp == "-" else text + "\n"

    def key(self, text: str) -> tuple[str, str]:
        if text[0] in "\"'":
            key, end = self.quoted(text)
            after = text[end:]
            if not after.startswith(":"):
                raise self.fail("a quoted key without a colon after it")
            return key, _no_lone_comment(after[1:].strip())
        match = re.match(r"([^\s:#][^:#]*?):(\s+|$)", text)
        if match is None:
            raise self.fail("expected key: value")
        return match[1], _no_lone_comment(text[match.end() :].strip())

    def quoted(self, text: str) -> tuple[str, int]:
        quote = text[0]
        if quote == "'":
            match = re.match(r"'((?:[^']|'')*)'", text)
            if match is None:
                raise self.fail("an unclosed quote")
            return match[1].replace("''", "'"), match.end()
        match = re.match(r'"((?:[^"\\]|\\.)*)"', text)
        if match is None:
            raise self.fail("an unclosed quote")
        try:
            value: str = json.loads(match[0])
        except ValueError:
            raise self.fail("an escape JSON does not know (the subset's double quotes are JSON's)") from None
        return value, match.end()

    def scalar(self, text: str) -> Any:
        if text[0] in "\"'":
            value, end = self.quoted(text)
            if _no_lone_comment(text[end:].strip()):
                raise self.fail("text after a quoted scalar")
            return value
        if text[0] in "[{":
            try:
                flow, end = json.JSONDecoder().raw_decode(text)
            except ValueError:
                raise self.fail("a flow collection that is not JSON (the subset's are JSON)") from None
            if _no_lone_comment(text[end:].strip()):
                raise self.fail("text after a flow collection")
            return flow
        text = re.split(r"\s#", text, maxsplit=1)[0].rstrip()
        if text[0] in _REFUSED_FIRST:
            raise self.fail(f"{text[0]!r} starts something outside the subset")
        if ": " in text or text.endswith(":"):
            raise self.fail("a colon in a plain scalar: quote it")
        if _AMBIGUOUS.fullmatch(text):
            raise self.fail(
                f"{text!r} unquoted is a boolean or null to YAML 1.1 and a string to 1.2: quote it"
            )
        if text in ("true", "false"):
            return text == "true"
        if text in ("null", "~"):
            return None
        if _INT.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            return float(text)
        return text


def _starts_mapping(item: str) -> bool:
    if item[0] in "\"'":
        return re.match(r"""("(?:[^"\\]|\\.)*"|'(?:[^']|'')*')\s*:(\s|$)""", item) is not None
    return re.match(r"[^\s:#\[{][^:#]*?:(\s|$)", item) is not None


def _no_lone_comment(text: str) -> str:
    """``text``, or nothing when it is only a comment."""
    return "" if text.startswith("#") else text
