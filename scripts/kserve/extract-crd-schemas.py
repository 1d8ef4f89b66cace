#!/usr/bin/python3
"""Extract the parts of KServe's CRD schemas that `torchspeed export kserve` writes.

Usage: extract-crd-schemas.py KSERVE_CHECKOUT OUT_DIR

Reads config/crd/full/serving.kserve.io_{inferenceservices,servingruntimes}.yaml from a kserve
checkout and writes each served version's openAPIV3Schema as JSON Schema, without the subtrees
torchspeed never writes (the other predictor frameworks, transformer, explainer, multi-node
workers, volumes, affinity, status). What is left is kserve's text, unchanged; internal/
schemacheck validates exports against it with Kubernetes' strict field validation.
"""
import json
import subprocess
import sys

import yaml

LICENSE = ("Copyright The KServe Authors. Licensed under the Apache License, Version 2.0 "
           "(http://www.apache.org/licenses/LICENSE-2.0); distributed on an \"AS IS\" BASIS, "
           "WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND. Extracted from kserve/kserve {path} at "
           "commit {commit} by scripts/kserve/extract-crd-schemas.py.")

DROP = {
    "inferenceservices": {
        ("spec",): ["canary", "explainer", "transformer"],
        ("spec", "predictor"): ["huggingface", "lightgbm", "onnx", "paddle", "pmml", "pytorch",
                                "sklearn", "tensorflow", "triton", "xgboost", "workerSpec",
                                "volumes", "affinity", "initContainers", "containers"],
        (): ["status"],
    },
    "servingruntimes": {
        ("spec",): ["workerSpec", "volumes", "affinity"],
        (): ["status"],
    },
}
VERSION = {"inferenceservices": "v1beta1", "servingruntimes": "v1alpha1"}


def main():
    repo, out = sys.argv[1], sys.argv[2]
    commit = subprocess.check_output(["git", "-C", repo, "rev-parse", "HEAD"], text=True).strip()
    for crd, drops in DROP.items():
        path = f"config/crd/full/serving.kserve.io_{crd}.yaml"
        text = subprocess.check_output(["git", "-C", repo, "show", f"HEAD:{path}"], text=True)
        doc = yaml.safe_load(text)
        (ver,) = [v for v in doc["spec"]["versions"] if v["name"] == VERSION[crd]]
        schema = ver["schema"]["openAPIV3Schema"]
        for at, keys in drops.items():
            node = schema
            for k in at:
                node = node["properties"][k]
            for k in keys:
                del node["properties"][k]
        schema = {"$comment": LICENSE.format(path=path, commit=commit), **schema}
        with open(f"{out}/kserve-{crd}-{VERSION[crd]}.schema.json", "w") as f:
            json.dump(schema, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
