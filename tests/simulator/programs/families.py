"""Models beyond transformers and CNNs, small, on the simulated card (tests/simulator/
test_families.py): each family trains a step or two and runs inference, then prints, as its
last line, PyTorch's own requested peak (torch.cuda.memory_stats()) as JSON, and for the RNNs the
bytes of each one's flat weight space (cuDNN's, which PyTorch's parameters are views of) beside
their parameters' bytes.

    python families.py rnn | audio | linalg

rnn     pytorch/examples' word_language_model --model LSTM (embedding, a 2-layer LSTM with
        dropout, a decoder), a training step and evaluation; a bidirectional GRU over packed
        sequences in half precision; an LSTM with projections.
audio   an audio front end (stft, a mel filterbank as a matmul, log) and a conformer-style
        block (a depthwise convolution, attention, a feed-forward) trained a step; rfft/irfft.
linalg  linear algebra inside a training step: whitening by eigh, a Gaussian process's Cholesky
        factor, an SVD of a weight (a Shampoo-style preconditioner), backward through all three.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

DEVICE = "cuda"


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
    said = {"rnn": rnn, "audio": audio, "linalg": linalg}[sys.argv[1]]()
    torch.cuda.synchronize()
    said["requested_peak"] = torch.cuda.memory_stats()["requested_bytes.all.peak"]
    print(json.dumps(said))


if __name__ == "__main__":
    main()
