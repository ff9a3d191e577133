"""torchvision's Faster R-CNN (ResNet-50 FPN, random weights: nothing is downloaded) in
inference on two 320 x 320 images, on the device the first argument names, for
tests/simulator/test_values.py: how many boxes pass its score threshold and NMS is decided by
the values, so on the simulated card under `--values cpu` it is a CPU run's (without it, every
box passes: the most the detector keeps). Prints one JSON line: each image's box count."""
import json
import sys

import torch
import torchvision

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
torch.manual_seed(0)
# With random weights the scores run from about 0.4 to 1: 0.9 keeps a few boxes of the 100 the
# model keeps at most.
model = torchvision.models.detection.fasterrcnn_resnet50_fpn(
    weights=None, weights_backbone=None, box_score_thresh=0.9, min_size=320,
    max_size=320).eval().to(device)
images = [torch.rand(3, 320, 320).to(device) for _ in range(2)]
with torch.no_grad():
    detections = model(images)
print(json.dumps({"boxes": [len(found["boxes"]) for found in detections]}))
