"""Turn one row of logits per sequence into the next token (and its logprobs).

Order of operations (vLLM v1): penalties -> min_tokens mask -> greedy argmax, or temperature ->
min_p -> top_k -> top_p -> random draw. Reported logprobs are those of the *raw* model
distribution (log_softmax of the logits before penalties, temperature or truncation), which is
vLLM's default convention: they describe the model, not the sampling knobs.

Random draws use the exponential race (argmax of p / q, q ~ Exp(1)), equivalent to sampling from
p. A request with a seed draws its q from its own torch.Generator, so its tokens depend only on its
own logits and seed, never on which other requests share the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence


@dataclass
class SampleResult:
    token_id: int
    # Raw-model logprob of the chosen token; None unless the request asked for logprobs.
    logprob: float | None
    # Top-N (token id, raw logprob), most likely first; [] when logprobs=0; None when not asked.
    top_logprobs: list[tuple[int, float]] | None


class Sampler:
    def sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[SampleResult]:
        if logits.dim() != 2 or logits.shape[0] != len(seqs):
            raise ValueError(f"logits {tuple(logits.shape)} do not match {len(seqs)} sequences")
        logits = logits.float()
        params = [s.params for s in seqs]
        masked_rows = [i for i, s in enumerate(seqs) if _min_tokens_active(s)]
        penalty_rows = [i for i, p in enumerate(params) if p.has_penalties]
        if not penalty_rows and not masked_rows and all(p.is_greedy for p in params):
            token_ids = logits.argmax(dim=-1)  # fast path: no copy, no sort
        else:
            processed = logits.clone()
            if penalty_rows:
                apply_penalties(processed, seqs, penalty_rows)
            for i in masked_rows:
                _mask_stop_tokens(processed, i, seqs[i])
            token_ids = _pick(processed, seqs)
        ids = token_ids.tolist()
        return _with_logprobs(logits, ids, params)


def _min_tokens_active(seq: Sequence) -> bool:
    p = seq.params
    return seq.num_output_tokens < p.min_tokens and bool(seq.eos_token_ids or p.stop_token_ids)


def _mask_stop_tokens(logits: torch.Tensor, row: int, seq: Sequence) -> None:
    """min_tokens: EOS and stop_token_ids cannot be drawn until enough tokens exist."""
    vocab = logits.shape[1]
    banned = [t for t in (*seq.eos_token_ids, *seq.params.stop_token_ids) if 0 <= t < vocab]
    if banned:
        logits[row, banned] = -float("inf")


def _row_counts(token_lists: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """[len(token_lists), vocab] occurrence counts, one bincount for the whole batch."""
    flat: list[int] = []
    for r, toks in enumerate(token_lists):
        base = r * vocab
        flat.extend(base + t for t in toks if 0 <= t < vocab)
    idx = torch.tensor(flat, dtype=torch.long, device=device)
    return torch.bincount(idx, minlength=len(token_lists) * vocab).view(len(token_lists), vocab)


def apply_penalties(logits: torch.Tensor, seqs: list[Sequence], rows: list[int]) -> None:
    """Repetition (HF: prompt + output, divide positive / multiply negative logits), then
    frequency and presence (OpenAI: output only, subtract count * f + seen * p)."""
    vocab, device = logits.shape[1], logits.device
    sub = logits[rows]
    ps = [seqs[i].params for i in rows]
    if any(p.repetition_penalty != 1.0 for p in ps):
        seen = _row_counts([seqs[i].token_ids for i in rows], vocab, device) > 0
        rep = torch.tensor([p.repetition_penalty for p in ps], device=device).unsqueeze(1)
        sub = torch.where(seen, torch.where(sub > 0, sub / rep, sub * rep), sub)
    if any(p.frequency_penalty != 0.0 or p.presence_penalty != 0.0 for p in ps):
        counts = _row_counts([seqs[i].output_token_ids for i in rows], vocab, device).to(sub.dtype)
        freq = torch.tensor([p.frequency_penalty for p in ps], device=device).unsqueeze(1)
        pres = torch.tensor([p.presence_penalty for p in ps], device=device).unsqueeze(1)
        sub = sub - freq * counts - pres * (counts > 0).to(sub.dtype)
    logits[rows] = sub


def _pick(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    token_ids = logits.argmax(dim=-1)
    rand_rows = [i for i, s in enumerate(seqs) if not s.params.is_greedy]
    if rand_rows:
        picked = _sample_random(logits[rand_rows], [seqs[i] for i in rand_rows])
        token_ids[rand_rows] = picked
    return token_ids


def _sample_random(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    ps = [s.params for s in seqs]
    device = logits.device
    temp = torch.tensor([p.temperature for p in ps], device=device).unsqueeze(1)
    logits = logits / temp
    if any(p.min_p > 0.0 for p in ps):
        logits = apply_min_p(logits, torch.tensor([p.min_p for p in ps], device=device))
    if any(p.top_k > 1 or p.top_p < 1.0 for p in ps):
        vocab = logits.shape[1]
        k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in ps], device=device)
        top_p = torch.tensor([p.top_p for p in ps], device=device)
        logits = apply_top_k_top_p(logits, k, top_p)
    probs = torch.softmax(logits, dim=-1)
    q = torch.empty_like(probs)
    seeded = [i for i, p in enumerate(ps) if p.seed is not None]
    if len(seeded) < len(ps):
        q.exponential_()
    for i in seeded:
        q[i].exponential_(generator=_generator(seqs[i], device))
    # Exp(1) can return exactly 0; 0/0 would be NaN and argmax would pick a masked token.
    q.clamp_(min=torch.finfo(q.dtype).tiny)
    return (probs / q).argmax(dim=-1)


def _generator(seq: Sequence, device: torch.device) -> torch.Generator:
    if seq.generator is None:
        seq.generator = torch.Generator(device=device)
        seq.generator.manual_seed(seq.params.seed or 0)
    return seq.generator


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Drop tokens whose probability is below min_p times the most likely token's."""
    probs = torch.softmax(logits, dim=-1)
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)
    return logits.masked_fill(probs < threshold, -float("inf"))


def apply_top_k_top_p(logits: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the k most likely tokens, then the smallest prefix of them whose mass reaches top_p.

    ``k`` = vocab size disables top-k and ``top_p`` = 1 disables top-p for a row.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    positions = torch.arange(logits.shape[1], device=logits.device).unsqueeze(0)
    sorted_logits = sorted_logits.masked_fill(positions >= k.unsqueeze(1), -float("inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    # A token is dropped once the tokens before it already reach top_p; top_p = 1 keeps all
    # (compared against 2 so float rounding of the cumulative sum cannot drop the tail).
    limit = torch.where(top_p < 1.0, top_p, torch.full_like(top_p, 2.0)).unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(mass_before >= limit, -float("inf"))
    return torch.full_like(logits, -float("inf")).scatter(1, order, sorted_logits)


def _with_logprobs(logits: torch.Tensor, ids: list[int], params: list[SamplingParams]) -> list[SampleResult]:
    want = [i for i, p in enumerate(params) if p.logprobs is not None]
    results = [SampleResult(t, None, None) for t in ids]
    if not want:
        return results
    logprobs = torch.log_softmax(logits[want], dim=-1)
    chosen = logprobs.gather(1, torch.tensor([[ids[i]] for i in want], device=logits.device))
    chosen_list = chosen.squeeze(1).tolist()
    n_top = max(params[i].logprobs or 0 for i in want)
    top_vals: list[list[float]] = []
    top_ids: list[list[int]] = []
    if n_top > 0:
        vals, idx = logprobs.topk(n_top, dim=-1)
        top_vals, top_ids = vals.tolist(), idx.tolist()
    for j, i in enumerate(want):
        n = params[i].logprobs or 0
        top = list(zip(top_ids[j][:n], top_vals[j][:n], strict=True)) if n else []
        results[i] = SampleResult(ids[i], chosen_list[j], top)
    return results
