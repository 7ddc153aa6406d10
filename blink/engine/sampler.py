"""Turn one row of logits per sequence into the next token (and its logprobs).

Order of operations (vLLM v1): penalties -> logit_bias -> min_tokens mask -> greedy argmax, or temperature ->
min_p -> top_k -> top_p (measured on the top-k renormalised mass) -> random draw. Reported
logprobs are those of the *raw* model distribution (log_softmax of the logits before penalties,
temperature or truncation), vLLM's default convention: they describe the model, not the knobs.

Random draws invert the CDF with one uniform per row. A request with a seed draws its uniform
from its own torch.Generator, so its tokens depend only on its own logits and seed, never on which
other requests share the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blink.engine.logit_bias import apply_logit_bias, has_logit_bias
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence

# First top-p candidate set (a topk of 256 is far cheaper than a full sort of the vocabulary:
# benchmarks/RESULTS.md, "Figures behind the code's numbers", sampler) and its growth factor when the nucleus is wider (flat, high-temperature distributions).
_TOP_P_CANDIDATES = 256
_TOP_P_GROWTH = 16


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
        if all(_plain_greedy(s) for s in seqs):
            # Every row is a bare argmax (the common decode batch): no copy, no sort, one
            # device->host transfer, and none of the per-processor row scans below.
            return with_logprobs(logits, logits.argmax(dim=-1).tolist(), params)
        masked_rows = [i for i, s in enumerate(seqs) if _min_tokens_active(s)]
        penalty_rows = [i for i, p in enumerate(params) if p.has_penalties]
        bias_rows = [i for i, s in enumerate(seqs) if has_logit_bias(s)]
        processed = logits.clone()
        if penalty_rows:
            apply_penalties(processed, seqs, penalty_rows)
        if bias_rows:
            apply_logit_bias(processed, seqs, bias_rows)
        for i in masked_rows:
            _mask_stop_tokens(processed, i, seqs[i])
        token_ids = _pick(processed, seqs)
        ids = token_ids.tolist()
        return with_logprobs(logits, ids, params)


def _plain_greedy(seq: Sequence) -> bool:
    """Argmax of the raw logits: greedy, and no penalty, logit bias or min_tokens mask applies."""
    p = seq.params
    return p.is_greedy and not p.has_penalties and not p.logit_bias and not _min_tokens_active(seq)


def _min_tokens_active(seq: Sequence) -> bool:
    p = seq.params
    return p.min_tokens > 0 and seq.num_output_tokens < p.min_tokens and bool(seq.eos_token_ids or p.stop_token_ids)


def _mask_stop_tokens(logits: torch.Tensor, row: int, seq: Sequence) -> None:
    """min_tokens: EOS and stop_token_ids cannot be drawn until enough tokens exist."""
    vocab = logits.shape[1]
    banned = [t for t in (*seq.eos_token_ids, *seq.params.stop_token_ids) if 0 <= t < vocab]
    if banned:
        logits[row, banned] = -float("inf")


def _row_counts(token_lists: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """[len(token_lists), vocab] occurrence counts, one bincount for the whole batch."""
    parts = []
    for r, toks in enumerate(token_lists):
        t = torch.tensor(toks, dtype=torch.long)
        # Ids outside the model's vocabulary (a tokenizer larger than the model) count for nothing.
        parts.append(t[(t >= 0) & (t < vocab)] + r * vocab)
    idx = torch.cat(parts).to(device)
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
    probs = processed_probs(logits, [s.params for s in seqs])
    return sample_inverse_cdf(probs, uniforms(seqs, logits.device))


def processed_probs(logits: torch.Tensor, ps: list[SamplingParams]) -> torch.Tensor:
    """The distribution a random draw uses: temperature, min_p, top-k, top-p, then softmax.

    Speculative verification accepts and resamples against exactly these probabilities, which
    is what keeps its output distribution identical to plain sampling.
    """
    device = logits.device
    temp = torch.tensor([p.temperature for p in ps], device=device).unsqueeze(1)
    logits = logits / temp
    if any(p.min_p > 0.0 for p in ps):
        logits = apply_min_p(logits, torch.tensor([p.min_p for p in ps], device=device))
    if any(p.top_k > 1 or p.top_p < 1.0 for p in ps):
        vocab = logits.shape[1]
        # Clamped to the vocabulary: validation rejects a larger top_k, and this keeps one that
        # slipped through from overflowing the int64 tensor (issue #20).
        k = torch.tensor([min(p.top_k, vocab) if p.top_k > 0 else vocab for p in ps], device=device)
        top_p = torch.tensor([p.top_p for p in ps], device=device)
        logits = apply_top_k_top_p(logits, k, top_p)
    return torch.softmax(logits, dim=-1)


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from ``probs`` given uniforms ``u`` in [0, 1).

    One random number per row instead of one per vocabulary entry: cheaper on the CPU than
    torch.multinomial or Exp(1) noise (same RESULTS.md section). The CDF is
    accumulated in float64 so tail tokens keep their weight; zero-probability tokens add an empty
    interval and can never be drawn.
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)
    target = (u.to(torch.float64) * cdf[:, -1]).unsqueeze(1)
    picked = torch.searchsorted(cdf, target, right=True).squeeze(1)
    return picked.clamp_(max=probs.shape[1] - 1)


def uniforms(seqs: list[Sequence], device: torch.device) -> torch.Tensor:
    """Seeded rows draw from their own generator, so batch composition cannot change them."""
    u = torch.rand(len(seqs), dtype=torch.float64, device=device)
    for i, seq in enumerate(seqs):
        if seq.params.seed is not None:
            u[i] = torch.rand(1, dtype=torch.float64, device=device, generator=_generator(seq, device))[0]
    return u


def _generator(seq: Sequence, device: torch.device) -> torch.Generator:
    if seq.generator is None:
        gen = torch.Generator(device=device)
        gen.manual_seed(seq.params.seed or 0)  # kept only once seeded: a failed seed stays failed
        seq.generator = gen
    return seq.generator


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Drop tokens whose probability is below min_p times the most likely token's."""
    probs = torch.softmax(logits, dim=-1)
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)
    return logits.masked_fill(probs < threshold, -float("inf"))


def apply_top_k_top_p(logits: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep each row's k most likely tokens, then the smallest prefix of them reaching mass top_p.

    ``k`` >= vocab size disables top-k and ``top_p`` = 1 disables top-p for a row. Rather than
    sorting the whole vocabulary, only the best
    ``_TOP_P_CANDIDATES`` are taken with topk; a top-p row whose candidates hold less than top_p of
    the mass is retried with more, so the result is exactly that of a full sort.
    """
    vocab = logits.shape[1]
    has_k = k < vocab
    has_p = top_p < 1.0
    rows = (has_k | has_p).nonzero().squeeze(1)
    if rows.numel() == 0:
        return logits
    sub, k, top_p, has_k, has_p = logits[rows], k[rows], top_p[rows], has_k[rows], has_p[rows]
    num = int(k[has_k].max()) if bool(has_k.any()) else 0
    if bool((has_p & ~has_k).any()):
        num = max(num, _TOP_P_CANDIDATES)
    # Normaliser of the distribution top-p measures: the kept top-k set, or the whole row.
    full_lse = sub.logsumexp(dim=-1)
    while True:
        num = min(num, vocab)
        vals, idx = sub.topk(num, dim=-1)
        positions = torch.arange(num, device=sub.device).unsqueeze(0)
        vals = vals.masked_fill(positions >= k.unsqueeze(1), -float("inf"))
        lse = torch.where(has_k, vals.logsumexp(dim=-1), full_lse)
        probs = (vals - lse.unsqueeze(1)).exp()
        short = has_p & ~has_k & (probs.sum(dim=-1) < top_p)
        if num == vocab or not bool(short.any()):
            break
        num *= _TOP_P_GROWTH
    mass_before = probs.cumsum(dim=-1) - probs
    # A token is dropped once the tokens before it already reach top_p; rows without top-p are
    # compared against 2 so float rounding of the cumulative sum cannot drop their tail.
    limit = torch.where(has_p, top_p, torch.full_like(top_p, 2.0)).unsqueeze(1)
    vals = vals.masked_fill(mass_before >= limit, -float("inf"))
    out = logits.clone()
    out[rows] = torch.full_like(sub, -float("inf")).scatter(1, idx, vals)
    return out


def with_logprobs(logits: torch.Tensor, ids: list[int], params: list[SamplingParams]) -> list[SampleResult]:
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
