"""Models whose eager peak depends on how Python's names hold tensors (issue 10, item 6).

Each reproduces one pattern that made the eager estimate silently wrong: names reused across
an unrolled loop and the branches of an `if`, tuple unpacking into `_`, names a function returns,
`list.pop()`, tensors stored into a cache object (`self.keys = torch.cat([self.keys, k])`),
torch.utils.checkpoint blocks that all bind one `ret`, a returned tuple bound to one name, a
store into a tensor (which holds nothing), a dict built in one statement (which holds every
value), a view (and an `arange`) that Python keeps bound while their base would otherwise die,
a helper called twice (each call's names its own), one part of a named tuple bound
(`.values`, `[0]`), a list built by `append` and passed to cat by its name, and a comprehension
unpacked into names, and a name bound again by unpacking views. Sizes are chosen so that getting the pattern
wrong moves the peak by far more than the 1 % bar.
"""

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

WIDTH = 64
SEQUENCE = 32


class BranchyLoop(nn.Module):
    """A loop over layers whose body rebinds `h` in both branches of an `if` (scripted, the
    ModuleList loop is unrolled and every `if` output gets a name of its own). The condition
    involves the input's shape so that scripting cannot fold the `if` away."""

    def __init__(self, layers=6, width=WIDTH):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(layers)])

    def forward(self, x):
        h = x
        for i, layer in enumerate(self.layers):
            if (i + h.size(0)) % 2 == 0:
                h = layer(h)
            else:
                h = torch.relu(layer(h))
        return h


class AttentionWithWeights(nn.Module):
    """BERT/ViT-style attention returning (output, attention weights)."""

    def __init__(self, width=WIDTH, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        batch, length, width = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(width // self.heads)
        weights = scores.softmax(-1)
        out = (weights @ v).transpose(1, 2).reshape(batch, length, width)
        return self.proj(out), weights


class UnderscoreEncoder(nn.Module):
    """`x, _ = self.attention(...)`: `_` keeps the attention weights alive in Python."""

    def __init__(self, layers=2, width=WIDTH):
        super().__init__()
        self.attentions = nn.ModuleList([AttentionWithWeights(width) for _ in range(layers)])
        self.ffs = nn.ModuleList([nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                                nn.Linear(4 * width, width))
                                  for _ in range(layers)])

    def forward(self, x):
        for attention, ff in zip(self.attentions, self.ffs):
            a, _ = attention(x)
            x = x + a
            x = x + ff(x)
        return x


class PopUNet(nn.Module):
    """A U-Net that keeps its skips in a list and pops them on the way up."""

    def __init__(self, channels=(8, 16, 32)):
        super().__init__()
        self.downs = nn.ModuleList()
        previous = 3
        for width in channels:
            self.downs.append(nn.Conv2d(previous, width, 3, padding=1))
            previous = width
        self.middle = nn.Conv2d(previous, previous, 3, padding=1)
        self.ups = nn.ModuleList()
        for width in reversed(channels):
            self.ups.append(nn.Conv2d(previous + width, width, 3, padding=1))
            previous = width
        self.head = nn.Conv2d(previous, 3, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = F.relu(down(x))
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = F.relu(self.middle(x))
        for up in self.ups:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = F.relu(up(torch.cat([x, skips.pop()], dim=1)))
        return self.head(x)


class CheckpointedBlocks(nn.Module):
    """Blocks under torch.utils.checkpoint (non-reentrant): each call binds checkpoint's `ret`."""

    def __init__(self, blocks=3, width=WIDTH):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                                   nn.Linear(4 * width, width))
                                     for _ in range(blocks)])

    def forward(self, x):
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            x = torch.tanh(x)
        return x


class BoundView(nn.Module):
    """Whisper's encoder head: a permute view and an `arange` stay bound to names while the
    layers after them run, and the view keeps its base alive."""

    def __init__(self, channels=16, width=WIDTH, length=SEQUENCE):
        super().__init__()
        self.conv1 = nn.Conv1d(channels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, padding=1)
        self.positions = nn.Embedding(length, width)
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(2)])

    def forward(self, features):
        embeds = F.gelu(self.conv1(features))
        embeds = F.gelu(self.conv2(embeds))
        embeds = embeds.permute(0, 2, 1)
        positions = torch.arange(embeds.shape[1], device=embeds.device)
        hidden = embeds + self.positions(positions)
        for layer in self.layers:
            hidden = F.gelu(layer(hidden))
        return hidden


def attend(q, k, v):
    weights = (q @ k.transpose(-2, -1)).softmax(-1)
    out = weights @ v
    return out, weights


class SelfAttention(nn.Module):
    def __init__(self, width=WIDTH):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        out, weights = attend(q, k, v)
        out = self.proj(out)
        return out, weights


class ReturnedNames(nn.Module):
    """Hugging Face's layers: a helper function returns `out, weights` from a return line that
    runs no op, the attention module passes both up, the layer drops the weights into `_`
    (held until the layer returns) and runs its feed-forward in a helper method."""

    def __init__(self, width=WIDTH):
        super().__init__()
        self.attention = SelfAttention(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def feed_forward(self, x):
        hidden = F.gelu(self.up(x))
        return self.down(hidden)

    def forward(self, x):
        a, _ = self.attention(x)
        x = x + a
        return self.feed_forward(x)


class WrappedLayer(nn.Module):
    """transformers' GradientCheckpointingLayer: every subclass's forward is replaced by a
    wrapper that returns what the original returns (`return forward(self, *args, **kwargs)`)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        forward = cls.forward

        @functools.wraps(forward)
        def forward_with_checkpointing(self, *args, **kwargs):
            return forward(self, *args, **kwargs)

        cls.forward = forward_with_checkpointing


class TupleBlock(WrappedLayer):
    def __init__(self, width=WIDTH):
        super().__init__()
        self.attention = SelfAttention(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        a, weights = self.attention(x)
        x = x + a
        x = x + self.down(F.gelu(self.up(x)))
        return x, weights


class OneNameForATuple(nn.Module):
    """Falcon's layer loop: `outputs = block(x)` binds the (hidden, weights) tuple the wrapped
    block returns to one name, which holds the weights until the next block rebinds it."""

    def __init__(self, layers=3, width=WIDTH):
        super().__init__()
        self.blocks = nn.ModuleList([TupleBlock(width) for _ in range(layers)])
        self.head = nn.Linear(width, 4 * width)

    def forward(self, x):
        for block in self.blocks:
            outputs = block(x)
            x = outputs[0]
        return self.head(x)


class Widen(nn.Module):
    def __init__(self, width=WIDTH):
        super().__init__()
        self.left = nn.Linear(width, 2 * width)
        self.right = nn.Linear(width, 2 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        half = 2 * x.shape[2]
        out = torch.zeros(x.shape[0], x.shape[1], 2 * half)
        out[:, :, :half] = self.left(x)
        out[:, :, half:] = self.right(x)
        return self.down(out)


class TensorStore(nn.Module):
    """`out[..., :half] = self.left(x)`: a store into a tensor copies and holds nothing; `out`
    dies when Widen returns, unlike a value stored into an object's attribute (transformers'
    MoE: `inv_perm[perm] = torch.arange(n)`)."""

    def __init__(self, width=WIDTH):
        super().__init__()
        self.widen = Widen(width)
        self.up = nn.Linear(width, 8 * width)

    def forward(self, x):
        return self.up(self.widen(x))


class CacheLayer:
    """One layer's entry of a KV cache, as transformers' DynamicLayer keeps it: the tensors are
    stored into the object, never bound to a name, and each step's keys replace the last."""

    def __init__(self, keys, values):
        self.keys = keys.clone()
        self.values = values.clone()

    def update(self, keys, values):
        self.keys = torch.cat([self.keys, keys], dim=-2)
        self.values = torch.cat([self.values, values], dim=-2)
        return self.keys, self.values


class CachedAttention(nn.Module):
    def __init__(self, width=WIDTH):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x, cache):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        k, v = cache.update(k, v)
        weights = torch.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1)
        return self.proj(weights @ v)


class ObjectCache(nn.Module):
    """One decoding step over a KV cache object, as generate() makes one: each layer's past
    keys and values are computed from the input's prefix into a cache object, and each layer's
    attention grows its entry by a cat. The tracer passes the stored tensors to the attention
    calls as arguments; Python passed the object, which holds them until forward returns."""

    STEP = 4

    def __init__(self, layers=3, width=WIDTH):
        super().__init__()
        self.past = nn.ModuleList([nn.Linear(width, 2 * width) for _ in range(layers)])
        self.attentions = nn.ModuleList([CachedAttention(width) for _ in range(layers)])

    def forward(self, x):
        prefix, step = x[:, :-self.STEP], x[:, -self.STEP:]
        caches = []
        for past in self.past:
            keys, values = past(prefix).chunk(2, dim=-1)
            caches.append(CacheLayer(keys, values))
        for attention, cache in zip(self.attentions, caches):
            step = step + attention(step, cache)
        return step


def full_mask(x):
    length = x.shape[1]
    return torch.full((x.shape[0], 1, length, length), float("-inf")).triu(1)


def window_mask(x, window: int = 4):
    length = x.shape[1]
    blocked = torch.ones(length, length, dtype=torch.bool).tril(-window)
    return full_mask(x).masked_fill(blocked, float("-inf"))


class MaskedAttention(nn.Module):
    def __init__(self, width=WIDTH):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / 8.0 + mask, dim=-1)
        return self.proj((weights @ v).squeeze(1))


class DictOfMasks(nn.Module):
    """transformers' decoders: `causal_mask_mapping = {"full_attention": create_causal_mask(...),
    "sliding_attention": create_sliding_window_causal_mask(...)}` holds both masks until forward
    returns, though the statement's last op made only the second."""

    def __init__(self, layers=2, width=WIDTH):
        super().__init__()
        self.layers = nn.ModuleList([MaskedAttention(width) for _ in range(layers)])
        self.head = nn.Linear(width, 4 * width)

    def forward(self, x):
        masks = {
            "full": full_mask(x),
            "sliding": window_mask(x),
        }
        for index, layer in enumerate(self.layers):
            x = x + layer(x, masks["full" if index % 2 == 0 else "sliding"])
        return self.head(x)


def segment_sum(x):
    """Mamba-2's segment_sum (transformers' falcon_h1 and mamba2): a helper whose locals are
    large, rebound as it goes, and freed as it returns."""
    length = x.size(-1)
    x = x.unsqueeze(-1).expand(x.size(0), x.size(1), length, length)
    mask = torch.tril(torch.ones(length, length, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~mask, 0.0)
    total = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(length, length, dtype=torch.bool), diagonal=0)
    total = total.masked_fill(~mask, float("-inf"))
    return total


class HelperCalledTwice(nn.Module):
    """Mamba-2's chunk scan: `L = torch.exp(segment_sum(A))`, then, lines later, a statement
    that calls F.pad before it calls segment_sum again. Each call has its own names: the first
    call's `x` and `total` die as it returns, not when the second call binds them again (traced,
    both calls once shared one scope: +27 % on falcon_h1)."""

    def __init__(self, width=WIDTH):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        a = self.proj(x)
        decay = torch.exp(segment_sum(a))
        scores = decay * 2.0
        mixed = scores.sum(-1)
        chunk = torch.exp(segment_sum(F.pad(a[:, :, :8], (1, 0))))
        return mixed[:, :, :8] + chunk.sum(-1)[:, :, 1:]


class PartOfAResult(nn.Module):
    """hiera's query pooling: `query = (query.view(...).max(dim=1).values)`, and `torch.sort(x)[0]`:
    the name holds one part of what the op returned; the other part (int64 indices, twice the
    values' bytes) dies with the temporary tuple (traced, it stayed bound: +1.6 % on hiera)."""

    def __init__(self, width=WIDTH):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.head = nn.Linear(width, width)

    def forward(self, x):
        h = self.proj(x)
        pooled = (
            h.view(h.shape[0], 2, -1, h.shape[-1]).max(dim=1).values
        )
        ordered = torch.sort(pooled, dim=-1)[0]
        return self.head(ordered)


class ListByName(nn.Module):
    """HGNetV2's blocks: `output = [x]`, `output.append(x)` after each layer, then
    `torch.cat(output, dim=-1)`. The list bound to `output` holds every layer's output until
    forward returns; a trace builds the list only as cat's argument (traced, the outputs died
    after cat: -1.0 % on HGNetV2)."""

    def __init__(self, layers=4, width=WIDTH):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(layers)])
        self.squeeze = nn.Linear(width * (layers + 1), 4 * width)
        self.excite = nn.Linear(4 * width, width)

    def forward(self, x):
        output = [x]
        for layer in self.layers:
            x = layer(x)
            output.append(x)
        x = torch.cat(output, dim=-1)
        x = self.squeeze(x)
        return self.excite(x)


def into_chunks(t, pad: int):
    t = F.pad(t, (0, 0, 0, pad))
    return t.reshape(t.shape[0], -1, 4, t.shape[-1])


class UnpackedComprehension(nn.Module):
    """Mamba-2's chunk scan: `q, k = [into_chunks(t, 4) for t in [q, k]]`, each call's result
    bound to its own name until forward returns (traced, the padded copies died at their last
    use: -9.2 % on falcon_h1 at batch 2). Scripted, the comprehension is a loop appending to a
    list: its `t` is the comprehension's own name, let go as it ends (eager: +21 % while the
    forward held it), and the interpreter's plan unrolls the loop, freeing each input at its
    last use (torchscript: +26 % while the loop held both)."""

    def __init__(self, width=WIDTH):
        super().__init__()
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.head = nn.Linear(width, 8 * width)

    def forward(self, x):
        q = self.q(x)
        k = self.k(x)
        q, k = [into_chunks(t, 4) for t in [q, k]]
        mixed = (q * k).sum(2)
        return self.head(mixed)


class RebindByUnpacking(nn.Module):
    """Mamba-2's chunk scan: `states = torch.cat(...)`, then `states, final = new[:, :-1],
    new[:, -1]` binds `states` again, which frees the cat's result there (traced, nothing tied
    the two views to their names, and the cat's result lived until forward returned)."""

    def __init__(self, width=WIDTH):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.head = nn.Linear(width, 8 * width)

    def forward(self, x):
        states = torch.cat([x, x], dim=1)
        new = self.proj(states)
        states, final = new[:, :-1], new[:, -1]
        return self.head(states).sum(-1, keepdim=True) * final.unsqueeze(1)


MODELS = {
    "branchy-loop": BranchyLoop,
    "underscore-encoder": UnderscoreEncoder,
    "pop-unet": PopUNet,
    "checkpointed-blocks": CheckpointedBlocks,
    "bound-view": BoundView,
    "returned-names": ReturnedNames,
    "object-cache": ObjectCache,
    "one-name-for-a-tuple": OneNameForATuple,
    "tensor-store": TensorStore,
    "dict-of-masks": DictOfMasks,
    "helper-called-twice": HelperCalledTwice,
    "part-of-a-result": PartOfAResult,
    "list-by-name": ListByName,
    "unpacked-comprehension": UnpackedComprehension,
    "rebind-by-unpacking": RebindByUnpacking,
}

# Models torch.jit.script cannot take (torch.utils.checkpoint is Python only, and so are a
# cache object of a plain Python class and a forward wrapped to take *args).
TRACE_ONLY = {"checkpointed-blocks", "object-cache", "one-name-for-a-tuple"}

# Models whose eager figure rests on how long an object holds what was stored into it, which
# the graph does not show: it must say it is approximate, with a bracket.
STORES_INTO_OBJECTS = {"object-cache"}


def make_model(name):
    torch.manual_seed(0)
    return MODELS[name]().eval()


def make_input(name, batch):
    torch.manual_seed(1)
    if name == "pop-unet":
        return torch.randn(batch, 3, 32, 32)
    if name == "bound-view":
        return torch.randn(batch, 16, SEQUENCE)
    return torch.randn(batch, SEQUENCE, WIDTH)
