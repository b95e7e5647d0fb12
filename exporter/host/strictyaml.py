"""YAML for the agent's own config files (the web config, the showback file): PyYAML's safe
loader, made strict where a config file must be. Duplicate keys are refused (exporter-toolkit's
strict unmarshalling does; two `currency:` lines would be two currencies), and depth (and, where
asked, aliases) is checked on the parser's event stream before any node is built: PyYAML builds
nodes recursively, so a deeply nested file would be a RecursionError, and an alias can make a
list contain itself.
"""

from __future__ import annotations

from typing import Any

import yaml


class YamlRefused(ValueError):
    """The text is not a config file: one line, starting "not valid YAML"."""


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and keys that are not plain values."""

    names_only = False  # NamesLoader: every key must be a string


class NamesLoader(StrictLoader):
    """StrictLoader whose mapping keys must all be strings (names)."""

    names_only = True


def _mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if loader.names_only and not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, "a key is not a name", key_node.start_mark
            )
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a key is not a plain value", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {_shown(key)!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _shown(key: object) -> object:
    if isinstance(key, str) and not (key.isprintable() and len(key) <= 64):
        return key[:64]
    return key


def _line(event: yaml.Event) -> int:
    return event.start_mark.line + 1 if event.start_mark else 0


def load_strict(
    text: str, *, max_depth: int, aliases: bool = True, loader: type[StrictLoader] = StrictLoader
) -> Any:
    """The document in text (None when empty); YamlRefused says why it is not one."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if not aliases and isinstance(event, yaml.AliasEvent):
                raise YamlRefused(
                    f"not valid YAML: aliases (*name) are not supported, at line {_line(event)}"
                )
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    raise YamlRefused(
                        f"not valid YAML: nested deeper than {max_depth} levels "
                        f"at line {_line(event)}"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=loader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:  # the depth check makes this unreachable; never a traceback
        raise YamlRefused(f"not valid YAML: nested deeper than {max_depth} levels") from None
    except yaml.MarkedYAMLError as exc:
        where = f" at line {exc.problem_mark.line + 1}" if exc.problem_mark else ""
        raise YamlRefused(f"not valid YAML: {exc.problem or exc.context}{where}") from None
    except yaml.YAMLError as exc:
        raise YamlRefused(f"not valid YAML: {' '.join(str(exc).split())[:200]}") from None
