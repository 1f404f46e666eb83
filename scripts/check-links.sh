#!/usr/bin/env bash
# Checks the relative links of the project's Markdown (README.md, CONTRIBUTING.md, docs/*.md,
# bench/results/*.md, or the files given): each target file exists, and each #anchor names a
# heading of the target (GitHub's rule: lower case, punctuation dropped, spaces to hyphens,
# -1, -2, ... for repeats). Prints one line per broken link and exits 1 if there is any.
# scripts/test.sh runs it with the other style checks.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
command -v python3 >/dev/null || { echo "SKIPPED: python3 not installed"; exit 77; }
if [ $# -eq 0 ]; then
  set -- README.md CONTRIBUTING.md docs/*.md bench/results/*.md
fi
exec python3 - "$@" <<'EOF'
import os, re, sys

LINK = re.compile(r'(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
FENCE = re.compile(r'^\s*(```|~~~)')


def text_lines(path):
    inside = False
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield n, line


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', s)
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def anchors(path):
    seen, out = {}, set()
    for _, line in text_lines(path):
        m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f'{base}-{k}')
    return out


def targets(path):
    return [path] if os.path.exists(path) else []


bad = 0
for src in sys.argv[1:]:
    for n, line in text_lines(src):
        for url in LINK.findall(line):
            if re.match(r'^[a-z][a-z0-9+.-]*:', url):
                continue
            file, _, frag = url.partition('#')
            path = os.path.normpath(os.path.join(os.path.dirname(src), file)) if file else src
            found = targets(path)
            if not found:
                print(f'{src}:{n}: {url}: no file {path}')
                bad += 1
                continue
            if frag and not path.endswith('.md'):
                continue
            if frag and not any(frag in anchors(t) for t in found if os.path.isfile(t)):
                print(f'{src}:{n}: {url}: no heading #{frag} in {path}')
                bad += 1
print(f'check-links: {len(sys.argv) - 1} files, {bad} broken links')
sys.exit(1 if bad else 0)
EOF
