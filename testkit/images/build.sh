#!/usr/bin/env bash
# `bun run test:images`: builds the images TEST_SERVICES=docker runs on where no image registry
# is reachable, from Debian packages alone:
#   1. a base: a debootstrap (minbase) of this machine's Debian release from its mirror,
#      imported with `docker import`;
#   2. Postgres 15 and Mosquitto 2 on it (testkit/images/postgres, testkit/images/mosquitto),
#      keeping the official images' conventions the kit relies on.
# Each image carries a label with a hash of what it was built from; an image already there with
# the same hash is reused, so a second run builds nothing. The last two lines are the settings
# that select them: TEST_POSTGRES_IMAGE=... and TEST_MQTT_IMAGE=...
# Needs a Docker engine, and debootstrap for the base (installed from apt when missing, as root).
set -euo pipefail
cd "$(dirname "$0")"

REPO=charges-outbox-test
LABEL=org.charges-outbox.inputs

. /etc/os-release
release="${DEBIAN_RELEASE:-${VERSION_CODENAME:-bookworm}}"
# The mirror apt uses here (deb822 or one-line sources), else Debian's CDN.
mirror="${DEBIAN_MIRROR:-$(grep -hoE '(URIs:|^deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -oE 'https?://[^ ]+' | head -1 || true)}"
mirror="${mirror:-http://deb.debian.org/debian}"

if ! docker info >/dev/null 2>&1; then
  echo "test:images: no Docker engine answers (start dockerd, or set DOCKER_HOST)" >&2
  exit 1
fi

hash_of() { sha256sum | cut -c1-16; }
label_of() { docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null || true; }

# The base. Its hash names the release, the mirror and the variant (minbase: nothing added).
base="$REPO/debian:$release"
base_inputs=$(printf '%s\n' "$release" "$mirror" "minbase" | hash_of)
if [ "$(label_of "$base")" = "$base_inputs" ]; then
  echo "test:images: $base present, reused"
else
  command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || {
    echo "test:images: installing debootstrap from apt"
    { apt-get update && apt-get install -y debootstrap; } >/dev/null 2>&1 || { echo "test:images: could not install debootstrap" >&2; exit 1; }
  }
  echo "test:images: building $base (debootstrap $release from $mirror)"
  t0=$SECONDS
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  PATH="$PATH:/usr/sbin" debootstrap --variant=minbase "$release" "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2; echo "test:images: debootstrap failed" >&2; exit 1; }
  # apt inside the images sees the same release, its updates and security fixes.
  cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $release main
deb $mirror $release-updates main
deb ${mirror%/debian*}/debian-security $release-security main
SOURCES
  # Smaller layers: no apt caches, no docs or man pages in what is installed later.
  printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' >"$root/etc/dpkg/dpkg.cfg.d/01-nodoc"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import --change "LABEL $LABEL=$base_inputs" --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$root" "$root.log"; trap - EXIT
  echo "test:images: $base built in $((SECONDS - t0)) s"
fi
base_id=$(docker image inspect --format '{{.Id}}' "$base")

build() { # $1 = folder, $2 = tag: rebuilt when its files or the base changed
  local inputs t0
  inputs=$( (echo "$base_id"; find "$1" -type f -print0 | sort -z | xargs -0 sha256sum) | hash_of)
  if [ "$(label_of "$2")" = "$inputs" ]; then
    echo "test:images: $2 present, reused"
    return
  fi
  echo "test:images: building $2"
  t0=$SECONDS
  local log
  log=$(mktemp)
  # The classic builder: the one every engine has (docker.io 20.10 has no buildx).
  DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$base" --label "$LABEL=$inputs" -t "$2" "$1" >"$log" 2>&1 || {
    tail -20 "$log" >&2; rm -f "$log"; echo "test:images: building $2 failed" >&2; exit 1; }
  rm -f "$log"
  echo "test:images: $2 built in $((SECONDS - t0)) s"
}
build postgres "$REPO/postgres:15"
build mosquitto "$REPO/mosquitto:2"

echo "TEST_POSTGRES_IMAGE=$REPO/postgres:15"
echo "TEST_MQTT_IMAGE=$REPO/mosquitto:2"
