#!/usr/bin/env bash
# Renders a kvcheck report.html in headless Chromium (Debian package chromium; not a dependency of
# the gate: `apt-get install chromium` first) and writes a PNG screenshot, so that a person or a
# CI artifact shows what the report's plots look like.
#   ./ci/screenshot-report.sh build/reports/report/report.html [report.png [HEIGHT]]
# HEIGHT (pixels, default 4800: the whole quick report) crops the page; the README's
# docs/img/report.png is the top 1250.
set -euo pipefail
html=${1:?usage: ci/screenshot-report.sh REPORT.html [OUT.png]}
png=${2:-${html%.html}.png}
height=${3:-4800}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[[ -n $browser ]] || { echo "ci/screenshot-report.sh: no Chromium found (apt-get install chromium)" >&2; exit 2; }
[[ -f $html ]] || { echo "ci/screenshot-report.sh: $html not found" >&2; exit 2; }
# --no-sandbox: CI containers run as root. The report is self-contained, so no network is needed.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="1280,$height" \
  --screenshot="$(realpath -m "$png")" "file://$(realpath "$html")" >/dev/null 2>&1
[[ -s $png ]] || { echo "ci/screenshot-report.sh: Chromium wrote no screenshot" >&2; exit 1; }
echo "screenshot: $png"
