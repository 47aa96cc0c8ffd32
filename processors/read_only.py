"""Read-only dicts and lists: what a state read hands out and shares with the next reads.

A long thread's state holds thousands of plan steps. A read that copied every item for its
caller cost more the longer the thread (and fed the garbage collector thousands of dicts
per step); a read that shares its items costs only what changed since the last one. Shared
items must not change under the next reader, so they refuse every change in place with a
``TypeError`` that says what to do instead. Everything else is a plain ``dict`` or
``list``: equality, iteration, ``json`` and ``orjson`` serialisation and pydantic
validation see no difference, and every way to get a copy gives a plain, changeable one
(``dict(item)``, ``item.copy()``, ``item | other``, ``items[:]``, ``copy.copy``; deep:
``copy.deepcopy``, ``pickle``). Serialisers that refuse subclasses of ``dict`` and
``list`` (``yaml.safe_dump``, ``marshal``) take a ``copy.deepcopy``.

What is not refused: C functions that work on a list's storage directly (``heapq``), and
the unbound methods of ``dict`` and ``list`` called on purpose (``dict.update(item, ...)``).
"""

from __future__ import annotations

import copy
from collections import deque
from itertools import chain, repeat
from typing import Any, NoReturn

REFUSED = (
    "this state read is shared with later reads and cannot be changed in place: "
    "change a copy instead (dict(item), list(items), or copy.deepcopy(state))"
)


def _refuse(self: object, *_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError(REFUSED)


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that refuses changes in place; its copies are plain dicts."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __new__(cls, *args: Any, **kwargs: Any) -> ReadOnlyDict:
        made = super().__new__(cls)
        dict.__init__(made, *args, **kwargs)
        return made

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        """Filled by ``__new__``: calling this again changes nothing."""

    @classmethod
    def fromkeys(cls, keys: Any, value: Any = None) -> dict[Any, Any]:  # type: ignore[override]
        return dict.fromkeys(keys, value)

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple[type, tuple[dict[Any, Any]]]:
        return dict, (dict(self),)


class ReadOnlyList(list):  # type: ignore[type-arg]
    """A ``list`` that refuses changes in place; its copies are plain lists."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __new__(cls, *args: Any) -> ReadOnlyList:
        made = super().__new__(cls)
        list.__init__(made, *args)
        return made

    def __init__(self, *_args: Any) -> None:
        """Filled by ``__new__``: calling this again changes nothing."""

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(value, memo) for value in self]

    def __reduce__(self) -> tuple[type, tuple[list[Any]]]:
        return list, (list(self),)


def read_only(value: Any) -> Any:
    """``value`` (plain JSON: dicts, lists, scalars) with every dict and list read-only."""
    kind = type(value)
    if kind is dict:
        return ReadOnlyDict({k: v if type(v) not in _CONTAINERS else read_only(v) for k, v in value.items()})
    if kind is list:
        if len(value) > 1 and set(map(type, value)) == _DICT:
            return _dicts(value)
        return ReadOnlyList([v if type(v) not in _CONTAINERS else read_only(v) for v in value])
    return value  # a scalar; the scalars inside containers are kept without a call each


def _dicts(items: list[dict[str, Any]]) -> ReadOnlyList:
    """A list of dicts (a section of a state: 1,600 plan steps) made read-only in C loops:
    made one by one in Python, its dicts cost five times its parse (2.6 against 0.5 ms).
    Their values that are containers, found in C too, are made read-only as any."""
    made: list[ReadOnlyDict] = list(map(_NEW_DICT, repeat(ReadOnlyDict, len(items))))
    deque(map(dict.update, made, items), maxlen=0)
    if not _CONTAINERS.isdisjoint(map(type, chain.from_iterable(map(dict.values, items)))):
        for item in made:
            if not _CONTAINERS.isdisjoint(map(type, item.values())):
                for key, v in item.items():
                    if type(v) in _CONTAINERS:
                        dict.__setitem__(item, key, read_only(v))
    out = _NEW_LIST(ReadOnlyList)
    list.extend(out, made)
    return out


_CONTAINERS = frozenset({dict, list})
_DICT = {dict}
_NEW_DICT, _NEW_LIST = dict.__new__, list.__new__
"""The C constructors, without ``ReadOnlyDict.__new__``'s Python frame (the filling follows)."""


__all__ = ["REFUSED", "ReadOnlyDict", "ReadOnlyList", "read_only"]
