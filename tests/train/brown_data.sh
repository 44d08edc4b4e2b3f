# Sourced by the Brown tests: brown_document WORK preprocesses the Brown corpus (fetched by
# scripts/fetch-data.sh) into WORK/brown_text_document with the tandem binary in $tandem.
brown_document() {
  local data="${TANDEM_DATA_DIR:-$HOME/.cache/tandem}/brown"
  [ -f "$data/brown.jsonl" ] || { echo "Brown corpus missing: run scripts/fetch-data.sh"; exit 1; }
  "$tandem" preprocess --input "$data/brown.jsonl" --output-prefix "$1/brown" --append-eod >/dev/null
}
