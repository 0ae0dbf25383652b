#!/usr/bin/env bash
# Checks commit messages against the convention in CONTRIBUTING.md:
#   area: imperative summary        (at most 72 characters; area in lower case, e.g. "cli", "docs")
#   <blank line>
#   wrapped body: why, what, which tests hold it, the numbers
#
#   ci/check-commits.sh               every non-merge commit after ci/commit-convention-start
#   ci/check-commits.sh RANGE         the commits of a git revision range, e.g. origin/main..HEAD
#   ci/check-commits.sh --self-test   checks itself on a throwaway repository
#
# Exit 0 when every commit passes, 1 naming each commit that does not, 77 (ctest's skip code) when
# the tree is not a git checkout. Commits up to the recorded start predate the convention.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
max_subject=72
area_pattern='^[a-z0-9][a-z0-9_./+-]*(, ?[a-z0-9][a-z0-9_./+-]*)*: [^ ]'

check_range() {
  local range=$1 bad=0 count=0 hash subject second commits
  commits=$(git rev-list --no-merges "$range") || {
    echo "ci/check-commits.sh: cannot list the commits of $range"
    return 2
  }
  for hash in $commits; do
    count=$((count + 1))
    subject=$(git log -1 --format=%s "$hash")
    second=$(git log -1 --format=%B "$hash" | sed -n 2p)
    if ((${#subject} > max_subject)); then
      echo "ci/check-commits.sh: $hash: subject is ${#subject} characters (at most $max_subject): $subject"
      bad=1
    fi
    if ! grep -qE "$area_pattern" <<<"$subject"; then
      echo "ci/check-commits.sh: $hash: subject is not 'area: imperative summary': $subject"
      bad=1
    fi
    if [[ -n $second ]]; then
      echo "ci/check-commits.sh: $hash: the second line must be blank (subject, blank line, body)"
      bad=1
    fi
  done
  if ((bad)); then
    echo "ci/check-commits.sh: see CONTRIBUTING.md (Commits); fix with git rebase -i / git commit --amend"
    return 1
  fi
  echo "ci/check-commits.sh: $count commits in $range follow the convention"
}

self_test() {
  local repo
  repo=$(mktemp -d)
  trap 'rm -rf "$repo"' RETURN
  (
    cd "$repo"
    git init -q
    git -c user.name=t -c user.email=t@t commit -q --allow-empty -m "a subject written before the convention existed, far longer than seventy-two characters"
    start=$(git rev-parse HEAD)
    git -c user.name=t -c user.email=t@t commit -q --allow-empty -F - <<<$'cli: add a flag\n\nWhy and what.'
    check_range "$start..HEAD" >/dev/null || { echo "self-test: a good commit was rejected"; exit 1; }
    git -c user.name=t -c user.email=t@t commit -q --allow-empty -m "cli: $(printf 'x%.0s' {1..68})"
    if check_range "$start..HEAD" >/dev/null; then echo "self-test: a 73-character subject passed"; exit 1; fi
    git reset -q --hard HEAD~1
    git -c user.name=t -c user.email=t@t commit -q --allow-empty -m "Add a flag without an area"
    if check_range "$start..HEAD" >/dev/null; then echo "self-test: a subject without an area passed"; exit 1; fi
    git reset -q --hard HEAD~1
    git -c user.name=t -c user.email=t@t commit -q --allow-empty -F - <<<$'cli: add a flag\nbody with no blank line'
    if check_range "$start..HEAD" >/dev/null; then echo "self-test: a body without a blank line passed"; exit 1; fi
    # A shallow clone without the start: HEAD alone is checked, and a bad HEAD still fails.
    git clone -q --depth 1 "file://$repo" "$repo/shallow"
    cd "$repo/shallow"
    if check_range "HEAD^!" >/dev/null; then echo "self-test: a bad HEAD in a shallow clone passed"; exit 1; fi
  )
  echo "ci/check-commits.sh: self-test passed"
}

if [[ ${1:-} == --self-test ]]; then
  self_test
  exit
fi
cd "$here/.."
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "ci/check-commits.sh: not a git checkout; skipped"
  exit 77
fi
if [[ $# -gt 0 ]]; then
  check_range "$1"
  exit
fi
start=$(grep -v '^#' "$here/commit-convention-start" | head -1)
if ! git cat-file -e "$start^{commit}" 2>/dev/null; then
  # A shallow clone without the start: check what history there is.
  echo "ci/check-commits.sh: start $start not in this clone's history (shallow?); checking HEAD only"
  check_range "HEAD^!"
  exit
fi
check_range "$start..HEAD"
