"""Alembic environment: migrations run on the connection lakewarden hands over (see Database.migrate)."""

from alembic import context

from lakewarden.store.models import Base, mapped_name

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through lakewarden (Database.migrate), which supplies the connection")

# render_as_batch: SQLite cannot ALTER most things in place; batch mode copies the table instead.
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True, include_name=mapped_name)
with context.begin_transaction():
    context.run_migrations()
