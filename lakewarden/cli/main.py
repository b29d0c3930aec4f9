"""The `lakewarden` command: the server, and client commands over its HTTP API."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import httpx
import typer

from lakewarden.cli._common import DEFAULT_SERVER, fail
from lakewarden.cli.catalogs import catalog_app
from lakewarden.cli.client import local_token
from lakewarden.cli.groups import group_app
from lakewarden.cli.processes import process_app
from lakewarden.cli.security import grant_app, principal_app, token_app
from lakewarden.cli.tables import table_app
from lakewarden.domain.errors import LakewardenError
from lakewarden.domain.groups import ENGINES

app = typer.Typer(help="lakewarden: lakehouse table management for Apache Iceberg.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
app.add_typer(group_app, name="group")
app.add_typer(table_app, name="table")
app.add_typer(process_app, name="process")
app.add_typer(principal_app, name="principal")
app.add_typer(token_app, name="token")
app.add_typer(grant_app, name="grant")


@app.command()
def server(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", envvar="LAKEWARDEN_CONFIG", help="YAML config file")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Run the lakewarden server (HTTP API, catalogs, scheduler services)."""
    from lakewarden.config import load_config
    from lakewarden.server import serve
    from lakewarden.store.claim import DatabaseInUse

    try:
        cfg = load_config(config)
    except LakewardenError as exc:
        fail(f"invalid config: {exc}")
    try:
        serve(cfg, log_level)
    except DatabaseInUse as exc:
        fail(str(exc))


@app.command()
def optimizer(
    group: Annotated[str, typer.Option(help="The resource group whose tasks to run")] = "default",
    parallelism: Annotated[int, typer.Option(min=1, max=256, help="Executor threads (and local[N] cores)")] = 1,
    spark_master: Annotated[str | None, typer.Option(help="Spark master; default local[parallelism]")] = None,
    driver_memory: Annotated[str, typer.Option(help="Spark driver memory")] = "2g",
    java_options: Annotated[
        str | None,
        typer.Option(help="Options of Spark's JVMs, not under spark-submit (default: -XX:+UseParallelGC)"),
    ] = None,
    drain_timeout: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=86400,
            help="Seconds a stopping optimizer (SIGTERM, or asked to leave) lets running tasks finish; past it they "
            "are canceled and handed out again (default: the optimizer's DRAIN_TIMEOUT_SECONDS, two minutes)",
        ),
    ] = None,
    resource_id: Annotated[str | None, typer.Option(hidden=True)] = None,
    server: Annotated[
        str,
        typer.Option(
            "--server",
            envvar="LAKEWARDEN_SERVER",
            help="URL of the lakewarden server, or the URLs of its nodes, comma-separated (high availability)",
        ),
    ] = DEFAULT_SERVER,
    engine: Annotated[
        list[str] | None,
        typer.Option(
            help="Another table format's engine the optimizer's Spark carries, to run that format's table "
            "services: hudi or paimon (repeatable); its group's `engines` property names those it needs"
        ),
    ] = None,
) -> None:
    """Run an optimizer: a PySpark application that pulls self-optimizing tasks of one group from the server."""
    from lakewarden.optimizer.app import DRAIN_TIMEOUT_SECONDS, JAVA_OPTIONS, Optimizer, leave
    from lakewarden.optimizer.client import ProtocolError
    from lakewarden.server import configure_logging

    configure_logging()
    if not any(url.strip() for url in server.split(",")):
        fail("--server: give the server's URL (or its nodes' URLs, comma-separated)")
    engines = tuple(dict.fromkeys(engine or []))
    for name in engines:
        if name not in ENGINES:
            fail(f"--engine: {name!r} is not an engine (known: {', '.join(ENGINES)})")
    try:
        Optimizer(
            server,
            group,
            parallelism,
            spark_master,
            resource_id,
            driver_memory,
            credential=local_token(),
            java_options=JAVA_OPTIONS if java_options is None else java_options,
            drain_timeout=DRAIN_TIMEOUT_SECONDS if drain_timeout is None else drain_timeout,
            engines=engines,
        ).run()
    except ProtocolError as exc:
        fail(str(exc))
    except httpx.ConnectError as exc:
        fail(f"cannot reach the lakewarden server at {server}: {exc}")
    leave(0)


@app.command()
def demo(
    minutes: Annotated[float, typer.Option(min=0.1, max=600, help="How long the writer streams")] = 3.0,
    tables: Annotated[int, typer.Option(min=1, max=20, help="Tables written to")] = 3,
    rows: Annotated[int, typer.Option(min=1, max=1_000_000, help="Rows per append")] = 200,
    merge_every: Annotated[int, typer.Option(min=2, max=1000, help="Every n-th commit is a MERGE update")] = 4,
    data_dir: Annotated[Path | None, typer.Option(help="Keep everything here (default: a temporary dir)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Server port (default 1630 or a free one)")] = None,
    storage: Annotated[
        str, typer.Option(help="local (the embedded default) or s3: an S3 server of the demo's own (moto)")
    ] = "local",
) -> None:
    """The main job, live: a server on the embedded default, a writer making small files, lakewarden compacting them."""
    from lakewarden.cli.demo import DemoError, DemoOptions, run_demo

    try:
        code = run_demo(
            DemoOptions(
                minutes=minutes,
                tables=tables,
                rows=rows,
                merge_every=merge_every,
                data_dir=data_dir,
                port=port,
                storage=storage,
            )
        )
    except DemoError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command("setup-spark")
def setup_spark(
    submit_args: Annotated[
        bool,
        typer.Option(
            "--submit-args",
            help="Print the spark-submit arguments of an optimizer instead: the jars, and the program to run "
            "(follow them with `lakewarden optimizer`'s options)",
        ),
    ] = False,
    submit_command: Annotated[
        bool, typer.Option("--submit-command", help="The same, after the path of pyspark's own spark-submit")
    ] = False,
    deploy_mode: Annotated[
        str,
        typer.Option(
            "--deploy-mode",
            help="For --submit-args/--submit-command: client (the driver here) or cluster (YARN, Kubernetes)",
        ),
    ] = "client",
    maven: Annotated[
        bool,
        typer.Option(
            "--maven",
            help="For --submit-args/--submit-command: --packages with the pinned coordinates; only lakewarden's "
            "own classes as a jar",
        ),
    ] = False,
    source_dir: Annotated[
        Path | None,
        typer.Option("--from", help="Take the pinned jars from this folder (searched recursively), not a repository"),
    ] = None,
    print_checksums: Annotated[
        bool,
        typer.Option(
            "--print-checksums",
            help="Fetch every pinned coordinate, check it against the repository's SHA-1 and print its SHA-256 "
            "(for upgrading a version in artifacts.toml); the cache is left alone",
        ),
    ] = False,
) -> None:
    """Fetch (or reuse) the Spark jars pinned in lakewarden/spark/artifacts.toml, checking each one's SHA-256, and
    compile lakewarden's own Java classes against them. LAKEWARDEN_MAVEN_REPO names a mirror of Maven Central."""
    from lakewarden.spark.jars import JarSetupError, ensure_spark_jars, jars_dir
    from lakewarden.spark.maven import ArtifactError, MavenCache, load_pins
    from lakewarden.spark.maven import print_checksums as print_pinned_checksums
    from lakewarden.spark.submit import DEPLOY_MODES, optimizer_submit_arguments, spark_submit_path

    if deploy_mode not in DEPLOY_MODES:
        fail(f"--deploy-mode {deploy_mode!r}: use one of {', '.join(DEPLOY_MODES)}")
    if source_dir is not None and not source_dir.is_dir():
        fail(f"--from {source_dir}: not a directory")
    try:
        if print_checksums:
            print_pinned_checksums(load_pins(), MavenCache(jars_dir() / "maven", log=lambda _: None), typer.echo)
            return
        if submit_args or submit_command:
            arguments = optimizer_submit_arguments(deploy_mode, maven)
            if submit_command:
                arguments.insert(0, spark_submit_path())
            typer.echo(" ".join(shlex.quote(a) for a in arguments))
            return
        jars = ensure_spark_jars(source_dir=source_dir)
    except (JarSetupError, ArtifactError) as exc:
        fail(str(exc))
    for jar in jars.jars:
        typer.echo(jar)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
