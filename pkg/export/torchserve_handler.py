"""TorchServe handler written by `torchspeed export torchserve`.

It loads the torchspeed artifact with TorchServe's BaseHandler (plain torch.jit.load), sets
the quantized engine and thread count the artifact was measured with (torchspeed_inputs.json,
archived as an extra file), loads torchspeed's op library first when the model calls its
operators (libtorchspeed_ops.so, archived beside it), and serves JSON requests:

    request:  {"inputs": [INPUT_0, INPUT_1, ...]}   one sample; each input a nested list
              shaped like the model's input without its batch dimension when the model is
              batchable, or with its full shape when it is not
    response: [OUTPUT_0, OUTPUT_1, ...]              one sample's outputs as nested lists
"""
import json
import os

import torch
from ts.torch_handler.base_handler import BaseHandler

_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
    "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool,
}


class TorchspeedHandler(BaseHandler):
    def initialize(self, context):
        model_dir = context.system_properties.get("model_dir")
        with open(os.path.join(model_dir, "torchspeed_inputs.json")) as f:
            self.spec = json.load(f)
        # The engine must be set before the INT8 model is loaded: its packed weights are
        # engine-specific.
        if self.spec.get("qengine"):
            torch.backends.quantized.engine = self.spec["qengine"]
        if self.spec.get("threads"):
            torch.set_num_threads(int(self.spec["threads"]))
        # A model that calls torchspeed's operators needs them registered before it loads.
        if self.spec.get("op_library"):
            torch.ops.load_library(os.path.join(model_dir, self.spec["op_library"]))
        super().initialize(context)
        self.model.eval()

    def preprocess(self, data):
        samples = []
        for row in data:
            body = row.get("data") or row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            inputs = body["inputs"]
            if len(inputs) != len(self.spec["inputs"]):
                raise ValueError("this model takes %d inputs (%s), the request has %d" % (
                    len(self.spec["inputs"]), ", ".join(i["name"] for i in self.spec["inputs"]), len(inputs)))
            samples.append(inputs)
        tensors = []
        for i, spec in enumerate(self.spec["inputs"]):
            dtype = _DTYPES[spec["dtype"]]
            if self.spec["batchable"]:
                t = torch.stack([torch.tensor(s[i], dtype=dtype) for s in samples])
            else:
                t = torch.tensor(samples[0][i], dtype=dtype)
            if list(t.shape[1:]) != list(spec["shape"][1:]):
                raise ValueError("input %s: shape %s, the model takes %s" % (spec["name"], list(t.shape), spec["shape"]))
            tensors.append(t)
        return tensors

    def inference(self, tensors, *args, **kwargs):
        with torch.inference_mode():
            out = self.model(*tensors)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def postprocess(self, outputs):
        n = outputs[0].shape[0] if self.spec["batchable"] else 1
        if not self.spec["batchable"]:
            return [[o.tolist() for o in outputs]]
        return [[o[k].tolist() for o in outputs] for k in range(n)]
