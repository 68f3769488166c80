"""Solution: the backward of multi-head attention, written as one Function.

§3.2.2: "Instead of performing a single attention function with d_model-dimensional keys,
values and queries, we found it beneficial to linearly project the queries, keys and values h
times with different, learned linear projections to d_k, d_k and d_v dimensions":

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),      d_k = d_v = d_model / h

The h projections of width D = C / H are computed as one projection of width C, then split
into heads by a reshape and a transpose. As in the library, a weight is stored (C_out, C_in)
and applied as x Wᵀ. There are no biases, as in the paper's equations (the library's
projections have one each; their gradients are the db of the linear exercise).

    x_q (B, T, C)                  the input the queries are projected from
    x_kv (B, S, C)                 the input the keys and values are projected from
                                   (the same as x_q in self-attention, the encoder's output in
                                   the decoder's cross-attention)
    w_q, w_k, w_v, w_o (C, C)      the projections W^Q, W^K, W^V, W^O
    mask broadcastable to (B, H, T, S), True where a query may attend to a key
    ->  out (B, T, C)

    B batch   T query length   S key length   C d_model   H heads   D = C / H head size

Derivation, walking the forward in reverse:

    5. out = concat W_oᵀ   ->  dW_o = Σ_rows doutᵀ concat,   dconcat = dout W_o
    4. merge: (B, H, T, D) -> transpose (B, T, H, D) -> reshape (B, T, C)
                           ->  undo in reverse order: reshape to (B, T, H, D), then transpose
    3. attention, per head ->  dv = Pᵀ dA,   dP = dA vᵀ,   dS = P ∘ (dP - rowsum(dP ∘ P)),
                               dq = dS k / √D,   dk = dSᵀ q / √D       (the attention exercise)
    2. split: (B, L, C) -> reshape (B, L, H, D) -> transpose (B, H, L, D)
                           ->  transpose back to (B, L, H, D), then reshape to (B, L, C)
    1. Q = x_q W_qᵀ ...    ->  dW_q = Σ_rows dQᵀ x_q,   dx_q = dQ W_q, and the same for K, V;
                               x_kv feeds both K and V, so dx_kv = dK W_k + dV W_v

A reshape and a transpose move numbers without changing them: their backward moves the
gradients back to where the numbers came from. In self-attention the model passes the same
tensor as x_q and x_kv, and the autograd engine adds dx_q and dx_kv.

Check it:  minitransformer check-exercise multi_head_attention \\
               lessons/solutions/multi_head_attention.py
"""

import numpy as np

from minitransformer import Function


class MultiHeadAttention(Function):
    def __init__(self, n_heads):
        self.n_heads = n_heads

    def forward(self, x_q, x_kv, w_q, w_k, w_v, w_o, mask):
        B, T, C = x_q.shape
        S, H = x_kv.shape[1], self.n_heads
        D = C // H
        self.scale = 1.0 / np.sqrt(D)
        # 1. project: Q = x_q W_qᵀ,  K = x_kv W_kᵀ,  V = x_kv W_vᵀ
        Q = x_q @ w_q.T                                                 # (B, T, C)
        K = x_kv @ w_k.T                                                # (B, S, C)
        V = x_kv @ w_v.T                                                # (B, S, C)
        # 2. split into H heads of D: reshape, then bring the heads before the positions
        q = Q.reshape(B, T, H, D).transpose(0, 2, 1, 3)                 # (B, H, T, D)
        k = K.reshape(B, S, H, D).transpose(0, 2, 1, 3)                 # (B, H, S, D)
        v = V.reshape(B, S, H, D).transpose(0, 2, 1, 3)                 # (B, H, S, D)
        # 3. attention in every head: S = q kᵀ / √D, masked, P = softmax(S), A = P v
        scores = q @ np.swapaxes(k, -1, -2) * self.scale                # (B, H, T, S)
        scores = np.where(mask, scores, -np.inf)                        # (B, H, T, S)
        row_max = scores.max(axis=-1, keepdims=True)                    # (B, H, T, 1)
        e = np.exp(scores - np.where(row_max == -np.inf, 0.0, row_max))  # (B, H, T, S)
        denom = e.sum(axis=-1, keepdims=True)                           # (B, H, T, 1)
        P = e / np.where(denom == 0, 1.0, denom)  # a fully masked row stays 0  (B, H, T, S)
        A = P @ v                                                       # (B, H, T, D)
        # 4. merge the heads: positions first again, then H·D side by side
        concat = A.transpose(0, 2, 1, 3).reshape(B, T, C)               # (B, T, C)
        # 5. out = concat W_oᵀ
        out = concat @ w_o.T                                            # (B, T, C)
        self.saved = (x_q, x_kv, w_q, w_k, w_v, w_o, q, k, v, P, concat)
        return out

    def backward(self, dout):
        x_q, x_kv, w_q, w_k, w_v, w_o, q, k, v, P, concat = self.saved
        B, H, T, D = q.shape
        S, C = k.shape[2], H * D
        # fwd 5: out = concat W_oᵀ  ->  dW_o = Σ_rows doutᵀ concat,  dconcat = dout W_o
        dw_o = dout.reshape(-1, C).T @ concat.reshape(-1, C)            # (C, C)
        dconcat = dout @ w_o                                            # (B, T, C)
        # fwd 4: merge = transpose, then reshape  ->  reshape back, then transpose back
        dA = dconcat.reshape(B, T, H, D).transpose(0, 2, 1, 3)          # (B, H, T, D)
        # fwd 3: A = P v  ->  dv = Pᵀ dA,  dP = dA vᵀ
        dv = np.swapaxes(P, -1, -2) @ dA                                # (B, H, S, D)
        dP = dA @ np.swapaxes(v, -1, -2)                                # (B, H, T, S)
        # fwd 3: P = softmax(S) per row  ->  dS = P ∘ (dP - rowsum(dP ∘ P)), 0 where masked
        dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))            # (B, H, T, S)
        # fwd 3: S = q kᵀ / √D  ->  dq = dS k / √D,  dk = dSᵀ q / √D
        dq = dS @ k * self.scale                                        # (B, H, T, D)
        dk = np.swapaxes(dS, -1, -2) @ q * self.scale                   # (B, H, S, D)
        # fwd 2: split = reshape, then transpose  ->  transpose back, then reshape back
        dQ = dq.transpose(0, 2, 1, 3).reshape(B, T, C)                  # (B, T, C)
        dK = dk.transpose(0, 2, 1, 3).reshape(B, S, C)                  # (B, S, C)
        dV = dv.transpose(0, 2, 1, 3).reshape(B, S, C)                  # (B, S, C)
        # fwd 1: Q = x_q W_qᵀ  ->  dW_q = Σ_rows dQᵀ x_q,  dx_q = dQ W_q; the same for K, V
        dw_q = dQ.reshape(-1, C).T @ x_q.reshape(-1, C)                 # (C, C)
        dw_k = dK.reshape(-1, C).T @ x_kv.reshape(-1, C)                # (C, C)
        dw_v = dV.reshape(-1, C).T @ x_kv.reshape(-1, C)                # (C, C)
        dx_q = dQ @ w_q                                                 # (B, T, C)
        # fwd 1: x_kv feeds both K and V  ->  its gradient adds the two paths
        dx_kv = dK @ w_k + dV @ w_v                                     # (B, S, C)
        return dx_q, dx_kv, dw_q, dw_k, dw_v, dw_o, None  # the mask is not differentiable
