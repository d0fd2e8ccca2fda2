# BERT-style encoder sample for ortc (vocab 64, hidden 32, 2 heads, 2 layers, seq 16, post-LayerNorm,
# padding attention mask, tanh pooler, 4 classes). `.venv/bin/python samples/bert/export.py` rewrites bert.onnx.
import math, os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common
import numpy as np
import torch
import torch.nn as nn

VOCAB, H, HEADS, LAYERS, SEQ, P, CLASSES = 64, 32, 2, 2, 16, 0.1, 4
INPUTS, NUM_CLASSES = ['input_ids', 'attention_mask'], CLASSES


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
        self.drop = nn.Dropout(P)

    def heads(self, t, B, T):
        return t.view(B, T, HEADS, H // HEADS).transpose(1, 2)

    def forward(self, x, ext_mask):
        B, T, _ = x.size()
        q, k, v = (self.heads(f(x), B, T) for f in (self.query, self.key, self.value))
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(H // HEADS) + ext_mask
        att = self.drop(torch.softmax(att, dim=-1))
        return torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, H)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.attn_out, self.attn_drop, self.attn_ln = SelfAttention(), nn.Linear(H, H), nn.Dropout(P), nn.LayerNorm(H)
        self.ffn = nn.Sequential(nn.Linear(H, 4 * H), nn.GELU(), nn.Linear(4 * H, H), nn.Dropout(P))
        self.ffn_ln = nn.LayerNorm(H)

    def forward(self, x, ext_mask):
        x = self.attn_ln(x + self.attn_drop(self.attn_out(self.attn(x, ext_mask))))
        return self.ffn_ln(x + self.ffn(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_emb, self.pos_emb = nn.Embedding(VOCAB, H), nn.Embedding(SEQ, H)
        self.emb_ln, self.emb_drop = nn.LayerNorm(H), nn.Dropout(P)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.pooler, self.pool_drop, self.classifier = nn.Linear(H, H), nn.Dropout(P), nn.Linear(H, CLASSES)
        common.init_normal(self)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(0, input_ids.size(1), dtype=torch.long, device=input_ids.device)
        x = self.emb_drop(self.emb_ln(self.word_emb(input_ids) + self.pos_emb(pos)))
        ext_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0  # [B,1,1,T]
        for layer in self.layers:
            x = layer(x, ext_mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(self.pool_drop(pooled))


def random_inputs(rng, batch):
    ids = rng.randint(0, VOCAB, size=(batch, SEQ)).astype('int64')
    mask = np.ones((batch, SEQ), dtype='int64')
    pad = rng.randint(1, 6, size=batch) * (rng.rand(batch) < 0.5)  # trailing zeros in about half the rows
    pad[1 % batch] = max(pad[1 % batch], 3)  # at least one padded row
    for i, n in enumerate(pad):
        if n:
            mask[i, SEQ - n:] = 0
    return {'input_ids': ids, 'attention_mask': mask}


if __name__ == '__main__':
    common.export_main(sys.modules[__name__])
