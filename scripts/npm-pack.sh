#!/usr/bin/env bash
# Builds the npm packages from a release archive (scripts/release.sh), in the style of the
# ecosystem's native tools (esbuild, biome): a small `claude-host` package whose bin is a
# JavaScript launcher, and `@claude-host/<os>-<cpu>` carrying this platform's binary, an
# optional dependency of the first that npm installs only on its platform.
#   scripts/npm-pack.sh dist/claude-host-<version>-<target>.tar.gz
# Writes dist/npm/claude-host-<version>.tgz and dist/npm/claude-host-<os>-<cpu>-<version>.tgz.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHIVE="${1:?usage: $0 dist/claude-host-<version>-<target>.tar.gz}"
base="$(basename "${ARCHIVE}" .tar.gz)"
rest="${base#claude-host-}"
VERSION="${rest%%-*}"
TARGET="${rest#*-}"
case "${TARGET}" in
  x86_64-unknown-linux-gnu) OS=linux CPU=x64 ;;
  aarch64-unknown-linux-gnu) OS=linux CPU=arm64 ;;
  x86_64-apple-darwin) OS=darwin CPU=x64 ;;
  aarch64-apple-darwin) OS=darwin CPU=arm64 ;;
  *) echo "no npm platform for ${TARGET}" >&2; exit 1 ;;
esac
PLATFORM="${OS}-${CPU}"

# The archive is the one its checksum names.
(cd "$(dirname "${ARCHIVE}")" && sha256sum --check --quiet "${base}.tar.gz.sha256")

OUT="dist/npm"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "${OUT}"
tar -xzf "${ARCHIVE}" -C "${WORK}"

fill() {
  sed -e "s/@VERSION@/${VERSION}/g" -e "s/@PLATFORM@/${PLATFORM}/g" \
      -e "s/@OS@/${OS}/g" -e "s/@CPU@/${CPU}/g" "$1" > "$2"
}

plat="${WORK}/platform"
mkdir -p "${plat}/bin"
fill packaging/npm/platform/package.json "${plat}/package.json"
cp "${WORK}/${base}/claude-host" "${plat}/bin/claude-host"
chmod 755 "${plat}/bin/claude-host"
cp LICENSE-MIT LICENSE-APACHE "${plat}/"

main="${WORK}/claude-host"
mkdir -p "${main}/bin"
fill packaging/npm/claude-host/package.json "${main}/package.json"
cp packaging/npm/claude-host/bin/claude-host.js "${main}/bin/"
chmod 755 "${main}/bin/claude-host.js"
cp packaging/npm/claude-host/README.md LICENSE-MIT LICENSE-APACHE "${main}/"

(cd "${plat}" && npm pack --silent --pack-destination "${PWD}/../" >/dev/null)
(cd "${main}" && npm pack --silent --pack-destination "${PWD}/../" >/dev/null)
mv "${WORK}/claude-host-${PLATFORM}-${VERSION}.tgz" "${WORK}/claude-host-${VERSION}.tgz" "${OUT}/"
ls -l "${OUT}/claude-host-${VERSION}.tgz" "${OUT}/claude-host-${PLATFORM}-${VERSION}.tgz"
