#!/usr/bin/env bash
# Runs the README's five-minute tour as a test: every fenced block of README.md whose info string
# is exactly `sh tour`, in order, one command at a time (a line ending in `\` continues it), in a
# fresh temporary directory, with the given kvcheck binary first on PATH. Fails, naming the
# command and its exit status, at the first command that fails; so a README command cannot rot.
#   ci/readme-tour.sh build/bin/kvcheck            (about a minute on 2 cores, embedded model)
# Environment: KVCHECK_README (default: the README.md beside this script's ci/), KEEP_TOUR_DIR=1
# keeps the temporary directory for inspection.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: ci/readme-tour.sh path/to/kvcheck}
[[ -x $bin && ! -d $bin ]] || { echo "readme-tour: $bin is not an executable" >&2; exit 2; }
[[ $(basename "$bin") == kvcheck ]] || { echo "readme-tour: $bin must be named kvcheck (the tour calls it by name)" >&2; exit 2; }
bin_dir=$(cd "$(dirname "$bin")" && pwd)
readme=${KVCHECK_README:-$root/README.md}
[[ -f $readme ]] || { echo "readme-tour: $readme not found" >&2; exit 2; }

# The commands: inside a ```sh tour block, one per line, joining `\` continuations; blank lines
# and comment lines skipped. A block left open is an error, so a typo cannot drop the tour.
list=$(mktemp)
if ! awk '
  /^```sh tour[[:space:]]*$/ { if (in_block) { print "readme-tour: nested block at line " NR > "/dev/stderr"; exit 3 }
                               in_block = 1; blocks++; next }
  in_block && /^```/         { if (cmd != "") { print "readme-tour: block ends inside a continued command at line " NR > "/dev/stderr"; exit 3 }
                               in_block = 0; next }
  in_block {
    line = $0
    if (cmd == "" && (line ~ /^[[:space:]]*$/ || line ~ /^[[:space:]]*#/)) next
    if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", line); cmd = cmd line " "; next }
    print cmd line; cmd = ""
  }
  END { if (in_block) { print "readme-tour: unterminated sh tour block" > "/dev/stderr"; exit 3 }
        if (blocks == 0) { print "readme-tour: no ```sh tour block in the README" > "/dev/stderr"; exit 3 } }
' "$readme" > "$list"; then rm -f "$list"; exit 2; fi
mapfile -t commands < "$list"
rm -f "$list"
(( ${#commands[@]} > 0 )) || { echo "readme-tour: no commands found in $readme" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvcheck-readme-tour.XXXXXX")
if [[ ${KEEP_TOUR_DIR:-0} == 1 ]]; then echo "readme-tour: working in $dir (kept)"; else trap 'rm -rf "$dir"' EXIT; fi
cd "$dir"
export PATH="$bin_dir:$PATH"
echo "readme-tour: ${#commands[@]} commands from $readme, kvcheck = $(command -v kvcheck)"
start=$(date +%s)
i=0
for cmd in "${commands[@]}"; do
  i=$((i + 1))
  echo "readme-tour: [$i/${#commands[@]}] $cmd"
  t0=$(date +%s)
  set +e
  bash -euo pipefail -c "$cmd" > "out.$i.log" 2>&1
  rc=$?
  set -e
  if (( rc != 0 )); then
    echo "readme-tour: FAILED (exit $rc): $cmd" >&2
    echo "readme-tour: last lines of its output:" >&2
    tail -n 30 "out.$i.log" >&2
    exit 1
  fi
  echo "readme-tour:   ok, $(( $(date +%s) - t0 )) s"
done
echo "readme-tour: all ${#commands[@]} commands passed in $(( $(date +%s) - start )) s"
