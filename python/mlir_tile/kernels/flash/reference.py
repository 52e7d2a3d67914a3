"""Attention as numpy computes it in fp32, one block of query rows at a time, forward and backward: the oracle of
every attention check (it shares nothing with the kernels)."""
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
            scores = _scores(q[head, rows], k[head], start, causal)
            peak = scores.max(-1, keepdims=True)
            weights = np.exp(scores - peak)
            total = weights.sum(-1, keepdims=True)
            out[head, rows], lse[head, rows] = (weights / total) @ v[head], (np.log(total) + peak)[:, 0]
    return out, lse


def _scores(q_rows: np.ndarray, k: np.ndarray, start: int, causal: bool) -> np.ndarray:
    """Query rows `start`, ... of one head against all its keys, scaled and (causal) masked."""
    scores = q_rows @ k.T / math.sqrt(q_rows.shape[-1])
    if causal:
        query = np.arange(start, start + len(scores))[:, None]
        scores = np.where(np.arange(k.shape[0])[None, :] <= query, scores, -np.inf)
    return scores


def reference_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, grad: np.ndarray,
                       causal: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ, dK, dV) in fp32 of O = softmax(q k^T / sqrt(d) (+ the causal mask)) v for the upstream gradient
    `grad` of O, inputs [heads, seq, d]: per block of query rows P, then dV += P^T dO, dP = dO v^T, dS = P (dP -
    rowsum(dP P)), dQ = dS k / sqrt(d), dK += dS^T q / sqrt(d) (the softmax's derivative written out, not taken
    from the kernels' recurrences)."""
    q, k, v, grad = (x.astype(np.float32) for x in (q, k, v, grad))
    heads, seq, d = q.shape
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for head in range(heads):
        for start in range(0, seq, REFERENCE_ROWS):
            rows = slice(start, start + REFERENCE_ROWS)
            scores = _scores(q[head, rows], k[head], start, causal)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            p = weights / weights.sum(-1, keepdims=True)
            dv[head] += p.T @ grad[head, rows]
            dp = grad[head, rows] @ v[head].T
            ds = p * (dp - (dp * p).sum(-1, keepdims=True))
            dq[head, rows] = ds @ k[head] / math.sqrt(d)
            dk[head] += ds.T @ q[head, rows] / math.sqrt(d)
    return dq, dk, dv
