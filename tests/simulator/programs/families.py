"""The zoo of model families on the simulated card (tests/simulator/test_families.py,
docs/simulated-gpu.md "The zoo"), each small: a family trains a step (and some run inference),
then prints, as its last line, PyTorch's own requested peak (torch.cuda.memory_stats()) as JSON,
and for the RNNs the bytes of each one's flat weight space (cuDNN's, which PyTorch's parameters
are views of) beside their parameters' bytes.

    python families.py resnet | efficientnet | convnext | unet | rnn | audio | diffusion |
                       linalg | moe

resnet  ResNet-50 (torchvision's bottlenecks, tests/estimator/models.py), batch 8 at 224 x 224,
        SGD with momentum.
efficientnet  MBConv blocks with squeeze-excitation (models.py's MobileNetV3-style network),
        batch 16 at 224 x 224, AdamW.
convnext  ConvNeXt-T's block (a 7 x 7 depthwise convolution, LayerNorm, an inverted MLP, layer
        scale) in four stages, batch 8 at 224 x 224, AdamW.
unet    the original U-Net (models.py), batch 4 at 256 x 256, segmentation loss, Adam.
diffusion  a denoising step of a diffusion U-Net: a timestep embedding, residual blocks with
        GroupNorm, self-attention at the lowest resolution, batch 4 latents of 4 x 32 x 32,
        AdamW, under bfloat16 autocast.
moe     a mixture-of-experts layer with top-2 routing: which tokens go to which expert is
        decided by the router's values (nonzero), assumed on the simulated card (each token
        to its row's first k experts: Note [Top-k keeps k]).
rnn     pytorch/examples' word_language_model --model LSTM (embedding, a 2-layer LSTM with
        dropout, a decoder), a training step and evaluation; a bidirectional GRU over packed
        sequences in half precision; an LSTM with projections.
audio   an audio front end (stft, a mel filterbank as a matmul, log) and a conformer-style
        block (a depthwise convolution, attention, a feed-forward) trained a step; rfft/irfft.
linalg  linear algebra inside a training step: whitening by eigh, a Gaussian process's Cholesky
        factor, an SVD of a weight (a Shampoo-style preconditioner), backward through all three.
"""
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

DEVICE = "cuda"

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "estimator"))
# tests/estimator/models.py: ResNet, MobileNetV3, U-Net in plain torch.
import models  # noqa: E402


def train_step(model, inputs, loss_of, optimizer):
    loss = loss_of(model(inputs))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def resnet():
    torch.manual_seed(0)
    model = models.ResNetLike(layers=(3, 4, 6, 3), width=64, classes=1000).to(DEVICE)
    labels = torch.randint(0, 1000, (8,), device=DEVICE)
    train_step(model, torch.randn(8, 3, 224, 224, device=DEVICE),
               lambda logits: F.cross_entropy(logits, labels),
               torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return {}


def efficientnet():
    torch.manual_seed(0)
    model = models.MobileNetLike(classes=1000).to(DEVICE)
    labels = torch.randint(0, 1000, (16,), device=DEVICE)
    train_step(model, torch.randn(16, 3, 224, 224, device=DEVICE),
               lambda logits: F.cross_entropy(logits, labels),
               torch.optim.AdamW(model.parameters()))
    return {}


class ConvNeXtBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.depthwise = nn.Conv2d(width, width, 7, padding=3, groups=width)
        self.norm = nn.LayerNorm(width)
        self.expand = nn.Linear(width, 4 * width)
        self.project = nn.Linear(4 * width, width)
        self.scale = nn.Parameter(torch.full((width,), 1e-6))

    def forward(self, x):
        y = self.depthwise(x).permute(0, 2, 3, 1)
        y = self.project(F.gelu(self.expand(self.norm(y))))
        return x + (self.scale * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, depths=(3, 3, 9, 3), widths=(96, 192, 384, 768), classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, widths[0], 4, stride=4)]
        for stage, (depth, width) in enumerate(zip(depths, widths)):
            if stage:
                layers += [nn.GroupNorm(1, widths[stage - 1]),
                           nn.Conv2d(widths[stage - 1], width, 2, stride=2)]
            layers += [ConvNeXtBlock(width) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def convnext():
    torch.manual_seed(0)
    model = ConvNeXt().to(DEVICE)
    labels = torch.randint(0, 1000, (8,), device=DEVICE)
    train_step(model, torch.randn(8, 3, 224, 224, device=DEVICE),
               lambda logits: F.cross_entropy(logits, labels),
               torch.optim.AdamW(model.parameters()))
    return {}


def unet():
    torch.manual_seed(0)
    model = models.UNetLike(channels=3, classes=2, width=32).to(DEVICE)
    masks = torch.randint(0, 2, (4, 256, 256), device=DEVICE)
    train_step(model, torch.randn(4, 3, 256, 256, device=DEVICE),
               lambda logits: F.cross_entropy(logits, masks),
               torch.optim.Adam(model.parameters()))
    return {}


class WordLanguageModel(nn.Module):
    def __init__(self, tokens=2000, width=128, hidden=256, layers=2):
        super().__init__()
        self.encoder = nn.Embedding(tokens, width)
        self.rnn = nn.LSTM(width, hidden, layers, dropout=0.2)
        self.decoder = nn.Linear(hidden, tokens)

    def forward(self, words, state=None):
        output, state = self.rnn(self.encoder(words), state)
        return self.decoder(output), state


def weight_space(module):
    """(the bytes of the cuDNN weight space the module's parameters are views of, the bytes of
    its parameters)."""
    first = next(module.parameters())
    return (first.untyped_storage().nbytes(),
            sum(p.numel() * p.element_size() for p in module.parameters()))


def rnn():
    torch.manual_seed(0)
    model = WordLanguageModel().to(DEVICE)
    said = {"weight_spaces": [weight_space(model.rnn)]}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    words = torch.randint(0, 2000, (35, 8), device=DEVICE)  # bptt 35, batch 8
    for _ in range(2):
        logits, _ = model(words)
        loss = F.cross_entropy(logits.view(-1, 2000), words.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        model(words)
    gru = nn.GRU(64, 96, num_layers=2, batch_first=True, bidirectional=True).to(DEVICE).half()
    sequences = torch.randn(6, 20, 64, device=DEVICE, dtype=torch.half)
    packed = pack_padded_sequence(sequences, torch.tensor([20, 18, 15, 11, 7, 3]),
                                  batch_first=True)
    output, _ = gru(packed)
    output.data.float().sum().backward()
    projected = nn.LSTM(64, 128, proj_size=32).to(DEVICE)
    projected(torch.randn(12, 4, 64, device=DEVICE))[0].sum().backward()
    said["weight_spaces"] += [weight_space(gru), weight_space(projected)]
    return said


class ConformerBlock(nn.Module):
    def __init__(self, width=144, heads=4):
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.depthwise = nn.Conv1d(width, width, 31, padding=15, groups=width)
        self.norm = nn.LayerNorm(width)
        self.feed_forward = nn.Sequential(nn.Linear(width, 4 * width), nn.SiLU(),
                                          nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attention(x, x, x, need_weights=False)[0]
        x = x + self.depthwise(x.transpose(1, 2)).transpose(1, 2)
        return x + self.feed_forward(self.norm(x))


def audio():
    torch.manual_seed(0)
    waveform = torch.randn(4, 16000 * 2, device=DEVICE)  # two seconds at 16 kHz
    window = torch.hann_window(400, device=DEVICE)
    mel_filters = torch.rand(201, 80, device=DEVICE)
    project = nn.Linear(80, 144).to(DEVICE)
    block = ConformerBlock().to(DEVICE)
    optimizer = torch.optim.AdamW([*project.parameters(), *block.parameters()])
    spectrum = torch.stft(waveform, 400, 160, window=window, return_complex=True)
    mel = (spectrum.abs() ** 2).transpose(1, 2) @ mel_filters
    features = torch.log(mel + 1e-6)
    loss = block(project(features)).pow(2).mean()
    loss.backward()
    optimizer.step()
    signal = torch.fft.irfft(torch.fft.rfft(waveform, dim=-1), n=waveform.shape[-1])
    torch.fft.fft2(signal.view(4, 160, 200).to(torch.complex64))
    return {}


class ResidualBlock(nn.Module):
    def __init__(self, inputs, outputs, time_width):
        super().__init__()
        self.norm1 = nn.GroupNorm(8, inputs)
        self.conv1 = nn.Conv2d(inputs, outputs, 3, padding=1)
        self.time = nn.Linear(time_width, outputs)
        self.norm2 = nn.GroupNorm(8, outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1)
        self.skip = nn.Conv2d(inputs, outputs, 1) if inputs != outputs else nn.Identity()

    def forward(self, x, time):
        h = self.conv1(F.silu(self.norm1(x))) + self.time(time)[:, :, None, None]
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class DiffusionUNet(nn.Module):
    def __init__(self, channels=4, width=64, time_width=256):
        super().__init__()
        self.time_width = time_width
        self.time_mlp = nn.Sequential(nn.Linear(time_width, time_width), nn.SiLU(),
                                      nn.Linear(time_width, time_width))
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.down1 = ResidualBlock(width, width, time_width)
        self.down2 = ResidualBlock(width, 2 * width, time_width)
        self.middle = ResidualBlock(2 * width, 2 * width, time_width)
        self.attention = nn.MultiheadAttention(2 * width, 4, batch_first=True)
        self.up2 = ResidualBlock(4 * width, width, time_width)
        self.up1 = ResidualBlock(2 * width, width, time_width)
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def embed(self, steps):
        half = self.time_width // 2
        frequencies = torch.exp(-math.log(10000) * torch.arange(half, device=steps.device) / half)
        angles = steps[:, None].float() * frequencies[None]
        return self.time_mlp(torch.cat([angles.sin(), angles.cos()], dim=1))

    def forward(self, x, steps):
        time = self.embed(steps)
        h1 = self.down1(self.stem(x), time)
        h2 = self.down2(F.avg_pool2d(h1, 2), time)
        h = self.middle(F.avg_pool2d(h2, 2), time)
        b, c, height, width = h.shape
        tokens = h.flatten(2).transpose(1, 2)
        tokens = tokens + self.attention(tokens, tokens, tokens, need_weights=False)[0]
        h = tokens.transpose(1, 2).reshape(b, c, height, width)
        h = self.up2(torch.cat([F.interpolate(h, scale_factor=2), h2], dim=1), time)
        h = self.up1(torch.cat([F.interpolate(h, scale_factor=2), h1], dim=1), time)
        return self.out(h)


def diffusion():
    torch.manual_seed(0)
    model = DiffusionUNet().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters())
    latents = torch.randn(4, 4, 32, 32, device=DEVICE)
    steps = torch.randint(0, 1000, (4,), device=DEVICE)
    noise = torch.randn_like(latents)
    alpha = torch.rand(4, 1, 1, 1, device=DEVICE)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        predicted = model(alpha.sqrt() * latents + (1 - alpha).sqrt() * noise, steps)
        loss = F.mse_loss(predicted.float(), noise)
    loss.backward()
    optimizer.step()
    return {}


class MixtureOfExperts(nn.Module):
    def __init__(self, width=256, experts=8, hidden=1024, top=2):
        super().__init__()
        self.top = top
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))
            for _ in range(experts))

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        weights, chosen = self.router(tokens).softmax(-1).topk(self.top, dim=-1)
        out = torch.zeros_like(tokens)
        for index, expert in enumerate(self.experts):
            token, slot = (chosen == index).nonzero(as_tuple=True)  # a value decides
            out.index_add_(0, token, expert(tokens[token]) * weights[token, slot, None])
        return out.reshape(x.shape)


def moe():
    torch.manual_seed(0)
    layer = MixtureOfExperts().to(DEVICE)
    optimizer = torch.optim.AdamW(layer.parameters())
    x = torch.randn(8, 128, 256, device=DEVICE)
    layer(x).pow(2).mean().backward()
    optimizer.step()
    return {}


def linalg():
    torch.manual_seed(0)
    layer = nn.Linear(64, 64).to(DEVICE)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.01)
    x = torch.randn(256, 64, device=DEVICE)
    hidden = layer(x)
    covariance = hidden.T @ hidden / 256 + torch.eye(64, device=DEVICE)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
    whitened = hidden @ eigenvectors / eigenvalues.clamp_min(1e-3).sqrt()
    kernel = torch.exp(-torch.cdist(whitened[:48], whitened[:48]) ** 2) + torch.eye(
        48, device=DEVICE)
    factor = torch.linalg.cholesky(kernel)
    _, singular, _ = torch.linalg.svd(layer.weight)
    loss = whitened.pow(2).mean() + factor.diagonal().log().sum() + singular.sum()
    loss.backward()
    optimizer.step()
    return {}


def main():
    families = {"resnet": resnet, "efficientnet": efficientnet, "convnext": convnext,
                "unet": unet, "rnn": rnn, "audio": audio, "diffusion": diffusion,
                "linalg": linalg, "moe": moe}
    said = families[sys.argv[1]]()
    torch.cuda.synchronize()
    said["requested_peak"] = torch.cuda.memory_stats()["requested_bytes.all.peak"]
    print(json.dumps(said))
    # Autograd's device thread may still need the GIL after backward() returned: a process that
    # ends at once can abort in PyTorch's teardown (Note [Letting autograd's threads finish] in
    # python/mem_tracer/_run.py); the calibration's untraced runs end so.
    time.sleep(0.05)


if __name__ == "__main__":
    main()
