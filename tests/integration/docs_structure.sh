#!/usr/bin/env bash
# The documentation holds up (issue 35):
#  - every folder under src/ (recursively) is named in docs/architecture.md,
#    as itself (`src/backend` is not named by `src/backend/cpu`);
#  - README.md has at most 250 lines, and still states the two set-up
#    commands (scripts/demo.sh, and scripts/test.sh, which CI's .ci/run runs);
#  - every relative link in README.md and docs/*.md names a file that exists
#    (README's docs/*.md links above all).
# Then the checks are shown to fail: on a copy with an undocumented src/
# folder, a README grown past 250 lines, and a dangling docs/ link.
#   docs_structure.sh [ROOT]      (default: this checkout)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}

# check ROOT: prints one line per problem; exit 1 when there is any.
check() {
  local r=$1 bad=0 d lines page link target
  [ -f "$r/docs/architecture.md" ] || { echo "docs/architecture.md is missing"; return 1; }
  while IFS= read -r d; do
    d=${d#"$r"/}
    # The path, not followed by more path: `src/x`, src/x/, [src/x/](...).
    grep -qE "(^|[^A-Za-z0-9_/.])${d//./\\.}/?([^A-Za-z0-9_/.-]|$)" "$r/docs/architecture.md" ||
      { echo "docs/architecture.md does not name $d"; bad=1; }
  done < <(find "$r/src" -mindepth 1 -type d | sort)
  lines=$(wc -l < "$r/README.md")
  [ "$lines" -le 250 ] || { echo "README.md has $lines lines (at most 250: the rest belongs in docs/)"; bad=1; }
  grep -qE '^scripts/demo\.sh( |$)' "$r/README.md" || { echo "README.md no longer states scripts/demo.sh"; bad=1; }
  grep -qE '^scripts/test\.sh( |$)' "$r/README.md" || { echo "README.md no longer states scripts/test.sh (CI's command)"; bad=1; }
  grep -qE '\]\(docs/architecture\.md\)' "$r/README.md" || { echo "README.md does not link docs/architecture.md"; bad=1; }
  for page in "$r/README.md" "$r"/docs/*.md; do
    # Links outside code blocks: ](target) or ](target#anchor); web links left out.
    while IFS= read -r link; do
      case $link in http:* | https:* | mailto:* | '') continue ;; esac
      target=$(dirname "$page")/$link
      [ -e "$target" ] || { echo "${page#"$r"/}: link to $link: no such file"; bad=1; }
    done < <(awk '/^```/ { f = !f; next } !f' "$page" | grep -oE '\]\([^)#]*' | sed 's/^](//')
  done
  return $bad
}

rc=0
out=$(check "$root") || rc=1
if [ $rc -ne 0 ]; then
  echo "FAIL:"; echo "$out"
  exit 1
fi
echo "ok: every src/ folder named in docs/architecture.md; README.md $(wc -l < "$root/README.md") lines; links resolve"

# The checks can fail: a copy with each of the three planted.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# copy: README.md and docs/ copied, src/ as real folders of links to the
# files, everything else linked, so that the copy passes as the tree does.
copy() {
  rm -rf "$tmp/c"; mkdir -p "$tmp/c"
  cp -r "$root/README.md" "$root/docs" "$tmp/c/"
  cp -rs "$root/src" "$tmp/c/src"
  local e
  for e in "$root"/*; do [ -e "$tmp/c/${e##*/}" ] || ln -s "$e" "$tmp/c/${e##*/}"; done
}
copy
out=$(check "$tmp/c") || { echo "FAIL: the unchanged copy fails: $out"; exit 1; }
copy; mkdir -p "$tmp/c/src/model/moe"
out=$(check "$tmp/c") && { echo "FAIL: an undocumented src/model/moe passed"; exit 1; }
grep -q "does not name src/model/moe" <<<"$out" || { echo "FAIL: src/model/moe not reported: $out"; exit 1; }
copy; seq 300 >> "$tmp/c/README.md"
out=$(check "$tmp/c") && { echo "FAIL: a README of more than 250 lines passed"; exit 1; }
grep -q "README.md has .* lines" <<<"$out" || { echo "FAIL: README length not reported: $out"; exit 1; }
copy; echo "[gone](docs/no-such-page.md)" >> "$tmp/c/README.md"
out=$(check "$tmp/c") && { echo "FAIL: a dangling docs/ link passed"; exit 1; }
grep -q "no-such-page.md: no such file" <<<"$out" || { echo "FAIL: dangling link not reported: $out"; exit 1; }
echo "ok: an undocumented folder, a long README and a dangling link each fail"
