#!/usr/bin/env bash
# Builds the coredns and mcs-controller images with a running engine (DOCKER_HOST; `make images` starts a private
# one with build/docker.sh). The binaries are built here with the host's Go, static (CGO_ENABLED=0), stripped and
# path-free, and the Dockerfiles put them FROM scratch: no base image is pulled. Prints each image's size, as the
# engine stores it and compressed as a registry stores it, and saves each as a docker-archive,
# bin/images/<name>.tar, which the local clusterset's kubelet nodes load.
#
# Environment: VERSION, the images' tag and the version linked into their binaries (default: build/images/version.sh,
# `git describe` of the tree, as the Makefile passes it), IMAGE_REPO (default ghcr.io/vksfleet), IMAGE_SOURCE (the
# org.opencontainers.image.source label).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=build/apt.sh
. "$root/build/apt.sh"
version=${VERSION:-$(bash build/images/version.sh)}
repo=${IMAGE_REPO:-ghcr.io/vksfleet}
source=${IMAGE_SOURCE:-https://github.com/vksfleet/fleet}
revision=$(bash build/images/version.sh revision)
if ! [[ $version =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
	echo "images: VERSION $version is not an image tag (letters, digits, _ . -; at most 128)" >&2
	exit 1
fi
docker=/usr/bin/docker
ctx=$root/bin/images

missing=()
command -v setcap >/dev/null || missing+=(libcap2-bin)
if [ ${#missing[@]} -gt 0 ]; then
	apt_install images "${missing[@]}"
fi

# binary IMAGE NAME PKG: a static, stripped binary without local paths in $ctx/IMAGE/NAME, which knows its version
# and revision (mcs_controller_build_info, kubectl mcs version).
binary() {
	mkdir -p "$ctx/$1"
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X vksfleet.dev/fleet/mcs/buildinfo.version=$version -X vksfleet.dev/fleet/mcs/buildinfo.revision=$revision" \
		-o "$ctx/$1/$2" "$3"
}

# image NAME DOCKERFILE: builds $repo/NAME:$version from build/images/DOCKERFILE and the context $ctx/NAME.
image() {
	local name=$1 ref=$repo/$1:$version
	# The classic builder: it needs no BuildKit and applies the extended attributes of an ADDed tar.
	DOCKER_BUILDKIT=0 $docker build -q -f "build/images/$2" -t "$ref" \
		--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source" \
		"$ctx/$name" >/dev/null
	local size packed
	size=$($docker image inspect -f '{{.Size}}' "$ref")
	# The docker-archive the local clusterset's nodes load (no registry reachable): bin/images/NAME.tar.
	$docker save -o "$ctx/$name.tar.tmp" "$ref"
	mv "$ctx/$name.tar.tmp" "$ctx/$name.tar"
	packed=$(gzip -c "$ctx/$name.tar" | wc -c)
	awk -v r="$ref" -v s="$size" -v p="$packed" 'BEGIN { printf "images: %s  %.1f MB, %.1f MB compressed\n", r, s / 1e6, p / 1e6 }'
}

rm -rf "$ctx/mcs-controller" "$ctx/coredns"
binary mcs-controller mcs-controller ./cmd/controller
# kubectl-mcs beside the controller: `kubectl mcs diagnose --in-cluster` runs its DNS probe pod from this image, at
# the plugin's own version (the image has no shell, no sleep and no dig).
binary mcs-controller kubectl-mcs ./cmd/kubectl-mcs
binary coredns coredns ./cmd/coredns
# Port 53 as a non-root user needs CAP_NET_BIND_SERVICE as a file capability, as upstream CoreDNS images have it.
# COPY drops extended attributes, so the binary goes in as a tar that carries the capability, which ADD applies.
setcap cap_net_bind_service=+ep "$ctx/coredns/coredns"
tar --xattrs --xattrs-include=security.capability --owner=0 --group=0 --numeric-owner --mtime=@0 \
	-C "$ctx/coredns" -cf "$ctx/coredns/coredns.tar" coredns
rm "$ctx/coredns/coredns"

image coredns coredns.Dockerfile
image mcs-controller controller.Dockerfile
# The images a rebuild replaced: vfs keeps full copies, so they would pile up under the engine's data-root.
$docker image prune -f >/dev/null
