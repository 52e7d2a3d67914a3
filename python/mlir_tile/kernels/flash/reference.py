"""Attention as numpy computes it in fp32, one block of query rows at a time: the oracle of every attention
check (it shares nothing with the kernels)."""
from __future__ import annotations

import math

import numpy as np


REFERENCE_ROWS = 512  # query rows of one head the reference scores at once: memory 512 x seq, not seq^2


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(O, log-sum-exp) in fp32 from inputs [heads, seq, d] (any float type)."""
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    heads, seq, d = q.shape
    out, lse = np.empty((heads, seq, d), np.float32), np.empty((heads, seq), np.float32)
    for head in range(heads):
        for start in range(0, seq, REFERENCE_ROWS):
            rows = slice(start, start + REFERENCE_ROWS)
            scores = q[head, rows] @ k[head].T / math.sqrt(d)
            if causal:
                query = np.arange(start, start + len(scores))[:, None]
                scores = np.where(np.arange(seq)[None, :] <= query, scores, -np.inf)
            peak = scores.max(-1, keepdims=True)
            weights = np.exp(scores - peak)
            total = weights.sum(-1, keepdims=True)
            out[head, rows], lse[head, rows] = (weights / total) @ v[head], (np.log(total) + peak)[:, 0]
    return out, lse
