"""YAML that refuses a mapping key written twice, and numbers or sets YAML 1.1 reads otherwise.

PyYAML keeps the last of two equal keys without a word, so a policy file with `tasks:` holding
`code:` twice, or a task policy with two `slo:` blocks, would run with one of them silently
dropped. `safe_load` here is PyYAML's safe loader except that a repeated key is a
`yaml.constructor.ConstructorError` naming the key and both lines, so callers that already turn
YAML errors into problem lists report it like any other syntax error. Merge keys (`<<: *anchor`)
still override as YAML intends: only keys written out twice in one mapping are refused.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictSafeLoader(_Base):  # type: ignore[valid-type,misc]
    """`yaml.SafeLoader` (the C one when available) that refuses duplicate mapping keys."""

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is not key_node:
                    raise ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r} (first at line "
                        f"{first.start_mark.line + 1})", key_node.start_mark)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_yaml_timestamp(self, node: Node) -> Any:
        """A scalar written as a date or time (`2027-02-30T00:00:00Z`) that is none: PyYAML
        raised the calendar's `ValueError`, which no caller reads as a YAML error, so an
        impossible date in a policy file ended `policy check` and `serve` with a traceback."""
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise ConstructorError(None, None, f"{node.value!r} is not a date or time that "
                                   f"exists ({exc})", node.start_mark) from exc


    def construct_yaml_int(self, node: Node) -> Any:
        """YAML 1.1's integers that read as another number than written: a leading zero is
        octal (`context_window: 0200000` loaded as 65536) and `1:30` is base 60 (90)."""
        digits = str(node.value).lstrip("+-").replace("_", "")
        if ":" in digits or (len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()):
            raise ConstructorError(None, None, f"{node.value!r} reads as a YAML 1.1 octal or "
                                   "base-60 number, not the number written: write it without "
                                   "the leading zero (or quote it for a string)",
                                   node.start_mark)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: Node) -> Any:
        """A base-60 float (`0:25.0` read as 25.0, `1:30.5` as 90.5) is refused as its
        integers are."""
        if ":" in str(node.value):
            raise ConstructorError(None, None, f"{node.value!r} reads as a YAML 1.1 base-60 "
                                   "number, not the number written: write it as one number "
                                   "(or quote it for a string)", node.start_mark)
        return super().construct_yaml_float(node)

    def construct_yaml_set(self, node: Node) -> Any:
        """`!!set` loads in hash order, which changes from process to process: a candidate
        list written as one ran in another order, and the policy version changed with it."""
        raise ConstructorError(None, None, "!!set has no order: write a list", node.start_mark)


StrictSafeLoader.add_constructor("tag:yaml.org,2002:timestamp",
                                 StrictSafeLoader.construct_yaml_timestamp)
StrictSafeLoader.add_constructor("tag:yaml.org,2002:int", StrictSafeLoader.construct_yaml_int)
StrictSafeLoader.add_constructor("tag:yaml.org,2002:float",
                                 StrictSafeLoader.construct_yaml_float)
StrictSafeLoader.add_constructor("tag:yaml.org,2002:set", StrictSafeLoader.construct_yaml_set)


def safe_load(text: str) -> Any:
    """Parse `text` like `yaml.safe_load`, refusing a key written twice in one mapping."""
    return yaml.load(text, Loader=StrictSafeLoader)
