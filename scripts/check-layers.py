#!/usr/bin/env python3
"""check-layers.py: layering and naming rules of pkg/, checked from the built libraries' symbol
tables (CONTRIBUTING.md, "Layering and names").

1. Files form a stack: within one library no object file calls, directly or through others, into
   a file that calls back into it (a cycle between files of one module).
2. One prefix per module: every global symbol a library defines starts with `mv_<prefix>_`,
   where <prefix> is the module's (the table below); a global that none of the module's public
   headers (its *.h other than *_int.h / *_internal.h) declares is a module internal and is named
   `mv_<prefix>__...` (a public header may declare an internal that its inline functions call).
   A module may name one function after itself (`mv_log`).
3. No prefix is shared: no module's `mv_<prefix>_` starts another module's.

Usage: scripts/check-layers.py [BUILD_DIR]   (default: build; build the libraries first)
Prints one line per violation, then `check-layers: N libraries, N violations`; exits 1 on any.
"""
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# library -> prefix. libmicroview is the product's C API (pkg/format/microview/microview.h):
# its prefix is the empty one, `mv_`, and its internals are `mv__...`.
PREFIX = {
    "microview": "",
    "microview_static": "",
    "mv_segment": "seg",
    "mv_log": "log",
    "mv_util": "util",
    "mv_opts": "opts",
    "mv_config": "config",
    "mv_httpd": "httpd",
    "mv_kubec": "kubec",
    "mv_labelsel": "lsel",
    "mv_rpc": "rpc",
    "mv_rdma": "rdma",
    "mv_rdmatoken": "rdmatoken",
    "mv_rdmaread": "rdmaread",
    "mv_rdmatarget": "rdmatarget",
    "mv_sketch": "sketch",
    "mv_detect": "detect",
    "mv_fd": "fd",
    "mv_agentclient": "agentc",
    "mv_api": "api",
    "mv_live": "live",
    "mv_authz": "authz",
    "mv_collect": "coll",
    "mv_collector": "collector",
    "mv_discovery": "disc",
    "mv_expo": "expo",
    "mv_export": "export",
    "mv_rw": "rw",
    "mv_pipeline": "pipe",
    "mv_verbs": "verbs",
    "mv_agent": "agent",
    "mv_agentsvc": "agentsvc",
    "mv_deviceplugin": "dp",
    "mv_kubeapi": "kube",
    "mv_podres": "podres",
    "mv_rdmaexport": "rdmax",
    "mv_segstore": "segstore",
    "mv_ctl": "ctl",
    "mv_inspect": "inspect",
    "mv_workload": "workload",
    "mv_webhook": "wh",
    "mv_scaler": "scaler",
    "mv_scsvc": "scsvc",
}
GLOBAL_TYPES = set("TDBRVWGSiu")


def modules():
    """library name -> source directory, from every mv_library()/add_library() under pkg/."""
    found = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "pkg")):
        if "CMakeLists.txt" not in files:
            continue
        text = open(os.path.join(dirpath, "CMakeLists.txt")).read()
        for m in re.finditer(r"(?:mv_library|add_library)\(\s*([A-Za-z0-9_]+)", text):
            found[m.group(1)] = dirpath
    return found


def nm(lib):
    out = subprocess.run(["nm", "-A", "-g", lib], capture_output=True, text=True, check=True)
    defs, uses = {}, collections.defaultdict(set)
    for line in out.stdout.splitlines():
        head, _, rest = line.rpartition(": ")
        if not head:
            head, _, rest = line.rpartition(":")
        member = head.split(":")[-1]
        parts = rest.split()
        if len(parts) == 3 and parts[1] in GLOBAL_TYPES:
            defs[parts[2]] = member
        elif len(parts) == 2 and parts[0] == "U":
            uses[member].add(parts[1])
    return defs, uses


def cycles(defs, uses):
    edges = collections.defaultdict(set)
    for member, syms in uses.items():
        for s in syms:
            d = defs.get(s)
            if d and d != member:
                edges[member].add((d, s))
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        calls = sorted(f"{a} -> {b} ({s})" for a in comp for b, s in edges[a] if b in comp)
        out.append((comp, calls))
    return out


def own_members(srcdir, defs):
    """Object files of the library compiled from the module's own sources (libmicroview also
    compiles pkg/format/segment in; those objects are checked with their own module)."""
    own = set(os.listdir(srcdir))
    return {m for m in set(defs.values()) if m.endswith(".o") and m[:-2] in own}


def public_names(srcdir):
    text = ""
    for f in sorted(os.listdir(srcdir)):
        if f.endswith(".h") and not re.search(r"_int(ernal)?\.h$", f):
            text += open(os.path.join(srcdir, f), errors="replace").read()
    return set(re.findall(r"\b(mv_[A-Za-z0-9_]+)\b", text))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    libdir = os.path.join(build, "lib")
    if not os.path.isdir(libdir):
        print(f"check-layers: no {libdir} (build first)", file=sys.stderr)
        return 2
    mods = modules()
    violations = []
    prefixes = sorted((p, lib) for lib, p in PREFIX.items())
    for p, lib in prefixes:
        for q, other in prefixes:
            if lib != other and p and q and f"mv_{q}_".startswith(f"mv_{p}_"):
                violations.append(f"prefix: {lib} (mv_{p}_) and {other} (mv_{q}_) share a prefix")
    checked = 0
    for lib, srcdir in sorted(mods.items()):
        path = os.path.join(libdir, f"lib{lib}.a")
        if lib.startswith("mv_proto_") or not os.path.exists(path):
            continue
        if lib not in PREFIX:
            violations.append(f"prefix: {lib} ({os.path.relpath(srcdir, ROOT)}) has no prefix in "
                              "scripts/check-layers.py's table")
            continue
        checked += 1
        defs, uses = nm(path)
        for comp, calls in cycles(defs, uses):
            violations.append(f"layers: {lib}: files call each other in a cycle: {', '.join(comp)}")
            for c in calls[:12]:
                violations.append(f"layers:   {c}")
        pub = public_names(srcdir)
        p = PREFIX[lib]
        base = f"mv_{p}_" if p else "mv_"
        internal = f"mv_{p}__" if p else "mv__"
        own = own_members(srcdir, defs)
        for sym in sorted(defs):
            if defs[sym] not in own or sym == base[:-1]:
                continue
            if not sym.startswith(base):
                violations.append(f"names: {lib}: {sym} does not start with {base}")
            elif sym not in pub and not sym.startswith(internal):
                violations.append(f"names: {lib}: {sym} is not in the public header; a module "
                                  f"internal is named {internal}...")
    for v in violations:
        print(v)
    print(f"check-layers: {checked} libraries, {len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
