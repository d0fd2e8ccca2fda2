# GPT-2-style decoder sample for ortc (vocab 64, n_embd 32, 2 heads, 2 layers, block 16, tied LM head,
# causal mask buffer, exact GELU, Dropout 0.1). `.venv/bin/python samples/gpt2/export.py` rewrites gpt2.onnx.
import math, os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common
import torch
import torch.nn as nn

VOCAB, C, HEADS, LAYERS, SEQ, P = 64, 32, 2, 2, 16, 0.1
INPUTS, NUM_CLASSES, SEQ_LABELS = ['input_ids'], VOCAB, True


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.attn_drop, self.resid_drop = nn.Dropout(P), nn.Dropout(P)
        self.register_buffer('mask', torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        B, T, _ = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(C // HEADS)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float('-inf'))
        att = self.attn_drop(torch.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), CausalSelfAttention(), nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C), nn.Dropout(P))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe, self.drop = nn.Embedding(VOCAB, C), nn.Embedding(SEQ, C), nn.Dropout(P)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        common.init_normal(self)

    def forward(self, input_ids):
        pos = torch.arange(0, input_ids.size(1), dtype=torch.long, device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def random_inputs(rng, batch):
    return {'input_ids': rng.randint(0, VOCAB, size=(batch, SEQ)).astype('int64')}


if __name__ == '__main__':
    common.export_main(sys.modules[__name__])
