"""Request bodies of /v1/embeddings, /v1/moderations and /v1/classify (OpenAI field names)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator


class _Body(BaseModel):
    # An unknown field is refused by name (OpenAI's "Unrecognized request argument supplied"),
    # never accepted and ignored.
    model_config = ConfigDict(extra="forbid")


class EmbeddingRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: StrictStr | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _no_token_arrays(cls, value: object) -> object:
        """OpenAI also takes token ids (its tiktoken ids, which e.g. langchain's OpenAIEmbeddings sends by
        default); they mean nothing to another model's vocabulary, so they are refused by name."""
        if isinstance(value, list) and value and all(
            isinstance(v, int) or (isinstance(v, list) and all(isinstance(t, int) for t in v)) for v in value
        ):
            raise ValueError(
                "token arrays are not accepted; send text (this server's encoders tokenise it themselves; "
                "with langchain's OpenAIEmbeddings set check_embedding_ctx_length=False)"
            )
        return value


class ModerationRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None


class ClassifyRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None
