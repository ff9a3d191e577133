"""Test models for the estimator, in plain torch.nn (no downloads, no torchvision).

Each follows the published architecture's code shape (torchvision's ResNet bottleneck and VGG,
MobileNetV3's inverted residual with squeeze-excite, BERT's encoder layer, GPT-2 as in
minGPT/nanoGPT, the original UNet), scaled down so a CPU runs them in a fraction of a second.
The estimator's per-line attribution is checked against the lines of this file that the
ground-truth tracker charges the live tensors to.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNetLike(nn.Module):
    def __init__(self, layers=(1, 2, 2, 1), width=16, classes=100):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * Bottleneck.expansion, classes)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        for _ in range(1, blocks):
            layers.append(Bottleneck(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


class VGGLike(nn.Module):
    def __init__(self, channels=(16, 32, 64, 64), classes=100):
        super().__init__()
        layers = []
        previous = 3
        for width in channels:
            layers += [nn.Conv2d(previous, width, 3, padding=1), nn.ReLU(inplace=True)]
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True)]
            layers.append(nn.MaxPool2d(2, 2))
            previous = width
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(
            nn.Linear(previous * 16, 256),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(256, 256),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(256, classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x):
        scale = F.adaptive_avg_pool2d(x, 1)
        scale = F.relu(self.fc1(scale))
        scale = F.hardsigmoid(self.fc2(scale))
        return scale * x


class InvertedResidual(nn.Module):
    def __init__(self, inputs, expanded, outputs, stride, use_se):
        super().__init__()
        self.use_residual = stride == 1 and inputs == outputs
        layers = [
            nn.Conv2d(inputs, expanded, 1, bias=False),
            nn.BatchNorm2d(expanded),
            nn.Hardswish(),
            nn.Conv2d(expanded, expanded, 3, stride, 1, groups=expanded, bias=False),
            nn.BatchNorm2d(expanded),
            nn.Hardswish(),
        ]
        if use_se:
            layers.append(SqueezeExcitation(expanded, max(8, expanded // 4)))
        layers += [nn.Conv2d(expanded, outputs, 1, bias=False), nn.BatchNorm2d(outputs)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        if self.use_residual:
            result = result + x
        return result


class MobileNetLike(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()
        )
        config = [  # inputs, expanded, outputs, stride, squeeze-excite
            (16, 16, 16, 2, True),
            (16, 72, 24, 2, False),
            (24, 88, 24, 1, False),
            (24, 96, 40, 2, True),
            (40, 240, 40, 1, True),
            (40, 120, 48, 1, True),
        ]
        self.blocks = nn.Sequential(*[InvertedResidual(*row) for row in config])
        self.head = nn.Sequential(nn.Conv2d(48, 288, 1, bias=False), nn.BatchNorm2d(288), nn.Hardswish())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(288, 512), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(512, classes)
        )

    def forward(self, x):
        x = self.stem(x)
        x = self.blocks(x)
        x = self.head(x)
        x = self.pool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def split_heads(self, x):
        batch, length, hidden = x.size()
        return x.view(batch, length, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        query = self.split_heads(self.query(hidden_states))
        key = self.split_heads(self.key(hidden_states))
        value = self.split_heads(self.value(hidden_states))
        scores = torch.matmul(query, key.transpose(-1, -2))
        scores = scores / math.sqrt(self.head_size)
        probabilities = F.softmax(scores, dim=-1)
        context = torch.matmul(probabilities, value)
        context = context.permute(0, 2, 1, 3).contiguous()
        batch, length = context.size(0), context.size(1)
        context = context.view(batch, length, self.heads * self.head_size)
        return self.norm(self.output(context) + hidden_states)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, hidden_states):
        attention = self.attention(hidden_states)
        intermediate = F.gelu(self.intermediate(attention))
        return self.norm(self.output(intermediate) + attention)


class BertLike(nn.Module):
    def __init__(self, vocabulary=1000, hidden=64, heads=4, layers=2, length=128):
        super().__init__()
        self.words = nn.Embedding(vocabulary, hidden)
        self.positions = nn.Embedding(length, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, hidden * 4) for _ in range(layers)])

    def forward(self, input_ids):
        length = input_ids.size(1)
        positions = torch.arange(length, dtype=torch.long, device=input_ids.device)
        embeddings = self.words(input_ids) + self.positions(positions)
        hidden_states = self.norm(embeddings)
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


class CausalSelfAttention(nn.Module):
    def __init__(self, embedding, heads, context):
        super().__init__()
        self.c_attn = nn.Linear(embedding, 3 * embedding)
        self.c_proj = nn.Linear(embedding, embedding)
        self.n_head = heads
        self.n_embd = embedding
        self.register_buffer(
            "bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.c_proj(y)
        return y


class MLP(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.c_fc = nn.Linear(embedding, 4 * embedding)
        self.c_proj = nn.Linear(4 * embedding, embedding)

    def forward(self, x):
        x = self.c_fc(x)
        x = F.gelu(x)
        x = self.c_proj(x)
        return x


class Block(nn.Module):
    def __init__(self, embedding, heads, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embedding)
        self.attn = CausalSelfAttention(embedding, heads, context)
        self.ln_2 = nn.LayerNorm(embedding)
        self.mlp = MLP(embedding)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT2Like(nn.Module):
    def __init__(self, vocabulary=2048, embedding=64, heads=4, layers=2, context=128):
        super().__init__()
        self.wte = nn.Embedding(vocabulary, embedding)
        self.wpe = nn.Embedding(context, embedding)
        self.h = nn.ModuleList([Block(embedding, heads, context) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embedding)
        self.lm_head = nn.Linear(embedding, vocabulary, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.wte(idx)
        pos_emb = self.wpe(pos)
        x = tok_emb + pos_emb
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        return logits


class DoubleConv(nn.Module):
    def __init__(self, inputs, outputs):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
            nn.Conv2d(outputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.conv(x)


class Up(nn.Module):
    def __init__(self, inputs, outputs):
        super().__init__()
        self.up = nn.ConvTranspose2d(inputs, inputs // 2, 2, stride=2)
        self.conv = DoubleConv(inputs, outputs)

    def forward(self, x, skip):
        x = self.up(x)
        x = torch.cat([skip, x], dim=1)
        return self.conv(x)


class UNetLike(nn.Module):
    def __init__(self, channels=3, classes=2, width=16):
        super().__init__()
        self.inc = DoubleConv(channels, width)
        self.down1 = DoubleConv(width, width * 2)
        self.down2 = DoubleConv(width * 2, width * 4)
        self.down3 = DoubleConv(width * 4, width * 8)
        self.pool = nn.MaxPool2d(2)
        self.up1 = Up(width * 8, width * 4)
        self.up2 = Up(width * 4, width * 2)
        self.up3 = Up(width * 2, width)
        self.outc = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(self.pool(x1))
        x3 = self.down2(self.pool(x2))
        x4 = self.down3(self.pool(x3))
        x = self.up1(x4, x3)
        x = self.up2(x, x2)
        x = self.up3(x, x1)
        return self.outc(x)


# name -> (constructor, input maker for a batch size, dtype of the input for --input)
MODELS = {
    "resnet": (ResNetLike, lambda batch: torch.randn(batch, 3, 64, 64)),
    "vgg": (VGGLike, lambda batch: torch.randn(batch, 3, 64, 64)),
    "mobilenet": (MobileNetLike, lambda batch: torch.randn(batch, 3, 64, 64)),
    "bert": (BertLike, lambda batch: torch.randint(0, 1000, (batch, 128))),
    "gpt2": (GPT2Like, lambda batch: torch.randint(0, 2048, (batch, 128))),
    "unet": (UNetLike, lambda batch: torch.randn(batch, 3, 64, 64)),
}


def make_model(name):
    """The model in eval mode with fixed random weights."""
    torch.manual_seed(0)
    return MODELS[name][0]().eval()


def make_input(name, batch):
    torch.manual_seed(1)
    return MODELS[name][1](batch)


def input_argument(example):
    """The --input argument describing a tensor: 2x3x64x64, 2x128:int64."""
    shape = "x".join(str(size) for size in example.shape)
    dtype = str(example.dtype).replace("torch.", "")
    return shape if dtype == "float32" else f"{shape}:{dtype}"
