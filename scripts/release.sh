#!/usr/bin/env bash
# Builds the distribution binary (`--profile dist`: fat LTO, one codegen unit; every optional
# part: `--features full`) and its archive:
#   dist/claude-host-<version>-<target>.tar.gz and .tar.gz.sha256
# holding the binary, its man page and shell completions, README and licenses; then the npm
# packages from that archive (scripts/npm-pack.sh). The build is the slow part (several minutes
# on two cores); run again with nothing changed, cargo reuses it.
#   scripts/release.sh [--no-npm]
set -euo pipefail
cd "$(dirname "$0")/.."

NPM=1
for a in "$@"; do
  case "$a" in
    --no-npm) NPM=0 ;;
    *) echo "usage: $0 [--no-npm]" >&2; exit 2 ;;
  esac
done

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
TARGET="$(rustc -vV | sed -n 's/^host: //p')"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
OUT="dist"
NAME="claude-host-${VERSION}-${TARGET}"

# CLAUDE_HOST_RELEASE_BINARY packages a binary built already (CI packages its test build's,
# which tests the packaging, not the optimizer, and saves a fat-LTO build of many minutes).
if [ -n "${CLAUDE_HOST_RELEASE_BINARY:-}" ]; then
  BIN="${CLAUDE_HOST_RELEASE_BINARY}"
  echo "Packaging ${BIN} as claude-host ${VERSION} for ${TARGET} (not built here)"
else
  echo "Building claude-host ${VERSION} for ${TARGET} (profile dist)"
  started=$(date +%s)
  cargo build --locked --profile dist -p claude-host --features full
  echo "built in $(( $(date +%s) - started )) s"
  BIN="${TARGET_DIR}/dist/claude-host"
fi
"${BIN}" --version | grep -qx "claude-host ${VERSION}" \
  || { echo "${BIN} does not report version ${VERSION}" >&2; exit 1; }

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "${STAGE}/${NAME}/completions" "${OUT}"
cp "${BIN}" "${STAGE}/${NAME}/claude-host"
cp README.md LICENSE-MIT LICENSE-APACHE "${STAGE}/${NAME}/"
mkdir -p "${STAGE}/${NAME}/man"
"${BIN}" man > "${STAGE}/${NAME}/man/claude-host.1"
for sub in $("${BIN}" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z-]*\) .*/\1/p' | grep -vx help); do
  "${BIN}" man "${sub}" > "${STAGE}/${NAME}/man/claude-host-${sub}.1"
done
"${BIN}" completions bash > "${STAGE}/${NAME}/completions/claude-host.bash"
"${BIN}" completions zsh > "${STAGE}/${NAME}/completions/_claude-host"
"${BIN}" completions fish > "${STAGE}/${NAME}/completions/claude-host.fish"

# Reproducible: sorted entries, fixed owner and times (the last commit's), no gzip timestamp.
MTIME="$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="${MTIME}" \
  -C "${STAGE}" -cf - "${NAME}" | gzip -n -9 > "${OUT}/${NAME}.tar.gz"
(cd "${OUT}" && sha256sum "${NAME}.tar.gz" > "${NAME}.tar.gz.sha256")
echo "${OUT}/${NAME}.tar.gz ($(du -h "${OUT}/${NAME}.tar.gz" | cut -f1); binary $(du -h "${BIN}" | cut -f1))"
cat "${OUT}/${NAME}.tar.gz.sha256"

if [ "${NPM}" = 1 ]; then
  ./scripts/npm-pack.sh "${OUT}/${NAME}.tar.gz"
fi
