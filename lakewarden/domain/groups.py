"""Resource groups: the unit optimizers run in and tables are scheduled by (pure rules)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from lakewarden.domain.budget import validate_budget
from lakewarden.domain.costs import validate_prices
from lakewarden.domain.dynamic_allocation import validate_allocation
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.what_if import validate_shadow

# Letters, digits, '_' and '-', 1 to 64 characters, starting with a letter or digit.
GROUP_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SCHEDULING_POLICIES = ("quota", "balanced")
# a self-optimizing process takes at most this many bytes (Amoro's cost estimate) per thread of the group
MAX_INPUT_PER_THREAD = "max-input-file-size-per-thread"
MAX_INPUT_PER_THREAD_DEFAULT = 512 * 1024 * 1024  # Amoro's OptimizerProperties default
# the engines of other table formats a group's optimizers carry besides Iceberg (their Spark bundles and session
# extensions): a table of such a format has its services run only in a group that carries its engine
ENGINES_PROPERTY = "engines"
ENGINES = ("hudi", "paimon")


def group_engines(properties: Mapping[str, str]) -> tuple[str, ...]:
    """The group's `engines` (validated when the group was set), in ENGINES' order."""
    named = {word.strip() for word in properties.get(ENGINES_PROPERTY, "").split(",") if word.strip()}
    return tuple(engine for engine in ENGINES if engine in named)


def max_input_per_thread(properties: Mapping[str, str]) -> int:
    """The group's `max-input-file-size-per-thread` in bytes (validated when the group was set)."""
    value = properties.get(MAX_INPUT_PER_THREAD)
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else MAX_INPUT_PER_THREAD_DEFAULT


def validate_group(name: str, container: str, properties: Mapping[str, str], containers: Mapping[str, str]) -> None:
    """`containers`: the configured containers' names and container-impls."""
    if not GROUP_NAME_PATTERN.match(name):
        raise InvalidField(
            "name", f"{name!r} must be 1-64 letters, digits, '_' or '-', starting with a letter or digit"
        )
    validate_group_update(container, properties, containers)


def validate_group_update(container: str, properties: Mapping[str, str], containers: Mapping[str, str]) -> None:
    if container not in containers:
        known = ", ".join(sorted(containers)) or "none"
        raise InvalidField("container", f"{container!r} is not a configured container (configured: {known})")
    for key, value in properties.items():
        if not isinstance(value, str):
            raise InvalidField(f"properties.{key}", "must be a string")
    policy = properties.get("scheduling-policy")
    if policy is not None and policy not in SCHEDULING_POLICIES:
        raise InvalidField("properties.scheduling-policy", f"{policy!r} is not one of {', '.join(SCHEDULING_POLICIES)}")
    for key in ("instances", "parallelism", MAX_INPUT_PER_THREAD):
        if key in properties:
            value = properties[key]
            minimum = 0 if key == "instances" else 1
            if not value.isdigit() or int(value) < minimum:
                raise InvalidField(f"properties.{key}", f"{value!r} must be an integer >= {minimum}")
    if "java-options" in properties:
        _validate_java_options(properties["java-options"])
    for word in properties.get(ENGINES_PROPERTY, "").split(","):
        if word.strip() and word.strip() not in ENGINES:
            raise InvalidField(
                f"properties.{ENGINES_PROPERTY}", f"{word.strip()!r} is not an engine (known: {', '.join(ENGINES)})"
            )
    validate_prices(properties)
    validate_budget(properties)
    validate_shadow(properties)
    validate_allocation(containers[container], properties)


def _validate_java_options(value: str) -> None:
    """The local container's optimizers start their JVM with these: words that are not options (or an unclosed
    quote) would stop every optimizer of the group at start, with the reason only in its log."""
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise InvalidField("properties.java-options", f"{value!r} cannot be split into options: {exc}") from None
    for word in words:
        if not word.startswith("-"):
            raise InvalidField("properties.java-options", f"{word!r} is not a JVM option (options start with '-')")
