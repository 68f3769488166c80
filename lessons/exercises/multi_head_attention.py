"""Exercise: write the backward of multi-head attention, as one Function.

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

The forward below is complete. Write `backward`: given dout (B, T, C), return
(dx_q, dx_kv, dw_q, dw_k, dw_v, dw_o, None): one gradient per input, each with its input's
shape, None for the mask.

Hints (derive, don't guess):

* Walk the five forward steps in reverse. Steps 1 and 5 are the linear exercise without the
  bias; step 3 is the attention exercise, run on all (B, H) heads at once.
* Steps 2 and 4 only move numbers around. The backward of a reshape is a reshape back; the
  backward of a transpose is the transpose that undoes it. Undo the moves in the reverse of
  their order: a reshape alone to (B, H, T, D) gives the right shape and the wrong numbers.
* x_kv is read twice, by the key projection and by the value projection: what happens to
  the gradients of an input used twice?
* The weights are shared by all B·T (or B·S) positions: their gradients sum over them.
* Test the shapes of every intermediate gradient against the forward's shape comments.

Check your answer:
    minitransformer check-exercise multi_head_attention lessons/exercises/multi_head_attention.py
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
        # x_q, x_kv, w_q, w_k, w_v, w_o, q, k, v, P, concat = self.saved
        #     the inputs; the heads q (B, H, T, D), k and v (B, H, S, D); the weights
        #     P (B, H, T, S); the merged heads concat (B, T, C); and self.scale = 1 / √D
        # fwd 5: out = concat W_oᵀ      ->  dw_o = ?,  dconcat = ?
        # fwd 4: merge                  ->  dA = ?            (B, H, T, D)
        # fwd 3: attention              ->  dv = ?,  dP = ?,  dS = ?,  dq = ?,  dk = ?
        # fwd 2: split                  ->  dQ = ?  (B, T, C),  dK = ?,  dV = ?  (B, S, C)
        # fwd 1: the projections        ->  dw_q = ?,  dw_k = ?,  dw_v = ?,  dx_q = ?,  dx_kv = ?
        raise NotImplementedError("write the backward: return dx_q, dx_kv, dw_q, dw_k, dw_v, "
                                  "dw_o, None (None for the mask)")
