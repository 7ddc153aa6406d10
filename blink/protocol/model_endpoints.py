"""Request bodies of /v1/embeddings, /v1/moderations and /v1/classify (OpenAI field names)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class _Body(BaseModel):
    # Unknown fields are ignored, as OpenAI does for forward compatibility.
    model_config = ConfigDict(extra="ignore")


class EmbeddingRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: StrictStr | None = None


class ModerationRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None


class ClassifyRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None
