#!/usr/bin/env python3
"""check_values_doc.py: the chart's values.yaml and values.schema.json describe the same keys.

Usage: check_values_doc.py CHART_DIR
Checks that every key of values.yaml has a comment line right above it (keys inside list
items are values, not keys), that the schema closes every object (additionalProperties false,
or a schema for map values), and that the keys of values.yaml and the schema's properties are
the same set (Kubernetes-typed values such as affinity may leave optional fields out). Prints "N keys" on success; exits 1 listing every problem.
"""
import json
import re
import sys

import yaml

chart = sys.argv[1]
problems = []

# 1. A comment above every key.
lines = open(f"{chart}/values.yaml").read().split("\n")
list_indent = None
nkeys = 0
for i, line in enumerate(lines):
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    indent = len(line) - len(line.lstrip())
    if list_indent is not None and indent <= list_indent and not line.lstrip().startswith("- "):
        list_indent = None
    if line.lstrip().startswith("- "):
        if list_indent is None or indent < list_indent:
            list_indent = indent
        continue
    if list_indent is not None and indent > list_indent:
        continue
    m = re.match(r"^\s*([A-Za-z0-9_.\-/]+):", line)
    if not m:
        continue
    nkeys += 1
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or not lines[j].lstrip().startswith("#"):
        problems.append(f"values.yaml line {i + 1}: key {m.group(1)} has no comment above it")

# 2. Every object in the schema is closed.
schema = json.load(open(f"{chart}/values.schema.json"))


def walk(node, path):
    if isinstance(node, dict):
        if node.get("type") == "object" and "additionalProperties" not in node:
            problems.append(f"schema {path or '/'}: object without additionalProperties")
        if node.get("additionalProperties") is True:
            problems.append(f"schema {path or '/'}: additionalProperties true")
        for k, v in node.items():
            walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for n, v in enumerate(node):
            walk(v, f"{path}[{n}]")


walk(schema, "")

# 3. values.yaml keys == schema properties (where the schema lists properties).
values = yaml.safe_load(open(f"{chart}/values.yaml"))


def compare(v, s, path, kube=False):
    """Kubernetes types (described "(corev1.X)") may leave their optional fields unset."""
    props = s.get("properties")
    if props is None or not isinstance(v, dict):
        return
    kube = kube or "(corev1." in s.get("description", "")
    for k in v:
        if k not in props:
            problems.append(f"values key {path}{k} is not in the schema")
    for k in props:
        if k in v:
            compare(v[k], props[k], f"{path}{k}.", kube)
        elif not kube:
            problems.append(f"schema property {path}{k} has no default in values.yaml")


compare(values, schema, "")

if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"{nkeys} keys")
