"""Edit a config.pbtxt's text in place: only the fields the new config changes are rewritten.

People keep config.pbtxt in git and review its diffs, so a write-back must not reformat the
file. :func:`edit_in_place` reads the text with a small parser of protobuf text format that
keeps where each field is written, then walks the message's descriptor next to the new config:

- a field with the same value in both stays byte for byte, comments and layout included;
- a scalar or enum that changed gets its new value in place of the old token;
- a message in both, or a repeated field with as many elements in both, is edited inside;
- a map (``parameters``) is matched by key; any other repeated field that changed length is
  written again where it stood (a ``[ ... ]`` list stays a list);
- a new field goes after the last field of its message, indented like its siblings (top level:
  at the end of the file); a field removed loses its lines.

The result is checked: it must parse to the new config, else the whole config is written
again with ``text_format``.
"""

from __future__ import annotations

import difflib
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from google.protobuf import message_factory, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from autotune.errors import ConfigError
from autotune.model_config import CONFIG_NAME, ModelConfig, config_text, parse_config

# protobuf's own tokens (google.protobuf.text_format.Tokenizer): names, numbers, quoted strings
_TOKEN = re.compile(
    r"[A-Za-z_][0-9A-Za-z_+-]*"
    r"|(?:[0-9+-]|\.[0-9])[0-9A-Za-z_.+-]*"
    r"|\"(?:[^\"\n\\]|\\.)*\""
    r"|'(?:[^'\n\\]|\\.)*'"
)
_GAP = re.compile(r"(?:\s|#[^\n]*)+")  # whitespace and comments
_NAME = re.compile(r"[A-Za-z_][0-9A-Za-z_]*")
_CLOSE = {"{": "}", "<": ">"}
_Shape = Literal["block", "line", "each"]
_STEP = "  "  # text_format's indent, and ours when the file shows none
_SHORT_LIST = re.compile(r"^(\s*[A-Za-z_][0-9A-Za-z_]*: )\[(.*)\]$", re.MULTILINE)  # a line "dims: [16]"


class _CannotEdit(Exception):
    """A layout this editor does not handle: the config is written whole instead."""


@dataclass(frozen=True)
class _Token:
    """A token of the text and where it lies (comments and whitespace are not tokens)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class _Scalar:
    """A number, a name (enum, bool) or a run of quoted strings."""

    start: int
    end: int


@dataclass(frozen=True)
class _Body:
    """A message between ``{`` and ``}`` (or ``<`` ``>``); the top level spans the file."""

    open: int  # -1 at the top level
    close: int  # the closing brace; the text's length at the top level
    fields: tuple[_Field, ...]

    @property
    def end(self) -> int:
        return self.close + 1 if self.open >= 0 else self.close


@dataclass(frozen=True)
class _List:
    """A ``[ ... ]`` of scalars or messages."""

    start: int
    end: int
    items: tuple[_Scalar | _Body, ...]


@dataclass(frozen=True)
class _Field:
    """One occurrence of a field: its name, where it starts, its value's end and the end of a
    ``,`` or ``;`` after it."""

    name: str
    start: int
    end: int
    stop: int
    value: _Scalar | _Body | _List


@dataclass(frozen=True)
class _Edit:
    """Replace ``text[start:end]``; ``gone`` is the start of the field it deletes, if any."""

    start: int
    end: int
    text: str
    gone: int = -1


@dataclass(frozen=True)
class _Add:
    """Fields to insert into a message (``message`` holds only them): after the last of
    ``after`` that stays, else after the message's last field."""

    message: Message
    after: tuple[_Field, ...] = ()


@dataclass(frozen=True)
class _Layout:
    """What every edit reads: the text, one level of its indentation, and how it writes a
    repeated number or name: ``"[ "`` (``dims: [ 16 ]``), ``"["`` (``dims: [16]``) or ``""``
    (a line per value, as text_format does)."""

    text: str
    step: str = _STEP
    lists: str = ""


# ---------------------------------------------------------------- the public functions


def edit_in_place(text: str, new: ModelConfig, origin: str = CONFIG_NAME) -> str:
    """``text`` (a config.pbtxt) with only the fields whose values differ from ``new`` rewritten:
    every other byte as it was (comments, order, layout, blank lines). It falls back to the whole
    of ``new`` in text format (:func:`autotune.model_config.config_text`) only when the edited
    text would not parse back to ``new`` (a layout this editor does not handle). A ConfigError
    when ``text`` is not a config."""
    edited = try_edit_in_place(text, new, origin)
    return config_text(new) if edited is None else edited


def try_edit_in_place(text: str, new: ModelConfig, origin: str = CONFIG_NAME) -> str | None:
    """:func:`edit_in_place`, or None where it would fall back to writing the whole config."""
    old = parse_config(text, origin)
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    work = text.replace("\r\n", "\n") if crlf else text
    try:
        edited = _edit(work, old, new)
        same = parse_config(edited, origin) == new
    except (_CannotEdit, ConfigError, text_format.ParseError):
        return None
    if not same:
        return None
    return edited.replace("\n", "\r\n") if crlf else edited


def text_diff(before: str, after: str, label: str = CONFIG_NAME) -> str:
    """The unified diff of a file's text from ``before`` to ``after`` (labels ``a/`` and ``b/``)."""
    lines = difflib.unified_diff(_lines(before), _lines(after), fromfile=f"a/{label}", tofile=f"b/{label}")
    return "".join(lines)


def _lines(text: str) -> list[str]:
    """The lines for a diff, each ending in a newline (the last one of a file without one too)."""
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]


def _edit(text: str, old: ModelConfig, new: ModelConfig) -> str:
    top = _parse(text)
    lay = _Layout(text, _step(text, top), _list_style(text, top))
    return _apply(text, _message_edits(lay, top, old, new))


def _apply(text: str, edits: Sequence[_Edit]) -> str:
    """The text with every edit made (they may not overlap; insertions at one place keep their order)."""
    out, at = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < at:
            raise _CannotEdit(f"edits overlap at {edit.start}")
        out += [text[at : edit.start], edit.text]
        at = edit.end
    return "".join(out) + text[at:]


# ---------------------------------------------------------------- reading the text


class _Reader:
    """The tokens of a text, read one at a time."""

    def __init__(self, text: str) -> None:
        self.tokens = list(_tokens(text))
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at].text if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> _Token:
        if self.at >= len(self.tokens) or expected not in (None, self.tokens[self.at].text):
            raise _CannotEdit(f"expected {expected or 'a token'}")
        self.at += 1
        return self.tokens[self.at - 1]


def _tokens(text: str) -> Iterator[_Token]:
    at = _skip(text, 0)
    while at < len(text):
        found = _TOKEN.match(text, at)
        end = found.end() if found else at + 1
        yield _Token(text[at:end], at, end)
        at = _skip(text, end)


def _skip(text: str, at: int) -> int:
    gap = _GAP.match(text, at)
    return gap.end() if gap else at


def _parse(text: str) -> _Body:
    reader = _Reader(text)
    return _Body(-1, len(text), _fields(reader, ""))


def _fields(reader: _Reader, close: str) -> tuple[_Field, ...]:
    """The fields up to ``close`` (``""``: the end of the text)."""
    found = []
    while reader.peek() != close:
        found.append(_field(reader))
    return tuple(found)


def _field(reader: _Reader) -> _Field:
    name = reader.take()
    if not _NAME.fullmatch(name.text):  # an extension or an Any: [type.googleapis.com/...]
        raise _CannotEdit(f"field name {name.text!r}")
    if reader.peek() == ":":
        reader.take()
    first = reader.peek()
    value: _Scalar | _Body | _List
    value = _body(reader) if first in _CLOSE else _list(reader) if first == "[" else _scalar(reader)
    end = value.end
    stop = reader.take().end if reader.peek() in (",", ";") else end
    return _Field(name.text, name.start, end, stop, value)


def _body(reader: _Reader) -> _Body:
    opening = reader.take()
    fields = _fields(reader, _CLOSE[opening.text])
    return _Body(opening.start, reader.take().start, fields)


def _list(reader: _Reader) -> _List:
    start = reader.take("[").start
    items: list[_Scalar | _Body] = []
    while reader.peek() != "]":
        if items:
            reader.take(",")
        items.append(_body(reader) if reader.peek() in _CLOSE else _scalar(reader))
    return _List(start, reader.take("]").end, tuple(items))


def _scalar(reader: _Reader) -> _Scalar:
    first = last = reader.take()
    if not _TOKEN.fullmatch(first.text):
        raise _CannotEdit(f"value {first.text!r}")
    while first.text[0] in "\"'" and reader.peek()[:1] in ("'", '"'):  # "a" "b" is "ab"
        last = reader.take()
    return _Scalar(first.start, last.end)


def _step(text: str, top: _Body) -> str:
    """One level of the file's indentation: a message's first field against its opening line."""
    for body in _bodies(top):
        child = next((f for f in body.fields if _starts_line(text, f.start)), None)
        if body.open >= 0 and child is not None:
            outer, inner = _indent(text, body.open), _indent(text, child.start)
            if inner.startswith(outer) and len(inner) > len(outer):
                return inner[len(outer) :]
    return _STEP


def _list_style(text: str, top: _Body) -> str:
    """How the file writes a repeated scalar (:class:`_Layout`): as its first list of them does."""
    for body in _bodies(top):
        for field in body.fields:
            if isinstance(field.value, _List) and all(isinstance(v, _Scalar) for v in field.value.items):
                start = field.value.start
                return "[ " if text[start + 1 : start + 2].isspace() else "["
    return ""


def _bodies(body: _Body) -> Iterator[_Body]:
    yield body
    for field in body.fields:
        for value in _elements(field):
            if isinstance(value, _Body):
                yield from _bodies(value)


def _elements(field: _Field) -> tuple[_Scalar | _Body, ...]:
    """The values one occurrence holds: a list's items, else its one value."""
    return field.value.items if isinstance(field.value, _List) else (field.value,)


# ---------------------------------------------------------------- lines


def _line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def _line_end(text: str, at: int) -> int:
    """The newline that ends the line of ``at`` (the text's length on a last line without one)."""
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _indent(text: str, at: int) -> str:
    """The whitespace that starts the line of ``at``."""
    start = _line_start(text, at)
    return text[start : start + len(text[start:at]) - len(text[start:at].lstrip())]


def _starts_line(text: str, at: int) -> bool:
    return not text[_line_start(text, at) : at].strip()


def _ends_line(text: str, at: int) -> bool:
    """Only whitespace or a comment follows ``at`` on its line."""
    rest = text[at : _line_end(text, at)].strip()
    return not rest or rest.startswith("#")


def _alone(text: str, field: _Field) -> bool:
    """The field has its lines to itself (a comment after it aside)."""
    return _starts_line(text, field.start) and _ends_line(text, field.stop)


# ---------------------------------------------------------------- the edits


def _message_edits(lay: _Layout, body: _Body, old: Message, new: Message) -> list[_Edit]:
    """The edits that turn ``body`` (the text of ``old``) into the text of ``new``."""
    edits: list[_Edit] = []
    adds: list[_Add] = []
    for fd in _fields_of(old):
        if not _same(old, new, fd):
            found = [f for f in body.fields if f.name == fd.name]
            more, fresh = _field_edits(lay, fd, found, old, new)
            edits += more
            adds += fresh
    return edits + _inserts(lay, body, adds, {e.gone for e in edits})


def _inserts(lay: _Layout, body: _Body, adds: list[_Add], gone: set[int]) -> list[_Edit]:
    """One insertion per place: the fields that go to the same place are written together."""
    staying = [f for f in body.fields if f.start not in gone]
    places: dict[int, tuple[_Field | None, Message]] = {}
    for add in adds:
        after = next((f for f in reversed(add.after) if f.start not in gone), None)
        if after is None and body.open >= 0 and staying:
            after = staying[-1]
        place = after.start if after is not None else -1
        if place in places:
            places[place][1].MergeFrom(add.message)
        else:
            places[place] = (after, add.message)
    return [_insert(lay, body, after, message) for after, message in places.values()]


def _fields_of(message: Message) -> Sequence[FieldDescriptor]:
    return cast("Sequence[FieldDescriptor]", message.DESCRIPTOR.fields)


def _same(old: Message, new: Message, fd: FieldDescriptor) -> bool:
    return _present(old, fd) == _present(new, fd) and getattr(old, fd.name) == getattr(new, fd.name)


def _present(message: Message, fd: FieldDescriptor) -> bool:
    if fd.is_repeated:
        return len(getattr(message, fd.name)) > 0
    if fd.has_presence:
        return message.HasField(fd.name)
    return bool(getattr(message, fd.name) != fd.default_value)


def _is_message(fd: FieldDescriptor) -> bool:
    return fd.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE


def _is_map(fd: FieldDescriptor) -> bool:
    entry = fd.message_type
    return fd.is_repeated and entry is not None and entry.GetOptions().map_entry


def _field_edits(
    lay: _Layout, fd: FieldDescriptor, found: list[_Field], old: Message, new: Message
) -> tuple[list[_Edit], list[_Add]]:
    """The edits of one field that differs; the fields to add, placed by the caller."""
    if _is_map(fd):
        return _map_edits(lay, fd, found, old, new)
    if fd.is_repeated:
        return _repeated_edits(lay, fd, found, old, new)
    if not _present(new, fd) and (fd.has_presence or _is_message(fd)):
        return [_delete(lay.text, f) for f in found], []
    if not found:
        return [], [_Add(_only(new, fd))]
    if len(found) != 1:
        raise _CannotEdit(f"{fd.name} written {len(found)} times")
    return _value_edits(lay, fd, found[0].value, getattr(old, fd.name), getattr(new, fd.name)), []


def _value_edits(lay: _Layout, fd: FieldDescriptor, value: object, old: Any, new: Any) -> list[_Edit]:
    """One value edited in place: a message inside its braces, a scalar's token replaced."""
    if _is_message(fd) and isinstance(value, _Body):
        return _message_edits(lay, value, old, new)
    if not _is_message(fd) and isinstance(value, _Scalar):
        return [_Edit(value.start, value.end, _scalar_text(fd, new))]
    raise _CannotEdit(f"{fd.name}: a value of another kind")


def _repeated_edits(
    lay: _Layout, fd: FieldDescriptor, found: list[_Field], old: Message, new: Message
) -> tuple[list[_Edit], list[_Add]]:
    """Element by element when the count stays; else the field written again where it stood."""
    olds, news = list(getattr(old, fd.name)), list(getattr(new, fd.name))
    elements = [e for f in found for e in _elements(f)]
    if len(elements) != len(olds):
        raise _CannotEdit(f"{fd.name}: {len(elements)} values read, {len(olds)} parsed")
    if not news:
        return [_delete(lay.text, f) for f in found], []
    if not found:
        return [], [_Add(_only(new, fd))]
    if len(olds) == len(news):
        pairs = zip(elements, olds, news, strict=True)
        return [e for value, o, n in pairs if o != n for e in _value_edits(lay, fd, value, o, n)], []
    return _rewrite(lay, fd, found, new), []


def _rewrite(lay: _Layout, fd: FieldDescriptor, found: list[_Field], new: Message) -> list[_Edit]:
    """The field's new values where its first occurrence stood (a list stays a list); the
    other occurrences deleted."""
    first, rest = found[0], found[1:]
    deleted = [_delete(lay.text, f) for f in rest]
    if isinstance(first.value, _List):
        values = list(getattr(new, fd.name))
        return [_Edit(first.value.start, first.value.end, _list_text(lay, first, fd, values)), *deleted]
    indent = _indent(lay.text, first.start)
    text = _render(_only(new, fd), indent, lay, "block" if _alone(lay.text, first) else "line")
    return [_Edit(first.start, first.end, text), *deleted]


def _map_edits(
    lay: _Layout, fd: FieldDescriptor, found: list[_Field], old: Message, new: Message
) -> tuple[list[_Edit], list[_Add]]:
    """A map's entries matched by key: an entry gone is deleted, one changed is edited inside,
    new ones go after the map's last entry."""
    assert fd.message_type is not None  # a map's entry type
    entry_class = message_factory.GetMessageClass(fd.message_type)
    olds, news = getattr(old, fd.name), getattr(new, fd.name)
    edits: list[_Edit] = []
    keys: set[object] = set()
    for field in found:
        for value in _elements(field):
            if not isinstance(value, _Body):
                raise _CannotEdit(f"{fd.name}: an entry that is not a message")
            entry: Any = _entry_read(lay.text, value, entry_class)
            if entry.key in keys:
                raise _CannotEdit(f"{fd.name}: a key written twice")
            keys.add(entry.key)
            edits += _entry_edits(lay, field, value, entry, news)
    added = [k for k in news if k not in olds]
    if not added:
        return edits, []
    only = _only(new, fd)
    for key in [k for k in getattr(only, fd.name) if k not in added]:
        del getattr(only, fd.name)[key]
    return edits, [_Add(only, tuple(found))]


def _entry_edits(lay: _Layout, field: _Field, value: _Body, entry: Any, news: Any) -> list[_Edit]:
    """One map entry of the text (``entry``, read from ``value``) against the new map: deleted
    when its key is gone, edited inside when its value changed."""
    key = entry.key
    if key not in news:
        if len(_elements(field)) != 1:
            raise _CannotEdit(f"{field.name}: an entry to delete inside a list")
        return [_delete(lay.text, field)]
    wanted = type(entry)()
    wanted.key = key
    if _is_message(entry.DESCRIPTOR.fields_by_name["value"]):
        wanted.value.CopyFrom(news[key])
    else:
        wanted.value = news[key]
    return [] if wanted == entry else _message_edits(lay, value, entry, wanted)


def _entry_read(text: str, value: _Body, entry_class: type[Message]) -> Message:
    entry = entry_class()
    text_format.Parse(text[value.open + 1 : value.close], entry)
    return entry


def _delete(text: str, field: _Field) -> _Edit:
    """Delete a field: its whole lines when it stands alone on them (a comment after it too),
    else the field and the spaces beside it."""
    if _alone(text, field):
        start, end = _line_start(text, field.start), _line_end(text, field.stop)
        return _Edit(start, min(end + 1, len(text)), "", field.start)
    if not _ends_line(text, field.stop):  # more follows on the line: the spaces after it go
        end = field.stop + len(text[field.stop :]) - len(text[field.stop :].lstrip(" \t"))
        return _Edit(field.start, end, "", field.start)
    start = len(text[: field.start].rstrip(" \t"))
    return _Edit(start, field.stop, "", field.start)


def _insert(lay: _Layout, body: _Body, after: _Field | None, message: Message) -> _Edit:
    """An edit that adds ``message``'s fields to ``body``: after the field ``after`` on lines of
    their own (or on its line when more follows it); without ``after``, at the end of the file
    (top level) or of the body. After a message written on one line, each new field gets one line."""
    text = lay.text
    if after is None and body.open < 0:
        lead = "" if not text or text.endswith("\n") else "\n"
        return _Edit(len(text), len(text), lead + _render(message, "", lay) + "\n")
    if after is None:
        return _insert_alone(lay, body, message)
    if not _ends_line(text, after.stop):
        return _Edit(after.stop, after.stop, " " + _render(message, "", lay, "line"))
    indent = _indent(text, after.start) if _starts_line(text, after.start) else _sibling_indent(lay, body)
    one_liner = isinstance(after.value, (_Body, _List)) and "\n" not in text[after.start : after.stop]
    lines = indent + _render(message, indent, lay, "each" if one_liner else "block")
    end = _line_end(text, after.stop)
    if end == len(text):  # the last line of a file without a final newline
        return _Edit(end, end, "\n" + lines + "\n")
    return _Edit(end + 1, end + 1, lines + "\n")


def _insert_alone(lay: _Layout, body: _Body, message: Message) -> _Edit:
    """Fields for a message none of whose fields stay: before its closing brace."""
    text, close = lay.text, body.close
    if not _starts_line(text, close) or "\n" not in text[body.open : close]:
        pad = "" if text[close - 1] in " \t" else " "
        return _Edit(close, close, pad + _render(message, "", lay, "line") + " ")
    indent = _sibling_indent(lay, body)
    at = _line_start(text, close)
    return _Edit(at, at, indent + _render(message, indent, lay) + "\n")


def _sibling_indent(lay: _Layout, body: _Body) -> str:
    """The indent of the body's fields: its first field that starts a line, else one step in."""
    first = next((f for f in body.fields if _starts_line(lay.text, f.start)), None)
    return _indent(lay.text, first.start) if first else _indent(lay.text, body.open) + lay.step


# ---------------------------------------------------------------- new text


def _only(message: Message, fd: FieldDescriptor) -> Message:
    """A copy of ``message`` with only the field ``fd`` set."""
    out = type(message)()
    out.CopyFrom(message)
    for other, _ in out.ListFields():
        if other.name != fd.name:
            out.ClearField(other.name)
    return out


def _scalar_text(fd: FieldDescriptor, value: object) -> str:
    out = io.StringIO()
    text_format.PrintFieldValue(fd, value, out)
    return out.getvalue()


def _render(message: Message, indent: str, lay: _Layout, shape: _Shape = "block") -> str:
    """The message's fields in text format, repeated numbers and names written as the file
    writes them. ``block``: lines indented by ``indent`` and the file's step a level; ``line``:
    all on one line; ``each``: a line per field written (``parameters { key: "a" ... }``). The
    first line never has ``indent``: it goes where a field started."""
    text = str(text_format.MessageToString(message, use_short_repeated_primitives=bool(lay.lists)))
    if lay.lists == "[ ":
        text = _SHORT_LIST.sub(r"\1[ \2 ]", text)
    lines = text.splitlines()
    if shape == "line":
        return " ".join(line.strip() for line in lines)
    if shape == "each":
        return f"\n{indent}".join(" ".join(chunk) for chunk in _chunks(lines))
    levels = [(len(line) - len(line.lstrip(" "))) // len(_STEP) for line in lines]
    return f"\n{indent}".join(lay.step * n + line.lstrip(" ") for n, line in zip(levels, lines, strict=True))


def _chunks(lines: list[str]) -> list[list[str]]:
    """text_format's lines, stripped, grouped by the top-level field they write."""
    chunks: list[list[str]] = []
    for line in lines:
        if not chunks or (not line.startswith(" ") and line != "}"):
            chunks.append([])
        chunks[-1].append(line.strip())
    return chunks


def _list_text(lay: _Layout, field: _Field, fd: FieldDescriptor, values: list[Any]) -> str:
    """``[ ... ]`` of the new values, spaced as the list it replaces, on one line when that was."""
    assert isinstance(field.value, _List)
    text, start, end = lay.text, field.value.start, field.value.end
    pad = " " if text[start + 1 : start + 2].isspace() else ""
    if not _is_message(fd):
        return f"[{pad}{', '.join(_scalar_text(fd, v) for v in values)}{pad}]"
    if "\n" not in text[start:end]:
        return f"[{pad}{', '.join(_braced(v, lay) for v in values)}{pad}]"
    outer = _indent(text, field.start)
    inner = outer + lay.step
    items = [inner + _braced_lines(v, inner, lay) for v in values]
    return "[\n" + ",\n".join(items) + f"\n{outer}]"


def _braced_lines(message: Message, indent: str, lay: _Layout) -> str:
    """``{``, the message's fields a level in, and ``}`` on a line indented by ``indent``."""
    inside = _render(message, indent + lay.step, lay)
    return f"{{\n{indent}{lay.step}{inside}\n{indent}}}" if inside else "{\n" + indent + "}"


def _braced(message: Message, lay: _Layout) -> str:
    inside = _render(message, "", lay, "line")
    return f"{{ {inside} }}" if inside else "{ }"
