"""The reference pages that are generated from the code on every ``mkdocs build``.

A page asks for a generated part with a marker on a line of its own:

- ``<!-- generated: cli -->``: every command of the typer app with its options (from click's
  own objects, so a new option is in the reference the next build);
- ``<!-- generated: space-schema -->``: every key of the search space, from the pydantic model's
  JSON Schema, and that schema in full;
- ``<!-- generated: docstring MODULE -->``: a module's docstring as written (the version tables
  live in ``tuner/config/vllm_*.py``, where the rules are coded and cited);
- ``<!-- generated: methods -->``: one row per speculation method from its record in
  ``tuner/config/methods/``, then each method module's docstring (its releases and sources).

``tests/docs/`` loads this file by its path and checks the CLI and schema parts cover
everything.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from typing import Any

import typer

_MARKER = re.compile(r"^<!-- generated: (\S+)(?: (\S+))? -->$", re.M)


def _cell(text: str) -> str:
    """One Markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


# typer carries its own copy of click (typer._click), so commands and parameters are read
# through the attributes click documents, not through click's classes.
Command = Any
Parameter = Any


def walk_commands(
    group: Command, path: tuple[str, ...] = ("spectune",)
) -> Iterator[tuple[tuple[str, ...], Command]]:
    """Every visible command under ``group`` (itself first), with its words from ``spectune``."""
    yield path, group
    if isinstance(group, typer.core.TyperGroup):
        context = typer.Context(group, info_name=path[-1])
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            if command is not None and not command.hidden:
                yield from walk_commands(command, (*path, name))


def visible_params(command: Command) -> list[Parameter]:
    """The options and arguments a user can pass (not --help, nothing hidden)."""
    return [
        param
        for param in command.params
        if not getattr(param, "hidden", False) and param.name != "help"
    ]


def _default(param: Parameter) -> str:
    default = param.default
    if default is None or callable(default) or getattr(param, "show_default", True) is False:
        return ""
    if getattr(param, "is_flag", False) and default is False:
        return ""
    if isinstance(default, list | tuple):
        return " ".join(str(item) for item in default)
    return str(getattr(default, "value", default))


def _envvar(path: tuple[str, ...], param: Parameter) -> str:
    # click's auto_envvar_prefix: SPECTUNE, each sub-command's name, the parameter's name.
    words = [*path[1:], param.name or ""]
    return "SPECTUNE_" + "_".join(word.upper().replace("-", "_") for word in words)


def _param_rows(path: tuple[str, ...], command: Command) -> list[str]:
    rows = ["| option | default | environment | what it does |", "|---|---|---|---|"]
    for param in visible_params(command):
        if param.param_type_name == "argument":
            names = f"`{(param.name or '').upper()}` (argument)"
            help_text = getattr(param, "help", None) or ""
            env = ""
        else:
            names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
            help_text = getattr(param, "help", None) or ""
            env = f"`{_envvar(path, param)}`" if len(path) > 1 else ""
        default = _default(param)
        rows.append(
            f"| {names} | {_cell(f'`{default}`') if default else ''} | {env} | {_cell(help_text)} |"
        )
    return rows


def cli_markdown(app: typer.Typer | None = None) -> str:
    """The CLI reference of ``app`` (spectune's by default): one section per command, its help
    text and its options."""
    if app is None:
        from tuner.cli import app as spectune

        app = spectune
    root = typer.main.get_command(app)
    parts: list[str] = []
    for path, command in walk_commands(root):
        parts.append(f"## `{' '.join(path)}`")
        parts.append((command.help or "").strip())
        usage = " ".join(command.collect_usage_pieces(typer.Context(command)))
        parts.append(f"```\n{' '.join(path)} {usage}\n```")
        if visible_params(command):
            parts.append("\n".join(_param_rows(path, command)))
    return "\n\n".join(parts)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _sections(schema: dict[str, Any], node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The object forms a value may take, each with how its keys are written after the parent
    key: ``.`` for a section, ``[].`` for the items of a list of sections."""
    node = _resolve(schema, node)
    found = [(".", node)] if "properties" in node else []
    for branch in node.get("anyOf", []) + node.get("oneOf", []):
        found += _sections(schema, branch)
    if node.get("type") == "array":
        found += [("[].", section) for _, section in _sections(schema, node.get("items", {}))]
    return found


def schema_keys(
    schema: dict[str, Any], node: dict[str, Any] | None = None, prefix: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every key of the space, dotted (``slo.ttft_ms``, ``search.methods[].model``), with its
    schema: sections, lists of sections and the forms of a union, at every depth."""
    for joint, section in _sections(schema, schema if node is None else node):
        for key, value in section["properties"].items():
            path = f"{prefix}{joint}{key}" if prefix else key
            yield path, value
            yield from schema_keys(schema, value, path)


def _type(schema: dict[str, Any], node: dict[str, Any]) -> str:
    node = _resolve(schema, node)
    if "enum" in node:
        return " or ".join(f"`{value}`" for value in node["enum"])
    if "anyOf" in node:
        return " or ".join(dict.fromkeys(_type(schema, branch) for branch in node["anyOf"]))
    if node.get("type") == "array":
        return f"list of {_type(schema, node.get('items', {}))}"
    if "properties" in node:
        return str(node.get("title", "section"))
    return str(node.get("type", "any"))


def space_schema_markdown() -> str:
    """Every key of the search space (a table) and the JSON Schema itself."""
    from tuner.config.schema import space_json_schema

    schema = space_json_schema()
    rows = ["| key | type | default | what it is |", "|---|---|---|---|"]
    seen: set[str] = set()
    for path, node in schema_keys(schema):
        if path in seen:
            continue
        seen.add(path)
        section = "properties" in _resolve(schema, node)  # its keys have rows of their own
        default = f"`{json.dumps(node['default'])}`" if "default" in node and not section else ""
        description = str(_resolve(schema, node).get("description", node.get("description", "")))
        rows.append(
            f"| `{path}` | {_cell(_type(schema, node))} | {_cell(default)} | {_cell(description)} |"
        )
    full = json.dumps(schema, indent=2)
    return (
        "\n".join(rows)
        + '\n\n??? note "The JSON Schema (`spectune space schema`)"\n\n'
        + "    ```json\n"
        + "\n".join(f"    {line}" for line in full.splitlines())
        + "\n    ```"
    )


def docstring_markdown(module: str) -> str:
    """A module's docstring, verbatim, under the module's path."""
    text = importlib.import_module(module).__doc__ or ""
    return f"From `{module.replace('.', '/')}.py`:\n\n```text\n{text.strip()}\n```"


def methods_markdown() -> str:
    """The method registry as a table, then each method module's own story."""
    from tuner.config.methods import speculating

    rows = [
        "| method | family | first release | Model Runner V2 from | own `--speculative-config` "
        "keys | module |",
        "|---|---|---|---|---|---|",
    ]
    modules: list[str] = []
    for method in speculating():
        module = type(method).__module__  # each method's record is a class of its module
        keys = ", ".join(f"`{key}`" for key in method.keys) or "-"
        rows.append(
            f"| `{method.name}` | {method.family} | {method.since} | {method.v2_since} | {keys} "
            f"| `{module.replace('.', '/')}.py` |"
        )
        if module not in modules:
            modules.append(module)
    parts = ["\n".join(rows)]
    parts += [docstring_markdown(module) for module in modules]
    return "\n\n".join(parts)


def generated(kind: str, argument: str | None) -> str:
    """The Markdown a marker stands for."""
    if kind == "methods":
        return methods_markdown()
    if kind == "cli":
        return cli_markdown()
    if kind == "space-schema":
        return space_schema_markdown()
    if kind == "docstring" and argument:
        return docstring_markdown(argument)
    raise ValueError(
        f"unknown generated part {kind!r}: cli, space-schema, methods or docstring MODULE"
    )


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: each marker replaced with what it stands for."""
    return _MARKER.sub(lambda found: generated(found.group(1), found.group(2)), markdown)
