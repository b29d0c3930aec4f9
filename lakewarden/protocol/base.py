"""What every message of the protocol is built from."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ProtocolModel(BaseModel):
    """A message part: frozen, and an unknown field is an error (both sides run the same version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# what a database BIGINT holds: larger numbers can name no process, task or attempt (and would not fit a query)
Id = Annotated[int, Field(ge=0, le=2**63 - 1)]
