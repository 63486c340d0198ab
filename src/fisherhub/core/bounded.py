"""The one reader of structured text someone else wrote (a repo's JSON files, a card's YAML header, an adapter's
config, a signature's header): a file is refused, naming it, when it is larger than the bound its caller states,
nested deeper than ``MAX_DEPTH`` containers, or holding more values than it has bytes (only YAML aliases can:
``a: &a [x, x]``, ``b: [*a, *a]``, ... doubles with each line) or a value that contains itself. What it returns
can then be walked, copied, printed and dumped by code that recurses, without exhausting the stack or memory.
``read_json`` checks the depth on the text before parsing; ``read_parsed`` (YAML) and ``check_tree`` (data a
client parsed) on what was built.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from typing import Any

import numpy as np

from fisherhub.core.errors import FisherHubError, InputError

#: containers (mappings, lists) nested in anything we read; the deepest we write is 4 (a card's ``model-index``)
MAX_DEPTH = 32


_CONTAINERS = (dict, list, tuple)


def _children(value: Any) -> list[Any]:
    return [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)


def tree_problem(value: Any, max_depth: int, max_values: int) -> str | None:
    """Why the parsed ``value`` is refused (None: it is a tree of at most ``max_depth`` nested containers and
    ``max_values`` values, counting a shared value each time it is reached). Iterative, and linear in the
    distinct containers: each is visited once, its depth and expanded size kept by identity."""
    if not isinstance(value, _CONTAINERS):
        return None
    done: dict[int, tuple[int, int]] = {}  # id -> (containers deep, values in it with shared ones expanded)
    path: set[int] = set()  # the containers whose children are being walked
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, closing = stack.pop()
        key = id(item)
        if closing:
            path.discard(key)
            depth, size = 1, 1
            for child in _children(item):
                if isinstance(child, _CONTAINERS):
                    below, inside = done[id(child)]
                    depth, size = max(depth, below + 1), size + inside
                else:
                    size += 1
            if size > max_values:
                return f"has more than {max_values:,} values once its aliases are expanded"
            done[key] = (depth, size)
            continue
        if key in done:
            continue
        path.add(key)
        if len(path) > max_depth:
            return f"is nested more than {max_depth} deep"
        stack.append((item, True))
        for child in _children(item):
            if isinstance(child, _CONTAINERS) and id(child) not in done:
                if id(child) in path:
                    return "refers to itself"
                stack.append((child, False))
    return None


def check_size(size: int | None, where: str, *, max_bytes: int, error: type[FisherHubError] = InputError) -> None:
    """``error`` naming ``where`` when ``size`` (bytes; None: not known) is larger than ``max_bytes``: a file a
    listing gives the size of is refused before it is downloaded."""
    if size is not None and size > max_bytes:
        raise error(f"{where} is {size:,} bytes, larger than the {max_bytes:,} such a file may have: not read")


def read_file(
    path: str | os.PathLike, where: str, *, max_bytes: int, error: type[FisherHubError] = InputError
) -> bytes:
    """The bytes of the regular file ``path``, refused unread (``error`` naming ``where``) when it is larger than
    ``max_bytes`` or not a regular file (a FIFO would block)."""
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode):
            raise error(f"{where} is not a regular file: not read")
        check_size(status.st_size, where, max_bytes=max_bytes, error=error)
        with open(path, "rb") as handle:
            return handle.read(max_bytes + 1)  # a file that grew since is refused by its reader
    except OSError as exc:
        raise error(f"{where} cannot be read ({exc.strerror or exc})") from exc


def _text(data: bytes | str, where: str, max_bytes: int, error: type[FisherHubError]) -> str:
    check_size(len(data), where, max_bytes=max_bytes, error=error)
    try:
        return data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise error(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


#: a JSON string (an unterminated one runs to the end, as the parser reads it) and what is not a bracket
_JSON_STRING = re.compile(r'"(?:[^"\\]+|\\.)*"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """The most containers open at once in the JSON ``text``, counted on its brackets outside strings (at
    least the depth ``json.loads`` recurses to on any prefix it accepts), without parsing it."""
    brackets = np.frombuffer(_NOT_BRACKET.sub("", _JSON_STRING.sub("", text)).encode("ascii"), dtype=np.uint8)
    if not len(brackets):
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def read_json(
    data: bytes | str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = MAX_DEPTH,
    error: type[FisherHubError] = InputError,
) -> Any:
    """The JSON ``data`` (bytes as UTF-8, or text), refused with ``error`` naming ``where`` (the file as the user
    knows it) when it is longer than ``max_bytes``, not UTF-8, nested more than ``max_depth`` deep (checked
    before it is parsed) or not JSON. Its values are fewer than its bytes: the size bounds what it holds."""
    text = _text(data, where, max_bytes, error)
    if json_depth(text) > max_depth:
        raise error(f"{where} is nested more than {max_depth} deep: not read")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{where} is not valid JSON ({' '.join(str(exc).split())[:300]})") from exc


def check_tree(value: Any, where: str, *, max_values: int, max_depth: int = MAX_DEPTH, error=InputError) -> Any:
    """``value`` (parsed by someone else: a listing's card data), refused with ``error`` when ``tree_problem``."""
    problem = tree_problem(value, max_depth, max_values)
    if problem is not None:
        raise error(f"{where} {problem}: not read")
    return value


def read_parsed(
    data: bytes | str,
    where: str,
    parse: Callable[[str], Any],
    *,
    max_bytes: int,
    max_depth: int = MAX_DEPTH,
    parse_errors: tuple[type[BaseException], ...] = (ValueError,),
    what: str,
    error: type[FisherHubError] = InputError,
) -> Any:
    """``data`` parsed by ``parse`` (a YAML loader: the format ``what``), under the bounds of ``read_json``, and
    at most as many values as it has bytes with its aliases expanded, none referring to itself (``tree_problem``,
    on what the parser built; a parser that recurses stops with ``RecursionError`` before, refused as too deep)."""
    text = _text(data, where, max_bytes, error)
    try:
        value = parse(text)
    except RecursionError:
        raise error(f"{where} is nested more than {max_depth} deep: not read") from None
    except parse_errors as exc:
        raise error(f"{where} is not valid {what} ({' '.join(str(exc).split())[:300]})") from exc
    return check_tree(value, f"{where}: its {what}", max_values=max(len(text), 1), max_depth=max_depth, error=error)
