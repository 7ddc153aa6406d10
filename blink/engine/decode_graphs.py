"""Decode-only steps replayed from CUDA graphs, one per (batch bucket, block-table width bucket).

On a GPU a small model's decode step is launch bound: a few dozen kernels per layer, each far
shorter than its launch. A CUDA graph captured once per shape replays the whole forward as one
launch (vLLM's approach). Graphs need fixed shapes and fixed addresses, so every input lives in a
static buffer per bucket: the step's batch is padded up to the next batch bucket and its block
tables up to the next width bucket. Padding rows decode token 0 at position 0 into a scratch KV
block the block manager never hands out, and attend only to that block, so they touch no
sequence's cache; padded table columns name the scratch block too and are masked out.

The attention mask is computed inside the graph from the static context lengths, so a step
copies only ids, positions, slots, lengths and tables (a few KB) to the device.

``ReplayWithoutGraph`` runs the same static buffers and padding without capturing (any device):
the CPU tests use it to check that padding and bucketing leave every real row's logits and the
KV cache as the eager path leaves them; only the capture itself needs a GPU.
"""

from __future__ import annotations

import array
import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from blink.engine.errors import EngineError
from blink.engine.layers.attention import AttentionMetadata
from blink.engine.models.registry import CausalLM

# Powers of two up to 16, then steps of 16 up to 64 and of 32 beyond, as vLLM spaces its capture
# sizes: a step pads to at most ~2x at the low end (where a row is nearly free) and <= 1/3 above.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)

Replay = Callable[[], torch.Tensor]


class GraphCapture(Protocol):
    """Turns a forward over static buffers into something that reruns it on their current contents."""

    def capture(self, forward: Replay) -> Replay: ...


class CudaGraphCapture:
    """Captures into ``torch.cuda.CUDAGraph``s sharing one memory pool."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, forward: Replay) -> Replay:
        # One eager run on a side stream first, as torch.cuda.graph requires: it initialises
        # cuBLAS workspaces and lazy state that must not be created during capture.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            forward()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = forward()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay


class ReplayWithoutGraph:
    """Reruns the forward itself: the static buffers and padding, without a graph."""

    def capture(self, forward: Replay) -> Replay:
        return forward


def bucket_at_least(buckets: Sequence[int], n: int) -> int | None:
    """The smallest bucket ``>= n``, or None when ``n`` is above them all."""
    i = bisect.bisect_left(buckets, n)
    return buckets[i] if i < len(buckets) else None


def width_buckets(max_blocks: int) -> tuple[int, ...]:
    """Powers of two below ``max_blocks``, then ``max_blocks`` itself: a table pads to < 2x."""
    widths = []
    w = 1
    while w < max_blocks:
        widths.append(w)
        w *= 2
    widths.append(max_blocks)
    return tuple(widths)


@dataclass
class _StaticStep:
    """One bucket's input buffers: views of one flat buffer, filled by one copy per step."""

    flat: torch.Tensor  # [B * (4 + W)] int64: the five below, in this order
    ids: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int64
    slots: torch.Tensor  # [B] int64
    lens: torch.Tensor  # [B] int64, positions each row attends to (its own included)
    tables: torch.Tensor  # [B, W] int64


class DecodeGraphs:
    """Runs decode-only steps of up to ``max(batch_buckets)`` sequences through captured graphs."""

    def __init__(
        self,
        model: CausalLM,
        capture: GraphCapture,
        *,
        block_size: int,
        max_blocks: int,
        max_batch: int,
        scratch_block: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.model = model
        self._capture = capture
        self.block_size = block_size
        self.batch_buckets = tuple(b for b in BATCH_BUCKETS if b < max_batch) + (max_batch,)
        self.width_buckets = width_buckets(max_blocks)
        self.scratch_block = scratch_block
        self.dtype = dtype
        self.device = device
        self._steps: dict[tuple[int, int], tuple[_StaticStep, Replay]] = {}
        self._columns = torch.arange(self.width_buckets[-1] * block_size, device=device)

    def serves(self, batch: int) -> bool:
        return batch <= self.batch_buckets[-1]

    @property
    def num_graphs(self) -> int:
        return len(self._steps)

    def warm_up(self) -> None:
        """Capture every bucket now, so no request pays for a capture."""
        for batch in self.batch_buckets:
            for width in self.width_buckets:
                self._step(batch, width)

    def __call__(self, tokens: Sequence[int], positions: Sequence[int], tables: Sequence[Sequence[int]]) -> torch.Tensor:
        """Float32 logits ``[len(tokens), vocab]``: row ``i`` decodes ``tokens[i]`` at ``positions[i]``
        with block table ``tables[i]`` (covering that position)."""
        n = len(tokens)
        bs = self.block_size
        width = max(positions) // bs + 1
        batch_bucket = bucket_at_least(self.batch_buckets, n)
        width_bucket = bucket_at_least(self.width_buckets, width)
        if batch_bucket is None or width_bucket is None:
            raise EngineError(f"a decode step of {n} sequences over {width} blocks has no graph")
        step, replay = self._step(batch_bucket, width_bucket)
        scratch = self.scratch_block
        pad = batch_bucket - n
        # Every input in one host list, laid out as the bucket's flat buffer, so a step makes one
        # host tensor and one copy to the device (each copy is a transfer and a sync on a GPU).
        # Padding rows decode token 0 at position 0 into the scratch block and read only that slot.
        flat = list(tokens)
        flat += [0] * pad
        flat += positions
        flat += [0] * pad
        flat += [t[p // bs] * bs + p % bs for t, p in zip(tables, positions, strict=True)]
        flat += [scratch * bs] * pad
        flat += [p + 1 for p in positions]
        flat += [1] * pad
        for t, p in zip(tables, positions, strict=True):
            used = p // bs + 1
            flat += t[:used]
            flat += [scratch] * (width_bucket - used)
        flat += [scratch] * (width_bucket * pad)
        # Through array.array: torch.tensor() on a list of Python ints inspects each one and
        # costs several times more. A copy from pageable memory has left it when copy_ returns.
        step.flat.copy_(torch.frombuffer(array.array("q", flat), dtype=torch.long), non_blocking=True)
        # The graph's output buffer is rewritten by the next replay: hand out a copy.
        return replay()[:n].clone()

    def _step(self, batch: int, width: int) -> tuple[_StaticStep, Replay]:
        known = self._steps.get((batch, width))
        if known is not None:
            return known
        flat = torch.empty(batch * (4 + width), dtype=torch.long, device=self.device)
        step = _StaticStep(
            flat=flat,
            ids=flat[:batch].fill_(0),
            positions=flat[batch : 2 * batch].fill_(0),
            slots=flat[2 * batch : 3 * batch].fill_(self.scratch_block * self.block_size),
            lens=flat[3 * batch : 4 * batch].fill_(1),
            tables=flat[4 * batch :].view(batch, width).fill_(self.scratch_block),
        )
        made = (step, self._capture.capture(lambda: self._forward(step, width)))
        self._steps[(batch, width)] = made
        return made

    def _forward(self, step: _StaticStep, width: int) -> torch.Tensor:
        batch = step.ids.shape[0]
        # Additive mask from the lengths, inside the graph: 0 on each row's cached prefix.
        hidden = self._columns[: width * self.block_size][None, :] >= step.lens[:, None]
        mask = torch.zeros(hidden.shape, dtype=self.dtype, device=self.device).masked_fill_(hidden, float("-inf"))
        meta = AttentionMetadata(
            slot_mapping=step.slots,
            num_decode=batch,
            decode_block_tables=step.tables,
            decode_mask=mask[:, None, None, :],
            decode_context_lens=step.lens,
        )
        return self.model.compute_logits(self.model(step.ids, step.positions, meta)).float()
