#!/usr/bin/env bash
# The version of this tree's build, which mkimage (through build.sh) tags our images with and which it and the
# Makefile link into every binary (vksfleet.dev/fleet/mcs/buildinfo.version, which kubectl mcs join installs the
# images of).
#
#   build/images/version.sh            the version: `git describe --tags --always --dirty` of the work tree: the last
#                                      version tag (v*) and, after it, the commits since and the commit
#                                      (v0.2.0-3-gb35ea41); the commit alone before any tag; -dirty when tracked
#                                      files have changes. "dev" outside a git work tree (a source archive).
#   build/images/version.sh revision   the full commit, with -dirty likewise; "unknown" outside a git work tree.
set -euo pipefail

cd "$(dirname "$0")/../.."
case "${1:-version}" in
version)
	git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev
	;;
revision)
	if ! commit=$(git rev-parse HEAD 2>/dev/null); then
		echo unknown
	elif [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
		echo "$commit-dirty"
	else
		echo "$commit"
	fi
	;;
*)
	echo "usage: $0 [version|revision]" >&2
	exit 2
	;;
esac
