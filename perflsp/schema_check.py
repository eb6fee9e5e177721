"""A JSON Schema (draft 2020-12) validator for the keywords perflsp's own schemas use.

The language server must judge a `.perflsp/profiles/*.json` a cloned repository committed before
it renders one, and neither it nor the GPU machines have `jsonschema`. The tests check that this
validator agrees with `jsonschema` on the shipped schema. Keywords outside the list below are
refused when a schema uses them, so that a schema edit never silently validates less.
Standard library only.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping

_ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs", "default", "examples", "$comment"}
_JSON_TYPES: Dict[str, Callable[[Any], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


_BOUNDS: Dict[str, Callable[[Any, Any], bool]] = {
    "minimum": lambda value, bound: value < bound, "maximum": lambda value, bound: value > bound,
    "exclusiveMinimum": lambda value, bound: value <= bound, "exclusiveMaximum": lambda value, bound: value >= bound,
}


class Validator:
    def __init__(self, schema: Mapping[str, Any]):
        self.root = schema
        self.keywords: Dict[str, Callable[[Any, Any, Mapping[str, Any], str, List[str]], None]] = {
            "type": self._type, "enum": self._enum, "const": self._const, "required": self._required,
            "properties": self._properties, "additionalProperties": self._additional, "items": self._items,
            **{keyword: self._bound(keyword, fails) for keyword, fails in _BOUNDS.items()}, "minLength": self._min_length,
            "minItems": self._min_items, "maxItems": self._max_items, "oneOf": self._one_of,
            "anyOf": self._any_of, "allOf": self._all_of, "if": self._if, "$ref": self._ref,
        }

    def problems(self, instance: Any, limit: int = 10) -> List[str]:
        """Where `instance` breaks the schema, as `path: what` (empty when it is valid)."""
        out: List[str] = []
        self._check(instance, self.root, "$", out)
        return out[:limit]

    def _check(self, value: Any, schema: Any, where: str, out: List[str]) -> None:
        if schema is True or schema == {}:
            return
        if schema is False:
            out.append(f"{where}: not allowed")
            return
        for keyword, argument in schema.items():
            if keyword in _ANNOTATIONS or keyword in ("then", "else"):
                continue
            check = self.keywords.get(keyword)
            if check is None:
                raise ValueError(f"schema keyword {keyword!r} is not supported by perflsp.schema_check")
            check(value, argument, schema, where, out)

    def _valid(self, value: Any, schema: Any, where: str) -> bool:
        return not self._each(value, [schema], where)[0]

    def _type(self, value, argument, schema, where, out) -> None:
        names = [argument] if isinstance(argument, str) else argument
        if not any(_JSON_TYPES[name](value) for name in names):
            out.append(f"{where}: {_kind(value)}, expected {' or '.join(names)}")

    def _enum(self, value, argument, schema, where, out) -> None:
        if not any(_same(value, option) for option in argument):
            out.append(f"{where}: {_short(value)} is not one of {', '.join(map(_short, argument))}")

    def _const(self, value, argument, schema, where, out) -> None:
        if not _same(value, argument):
            out.append(f"{where}: {_short(value)}, expected {_short(argument)}")

    def _required(self, value, argument, schema, where, out) -> None:
        if isinstance(value, dict):
            out.extend(f"{where}: missing `{key}`" for key in argument if key not in value)

    def _properties(self, value, argument, schema, where, out) -> None:
        if isinstance(value, dict):
            for key, sub in argument.items():
                if key in value:
                    self._check(value[key], sub, f"{where}.{key}", out)

    def _additional(self, value, argument, schema, where, out) -> None:
        if isinstance(value, dict):
            known = schema.get("properties", {})
            for key in value:
                if key not in known:
                    if argument is False:
                        out.append(f"{where}: unexpected `{_short(key)}`")
                    else:
                        self._check(value[key], argument, f"{where}.{key}", out)

    def _items(self, value, argument, schema, where, out) -> None:
        if isinstance(value, list):
            for index, item in enumerate(value):
                self._check(item, argument, f"{where}[{index}]", out)

    @staticmethod
    def _bound(keyword: str, fails: Callable[[Any, Any], bool]):
        def check(value, argument, schema, where, out) -> None:
            if _JSON_TYPES["number"](value) and fails(value, argument):
                out.append(f"{where}: {value!r} breaks {keyword} {argument!r}")
        return check

    def _min_length(self, value, argument, schema, where, out) -> None:
        if isinstance(value, str) and len(value) < argument:
            out.append(f"{where}: shorter than {argument} characters")

    def _min_items(self, value, argument, schema, where, out) -> None:
        if isinstance(value, list) and len(value) < argument:
            out.append(f"{where}: fewer than {argument} items")

    def _max_items(self, value, argument, schema, where, out) -> None:
        if isinstance(value, list) and len(value) > argument:
            out.append(f"{where}: more than {argument} items")

    def _one_of(self, value, argument, schema, where, out) -> None:
        found = self._each(value, argument, where)
        matches = sum(not problems for problems in found)
        if matches == 0:
            out.extend(_closest(value, argument, found))
        elif matches > 1:
            out.append(f"{where}: matches {matches} of the {len(argument)} allowed shapes, expected exactly one")

    def _any_of(self, value, argument, schema, where, out) -> None:
        found = self._each(value, argument, where)
        if all(found):
            out.extend(_closest(value, argument, found))

    def _each(self, value: Any, schemas: List[Any], where: str) -> List[List[str]]:
        found: List[List[str]] = []
        for sub in schemas:
            found.append([])
            self._check(value, sub, where, found[-1])
        return found

    def _all_of(self, value, argument, schema, where, out) -> None:
        for sub in argument:
            self._check(value, sub, where, out)

    def _if(self, value, argument, schema, where, out) -> None:
        branch = "then" if self._valid(value, argument, where) else "else"
        if branch in schema:
            self._check(value, schema[branch], where, out)

    def _ref(self, value, argument, schema, where, out) -> None:
        if not argument.startswith("#/"):
            raise ValueError(f"only local $ref is supported, not {argument!r}")
        target: Any = self.root
        for part in argument[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        self._check(value, target, where, out)


def _closest(value: Any, schemas: List[Any], found: List[List[str]]) -> List[str]:
    """The problems of the alternative that came closest: one of the value's own type (an object
    with a bad field rather than "not null"), failing deepest inside the value."""
    def closeness(pair):
        schema, problems = pair
        names = schema.get("type", []) if isinstance(schema, dict) else []
        names = [names] if isinstance(names, str) else names
        right_type = not names or any(_JSON_TYPES[name](value) for name in names)
        return right_type, problems[0].split(":", 1)[0].count(".") + problems[0].count("[")

    return max(zip(schemas, found), key=closeness)[1]


def _same(a: Any, b: Any) -> bool:
    """JSON equality of scalars: true is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _kind(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return "a number" if name == "integer" and isinstance(value, float) else f"a{'n' if name[0] in 'aeio' else ''} {name}"
    return type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
