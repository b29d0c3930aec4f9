from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lakewarden.config import load_config
from lakewarden.domain.durations import parse_duration
from lakewarden.domain.errors import InvalidField


def test_defaults_are_amoro_like(tmp_path: Path) -> None:
    cfg = load_config(environ={"LAKEWARDEN_AMS__DATA_DIR": str(tmp_path)})
    assert cfg.ams.http_server.bind_port == 1630
    assert cfg.ams.refresh_external_catalogs.interval == timedelta(minutes=3)
    assert cfg.ams.optimizer.heart_beat_timeout == timedelta(minutes=1)
    assert cfg.ams.optimizer.task_ack_timeout == timedelta(seconds=30)
    assert cfg.database_url == f"sqlite:///{tmp_path / 'lakewarden.db'}"
    assert [(g.name, g.properties) for g in cfg.resource_groups] == [("default", {"instances": "1"})]
    lake, local = cfg.catalog_seeds()
    assert (lake.name, lake.type, local.name, local.type) == ("lake", "internal", "local", "sql")
    assert lake.properties["warehouse"] == str(tmp_path / "warehouse" / "lake")
    assert local.properties["warehouse"] == str(tmp_path / "warehouse")


def test_yaml_file_and_environment_override(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "ams:\n"
        "  http-server: {bind-port: 1700}\n"
        "  database: {url: 'postgresql+psycopg://u:p@db/lw'}\n"
        "  refresh-external-catalogs: {interval: 30s, thread-count: 3}\n"
        "  optimizer: {task-execute-timeout: 2h}\n"
        "containers:\n  - {name: local}\n  - {name: big, container-impl: local, properties: {memory: 8g}}\n"
        "catalogs: []\n"
    )
    env = {"LAKEWARDEN_AMS__HTTP_SERVER__BIND_PORT": "1800", "LAKEWARDEN_SERVER": "ignored: not a config key"}
    cfg = load_config(path, environ=env)
    assert cfg.ams.http_server.bind_port == 1800
    assert cfg.database_url == "postgresql+psycopg://u:p@db/lw"
    assert cfg.ams.refresh_external_catalogs.thread_count == 3
    assert cfg.ams.optimizer.task_execute_timeout == timedelta(hours=2)
    assert cfg.container_names == ["local", "big"]
    assert cfg.catalog_seeds() == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [("500ms", 0.5), ("30s", 30), ("3min", 180), ("1h", 3600), ("1d", 86400), (2500, 2.5), ("1500", 1.5)],
)
def test_durations(text: str | int, expected: float) -> None:
    assert parse_duration(text).total_seconds() == expected


@pytest.mark.parametrize("value", [3.0e145, float("nan"), float("inf"), "1" + "0" * 30 + "d"])
def test_a_duration_too_long_for_a_timedelta_is_a_value_error(value: float | str) -> None:
    with pytest.raises(ValueError, match=r"too long|is not a duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"LAKEWARDEN_AMS__HTTP_SERVER__BIND_PORT": "abc"}, "ams.http-server.bind-port"),
        ({"LAKEWARDEN_AMS__OPTIMIZER__TASK_ACK_TIMEOUT": "3 parsecs"}, "ams.optimizer.task-ack-timeout"),
        ({"LAKEWARDEN_AMS__NO_SUCH_KEY": "1"}, "ams.no-such-key"),
        (
            {"LAKEWARDEN_AMS__REFRESH_EXTERNAL_CATALOGS__THREAD_COUNT": "0"},
            "ams.refresh-external-catalogs.thread-count",
        ),
    ],
)
def test_bad_values_name_their_key(env: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidField) as info:
        load_config(environ=env)
    assert info.value.field == field


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidField, match="does not exist"):
        load_config(tmp_path / "nope.yaml", environ={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("ams: [unclosed")
    with pytest.raises(InvalidField, match="not valid YAML"):
        load_config(broken, environ={})


def test_an_unknown_container_impl_is_refused_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("containers:\n  - {name: big, container-impl: yarn}\n")
    with pytest.raises(InvalidField) as info:
        load_config(config, environ={})
    assert info.value.field == "containers.0.container-impl" and "external" in str(info.value)
    config.write_text("containers:\n  - {name: local}\n  - {name: ext, container-impl: external}\n")
    loaded = load_config(config, environ={})
    assert [c.container_impl for c in loaded.containers] == ["local", "external"]
