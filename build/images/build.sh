#!/usr/bin/env bash
# Builds the coredns and mcs-controller images (for linux/amd64 and linux/arm64 unless IMAGE_PLATFORMS says which;
# `make images` builds the host's unless told) with build/images/mkimage, without
# a container engine and without root: bin/images/oci/<name>/, an OCI image layout holding each image's
# multi-platform index, for a registry, and bin/images/<name>.tar, the docker-archive of the host's platform, which
# the local clusterset's kubelet nodes import. Prints each image's size per platform, unpacked and compressed as a
# registry stores it.
#
# Environment: VERSION, the images' tag and the version linked into their binaries (default: build/images/version.sh,
# `git describe` of the tree, as the Makefile passes it), IMAGE_REPO (default ghcr.io/vksfleet), IMAGE_SOURCE (the
# org.opencontainers.image.source label), IMAGE_PLATFORMS (comma-separated, the host's among them), DOCKER_HOST: when set, the archives are also loaded into that engine
# (test/e2e/install runs the images in the private one of build/docker.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
args=(-out bin/images -version "${VERSION:-$(bash build/images/version.sh)}" -revision "$(bash build/images/version.sh revision)")
if [ -n "${IMAGE_REPO:-}" ]; then args+=(-repo "$IMAGE_REPO"); fi
if [ -n "${IMAGE_SOURCE:-}" ]; then args+=(-source "$IMAGE_SOURCE"); fi
if [ -n "${IMAGE_PLATFORMS:-}" ]; then args+=(-platforms "$IMAGE_PLATFORMS"); fi
go run ./build/images/mkimage "${args[@]}"

if [ -n "${DOCKER_HOST:-}" ]; then
	# The docker.io client, which matches build/docker.sh's engine, whatever else `docker` in $PATH is.
	docker=/usr/bin/docker
	if ! [ -x $docker ] || ! $docker version >/dev/null 2>&1; then
		echo "images: not loaded into DOCKER_HOST=$DOCKER_HOST: no engine answers there"
		exit 0
	fi
	for name in coredns mcs-controller; do
		$docker load -q -i "bin/images/$name.tar" >/dev/null
	done
	# The images a rebuild replaced: vfs keeps full copies, so they would pile up under the engine's data-root.
	$docker image prune -f >/dev/null
fi
