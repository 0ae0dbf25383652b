#!/usr/bin/env bash
# Regenerates the golden logits of the embedded model (datasets/golden/kvcheck-tiny/): for each
# fixed prompt, the reference's float32 logits at every position, [tokens, vocab], as .npy, plus
# a manifest with the prompts, their token ids and the SHA-256 of the weights they belong to.
#
# Regenerate only for an intended change of the forward pass or of the embedded model, and say
# why in the commit. Usage (repository root, after building): datasets/golden/make_golden_kvcheck_tiny.sh [KVCHECK]
set -euo pipefail
cd "$(dirname "$0")/../.."
kvcheck=${1:-build/bin/kvcheck}
model=datasets/models/kvcheck-tiny
out=datasets/golden/kvcheck-tiny
prompts=(
  "The jury said it did find that many of the registration and election laws are outmoded."
  "There is a pass key hidden in the text below. Remember it. The weather was cold that winter. The pass key is 52917. Remember it. 52917 is the pass key. The river froze early. What is the pass key? The pass key is"
  "Below is a list of keys, each followed by its value. Remember them. garden: 4821. window: 7730. market: 1296. Question: what is the value of window? Answer: window:"
)
mkdir -p "$out"
entries=()
for i in "${!prompts[@]}"; do
  ids=$("$kvcheck" generate --model "$model" --prompt "${prompts[$i]}" --max-new-tokens 0 \
        --dump-logits "$out/prompt$i.npy" | sed -n 's/^prompt ids: //p' | tr ' ' ',')
  entries+=("$(printf '{"prompt": %s, "ids": [%s], "logits": "prompt%d.npy"}' \
              "$(printf '%s' "${prompts[$i]}" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" \
              "$ids" "$i")")
done
sha=$(sha256sum "$model/model.safetensors" | cut -d' ' -f1)
{
  echo '{'
  echo '  "format": "kvcheck-golden-logits",'
  echo '  "version": 2,'
  echo '  "model": "datasets/models/kvcheck-tiny",'
  echo "  \"model_safetensors_sha256\": \"$sha\","
  echo '  "nmse_max": 1e-10,'
  echo '  "regenerate": "datasets/golden/make_golden_kvcheck_tiny.sh",'
  echo '  "prompts": ['
  for i in "${!entries[@]}"; do
    sep=','; [[ $i -eq $(( ${#entries[@]} - 1 )) ]] && sep=''
    echo "    ${entries[$i]}$sep"
  done
  echo '  ]'
  echo '}'
} > "$out/manifest.json"
echo "wrote $out/manifest.json and ${#prompts[@]} logits files"
