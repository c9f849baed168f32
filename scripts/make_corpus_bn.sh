#!/usr/bin/env bash
# Builds a small real Bengali corpus from the Bengali translations shipped in
# Debian packages (LibreOffice and Firefox language packs, GTK, GLib, iso-codes,
# ...). Every package is fetched with `apt-get download` (nothing is installed
# from them), unpacked into a scratch folder, and the translated strings are
# extracted: gettext .mo catalogues, Firefox .ftl/.properties files and
# LibreOffice .xcd registry values. Lines that are mostly Bengali script are
# kept, placeholders and markup removed, duplicates dropped.
#   ./scripts/make_corpus_bn.sh [OUT_DIR]     (default build/corpus; writes bn.txt)
# Provenance and licences: docs/corpus.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-build/corpus}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

# python3 parses the catalogues (its gettext module reads .mo files directly).
if ! command -v python3 >/dev/null; then
  SUDO=""; if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3
fi

# Packages carrying Bengali (bn, bn_BD, bn_IN) translations. Missing ones are
# skipped with a note, so the list survives package renames between releases.
PACKAGES=(
  libreoffice-l10n-bn firefox-esr-l10n-bn
  iso-codes libgtk-3-common libgtk2.0-common libglib2.0-data at-spi2-common
  appstream libpam-runtime packagekit python-apt-common shared-mime-info
  software-properties-common xdg-user-dirs libgdk-pixbuf2.0-common
  gnome-control-center-data nautilus-data gedit-common evolution-data-server-common
  gnome-shell-common libgweather-4-common gnome-desktop3-data tzdata-legacy
  coreutils util-linux-locales gettext-base libc-l10n kde-l10n-bn
)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/debs" "$WORK/root"
cd "$WORK/debs"
got=()
for p in "${PACKAGES[@]}"; do
  if apt-get download -qq "$p" >/dev/null 2>&1; then got+=("$p"); else echo "make_corpus_bn: skipping $p (not available)"; fi
done
for d in ./*.deb; do dpkg-deb -x "$d" "$WORK/root"; done
ls ./*.deb | sed 's|^\./||' | sort > "$OUT_DIR/packages.txt"
echo "make_corpus_bn: unpacked ${#got[@]} packages"

python3 - "$WORK/root" "$OUT_DIR/bn.txt" <<'PY'
import gettext, io, os, re, sys, unicodedata, zipfile

root, out_path = sys.argv[1], sys.argv[2]

def bengali_share(s):
    letters = [c for c in s if not c.isspace()]
    if not letters:
        return 0.0
    return sum(1 for c in letters if '\u0980' <= c <= '\u09ff') / len(letters)

# printf/python/Qt/LibreOffice/Fluent placeholders, access keys, markup, entities.
PLACEHOLDER = re.compile(
    r"%(\d+\$)?[-+ #0]*\d*(\.\d+)?(hh|h|ll|l|L|z|j|t)?[diouxXeEfFgGcsSp%]"
    r"|%\([A-Za-z_]+\)[sd]|%[0-9A-Z_]+%?|\$\{[^}]*\}|\{\s*\$?[A-Za-z_.\-]+\s*\}|\{[^{}]*\}"
    r"|\$\w+\$?|#\d+|<[^>]*>|&[a-zA-Z]+;|&#\d+;|~|_(?=\w)|&(?=\w)")
SPACES = re.compile(r"[ \t\u00a0]+")

def clean(s):
    s = s.replace("\\n", "\n").replace("\\t", " ")
    out = []
    for line in s.splitlines():
        line = PLACEHOLDER.sub(" ", line)
        line = SPACES.sub(" ", line).strip(" .:-_|/\\\"'`()[]")
        line = line.strip()
        if len(line) >= 2 and bengali_share(line) >= 0.6:
            out.append(unicodedata.normalize("NFC", line))
    return out

def from_mo(path):
    try:
        with open(path, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog
    except Exception as e:
        print(f"make_corpus_bn: cannot read {path}: {e}", file=sys.stderr)
        return []
    texts = []
    for k, v in cat.items():
        if k == "" or (isinstance(k, tuple) and k[0] == ""):
            continue  # header
        texts.append(v)
    return texts

def from_ftl(text):
    texts = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = re.match(r"^\s*[-\w.]+\s*=\s*(.*)$", line)
        texts.append(m.group(1) if m else line)
    return texts

def from_properties(text):
    texts = []
    for line in text.splitlines():
        if line.lstrip().startswith(("#", "!")):
            continue
        m = re.match(r"^\s*[^=:\s]+\s*[=:]\s*(.*)$", line)
        if m:
            v = m.group(1)
            v = re.sub(r"\\u([0-9a-fA-F]{4})", lambda x: chr(int(x.group(1), 16)), v)
            texts.extend(v.split(";"))
    return texts

def from_xcd(text):
    # LibreOffice registry: <value xml:lang="bn">...</value>
    return [re.sub(r"&lt;|&gt;|&amp;|&quot;|&apos;", " ", m)
            for m in re.findall(r'<value xml:lang="bn[^"]*">(.*?)</value>', text, re.S)]

def is_bn_locale(path):
    return re.search(r"/(bn|bn_BD|bn_IN|bn-BD|bn-IN)/", path) is not None

texts = []
counts = {}
for dirpath, _, files in os.walk(root):
    for name in files:
        path = os.path.join(dirpath, name)
        got = []
        if name.endswith(".mo") and is_bn_locale(path):
            got = from_mo(path)
        elif name.endswith(".xcd") and "bn" in name:
            got = from_xcd(open(path, encoding="utf-8", errors="replace").read())
        elif name.endswith(".xpi"):
            with zipfile.ZipFile(path) as z:
                for member in z.namelist():
                    data = z.read(member).decode("utf-8", errors="replace")
                    if member.endswith(".ftl"):
                        got += from_ftl(data)
                    elif member.endswith(".properties"):
                        got += from_properties(data)
        if got:
            counts[os.path.relpath(path, root)] = len(got)
            texts.extend(got)

seen, lines = set(), []
for t in texts:
    for line in clean(t):
        if line not in seen:
            seen.add(line)
            lines.append(line)
with open(out_path, "w", encoding="utf-8") as f:
    for line in lines:
        f.write(line + "\n")
size = os.path.getsize(out_path)
print(f"make_corpus_bn: {len(counts)} source files, {len(texts)} strings -> "
      f"{len(lines)} unique Bengali lines, {size} bytes in {out_path}")
PY
