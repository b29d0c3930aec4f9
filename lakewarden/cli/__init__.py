"""The `lakewarden` command: Typer commands over the HTTP API, and the commands that start a process (server,
optimizer, demo)."""
