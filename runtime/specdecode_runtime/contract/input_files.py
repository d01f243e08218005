"""Reading the files a user hands to ``specdecode`` and ``specdecode-runtime``: SDDs, runtime configs, scenarios.

Every file goes through the same bounded steps, so a bad file fails the same way whichever command reads it:
bytes (size-capped) -> UTF-8 -> YAML (nesting depth, expanded size and duplicate keys checked while composing)
-> typed model (pydantic errors as ``field.path: message`` lines). A problem becomes an :class:`InputError` whose
lines name the file and, where YAML knows it, the line; the CLIs print them and exit 2. JSON is read as YAML.

Kept free of kopf and torch: both images import it.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, Iterable, Mapping, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

MAX_BYTES = 1 << 20  # an SDD, a runtime.yaml or a scenario is a few KiB; 1 MiB leaves room for comments
MAX_DEPTH = 32  # the deepest SDD path is about 8 levels
MAX_NODES = 100_000  # after aliases are expanded: a "billion laughs" file stops here, not in the validator

M = TypeVar("M", bound=BaseModel)


class InputError(ValueError):
    """A file (or stdin) that cannot be used; ``errors`` are ``field.path: what is wrong`` lines."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = list(errors)
        super().__init__(f"{source}: " + errors[0] if len(errors) == 1 else f"{source}:\n  " + "\n  ".join(errors))


class _TooLarge(yaml.YAMLError):
    pass


def _yaml12_float() -> re.Pattern[str]:
    # YAML 1.1 (PyYAML) reads 1e30 as a string; YAML 1.2 and the Kubernetes API server read it as a number.
    return re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses duplicate mapping keys, nesting deeper than ``max_depth`` and documents that
    expand (through aliases) to more than ``max_nodes`` nodes. The checks run while composing, so a 5 000-deep file
    is refused at ``max_depth``, long before Python's recursion limit."""

    max_depth = MAX_DEPTH
    max_nodes = MAX_NODES

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._weight: dict[int, int] = {}

    def compose_document(self) -> Any:
        self._weight = {}
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.constructor.ConstructorError(None, None, f"nested deeper than {self.max_depth} levels", mark)
            node: Any = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) not in self._weight:
            children: Iterable[Any] = ()
            if isinstance(node, yaml.SequenceNode):
                children = node.value
            elif isinstance(node, yaml.MappingNode):
                children = (n for pair in node.value for n in pair)
            weight = 1 + sum(self._weight.get(id(c), 1) for c in children)
            if weight > self.max_nodes:
                raise yaml.constructor.ConstructorError(
                    None, None, f"expands to more than {self.max_nodes} values (aliases included)", node.start_mark
                )
            self._weight[id(node)] = weight
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<: *base" may override keys on purpose
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                    seen.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:
                    continue  # an unhashable key; the base constructor reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {first})", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)


BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _yaml12_float(), list("-+0123456789"))


def read_text(path: str, *, max_bytes: int = MAX_BYTES, stdin: Any = None) -> str:
    """The file's text: at most ``max_bytes`` bytes of UTF-8; ``-`` reads standard input."""
    try:
        if path == "-":
            stream = stdin or sys.stdin
            raw = getattr(stream, "buffer", None)
            data = raw.read(max_bytes + 1) if raw is not None else stream.read(max_bytes + 1).encode()
        else:
            with open(path, "rb") as f:
                data = f.read(max_bytes + 1)
    except OSError as e:
        raise InputError(_name(path), [f"cannot read file: {e.strerror or e}"]) from None
    if len(data) > max_bytes:
        raise InputError(_name(path), [f"larger than {max_bytes} bytes"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(
            _name(path),
            [f"line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); save the file as UTF-8"],
        ) from None


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else str(path)


def _yaml_problem(err: yaml.YAMLError, text: str = "") -> str:
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, most C0 controls)
        line = text[: err.position].count("\n") + 1
        return f"line {line}: not valid YAML: character #x{err.character:04x} is not allowed in YAML text"
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    text = f"{context}: {problem}" if context and "duplicate" not in problem else problem
    return f"{where}not valid YAML: {text}"


def parse_yaml_documents(text: str, source: str) -> list[Any]:
    """Every non-empty document of a YAML stream, with the loader's bounds."""
    try:
        loader = BoundedLoader(text)  # the reader refuses control characters here already
    except yaml.YAMLError as e:
        raise InputError(source, [_yaml_problem(e, text)]) from None
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            doc = loader.get_data()
            if doc is not None:
                docs.append(doc)
        return docs
    except yaml.YAMLError as e:
        raise InputError(source, [_yaml_problem(e, text)]) from None
    except RecursionError:  # defensive: the depth bound is far below the recursion limit
        raise InputError(source, [f"not valid YAML: nested deeper than {BoundedLoader.max_depth} levels"]) from None
    finally:
        loader.dispose()


def load_documents(path: str, *, max_bytes: int = MAX_BYTES, stdin: Any = None) -> list[Any]:
    """Every non-empty YAML (or JSON) document in ``path`` (``-``: standard input)."""
    return parse_yaml_documents(read_text(path, max_bytes=max_bytes, stdin=stdin), _name(path))


def load_single(path: str, *, what: str, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The one mapping a file must hold (a runtime config, a scenario)."""
    docs = load_documents(path, max_bytes=max_bytes)
    if not docs:
        raise InputError(_name(path), [f"empty: expected one {what} mapping"])
    if len(docs) > 1:
        raise InputError(_name(path), [f"holds {len(docs)} YAML documents; expected one {what}"])
    if not isinstance(docs[0], dict):
        raise InputError(_name(path), [f"(top level): expected a mapping ({what}), got {_type_name(docs[0])}"])
    return docs[0]


def _type_name(value: Any) -> str:
    return {
        type(None): "nothing (an empty document)",
        list: "a list",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
    }.get(type(value), type(value).__name__)


# pydantic's union-branch and key/value markers (``int``, ``constrained-int``, ``list[int]``, ``dict[str,int]``,
# ``function-after[...]``): whole names only, so a field that merely starts like one (``interconnect``) is kept
_LOC_MARKER = re.compile(
    r"^(?:int|float|str|bool|bytes|none|constrained-\w+|function-[\w-]+\[.*\]|(?:list|dict|tuple|set|literal)\[.*\])$"
)


def format_loc(loc: Iterable[Any], aliases: dict[str, str] | None = None) -> str:
    """A pydantic location as a field path the user wrote: ``spec.draft.ranks[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _LOC_MARKER.match(str(part)):
            continue  # says nothing to a user
        else:
            name = (aliases or {}).get(str(part), str(part))
            out += ("." if out else "") + name
    return out or "(top level)"


def _message(error: Mapping[str, Any]) -> str:
    msg: str = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than") and value is not None:
        return f"{msg}, got {value!r}"
    return msg


_PATH_FIRST = re.compile(r"^[A-Za-z_][\w.\[\]]*: ")


def _line(path: str, message: str) -> str:
    """``path: message``; a whole-object rule whose message already starts with the field it is about keeps that."""
    if path == "(top level)" and _PATH_FIRST.match(message):
        return message
    return f"{path}: {message}"


def format_validation_error(err: ValidationError, aliases: dict[str, str] | None = None) -> list[str]:
    """pydantic's errors as ``field.path: message`` lines, without duplicates, in pydantic's order."""
    lines = [_line(format_loc(e["loc"], aliases), _message(e)) for e in err.errors()]
    return sorted(set(lines), key=lines.index)


def validate_model(model: type[M], data: Any, source: str, *, what: str, error: type[InputError] = InputError) -> M:
    """``data`` as ``model``, or ``error`` (an :class:`InputError`) with one ``field.path: message`` line per
    problem."""
    if not isinstance(data, dict):
        raise error(source, [f"(top level): expected a mapping ({what}), got {_type_name(data)}"])
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise error(source, format_validation_error(err)) from None
