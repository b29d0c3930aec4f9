"""Principals, API tokens, catalog grants and the audit log.

Why: anyone who could reach the port could do everything. Callers now authenticate (API tokens, OAuth2
client credentials, dashboard sessions), have a role for the management API and grants for the REST
catalog, and every change is recorded with who made it.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "principal",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_token",
        sa.Column("token_id", sa.String(32), primary_key=True),
        sa.Column("principal", sa.String(128), sa.ForeignKey("principal.name", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_token_principal", "api_token", ["principal"])
    op.create_table(
        "catalog_grant",
        sa.Column("principal", sa.String(128), sa.ForeignKey("principal.name", ondelete="CASCADE"), primary_key=True),
        sa.Column("catalog_name", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(1024), primary_key=True),
        sa.Column("privilege", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "audit_log",
        sa.Column("audit_id", ID, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("principal", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(1024), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("client", sa.String(255), nullable=True),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_at", "audit_log")
    op.drop_table("audit_log")
    op.drop_table("catalog_grant")
    op.drop_index("ix_api_token_principal", "api_token")
    op.drop_table("api_token")
    op.drop_table("principal")
