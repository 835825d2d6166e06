#!/usr/bin/env bash
# Builds the pinned Kubernetes and etcd binaries from source into a cache folder keyed by version, and installs
# the Debian tools the tests use. Work already done is skipped, so a warm run takes well under a second.
#
# Usage: bash build/tools.sh [-n] [SET...]: only the sets named (default all, `make tools`, which `make test` needs).
# Each make target asks for the sets it runs (`make tools-core`, ...), so that a first `make demo` builds none of
# the others: helm and the oldest release take nearly as long to build as all the demo runs. -n says what would be
# built and installed, and does nothing.
#   core        a local clusterset with kubelet nodes (make demo, up, conformance and the benchmarks): etcd, and the
#               pinned Kubernetes' kube-apiserver, kube-controller-manager, kubectl, kube-scheduler, kube-proxy and
#               kubelet; the Debian packages the nodes run and the pods' images are made of
#   kustomize   the pinned kustomize (make manifests; build/deploy's and test/e2e/manifests' tests)
#   helm        the pinned helm (build/helm's tests)
#   oldest      the oldest supported release's kube-apiserver and kube-controller-manager, with etcd (test/e2e/oldest)
#   dnsperf     Debian's dnsperf (make bench-dns)
#   haproxy     HAProxy, the load balancer of a highly available broker (make up BROKER=ha, make chaos)
#   prometheus  Debian's Prometheus and promtool (make up MONITORING=1; the tests of metrics and alert rules)
#   all         every set above
#   k8se2e      Kubernetes' e2e.test with its network specs, and agnhost, from the pinned Kubernetes
#               (build/tools/kube-e2e; make conformance-k8s-dns): asked for by name only, not in all, since no test
#               of make test runs them
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=build/apt.sh
. "$root/build/apt.sh"

sets=(core kustomize helm oldest dnsperf haproxy prometheus)
# Sets that all leaves out: only the targets that run them ask for them.
named_sets=(k8se2e)
dry=false
if [ "${1:-}" = -n ]; then
	dry=true
	shift
fi
[ $# -gt 0 ] || set -- all
declare -A want=()
for s in "$@"; do
	if [ "$s" = all ]; then
		for a in "${sets[@]}"; do want[$a]=1; done
	elif [[ " ${sets[*]} ${named_sets[*]} " == *" $s "* ]]; then
		want[$s]=1
	else
		echo "tools: no set $s (one of: ${sets[*]} all ${named_sets[*]})" >&2
		exit 2
	fi
done
# wants SET: whether SET was asked for.
wants() { [ -n "${want[$1]:-}" ]; }

cache=${FLEET_TOOLS_CACHE:-$root/.cache/tools}
kube_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$root/build/tools/kube/go.mod")
etcd_version=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$root/build/tools/etcd/go.mod")
kube_dir=$cache/kubernetes-$kube_version
# The oldest Kubernetes release we support (README, Requirements): only what test/e2e/oldest runs of it.
oldest_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$root/build/tools/kube-oldest/go.mod")
oldest_dir=$cache/kubernetes-$oldest_version
etcd_dir=$cache/etcd-$etcd_version
kustomize_version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/kustomize/kustomize/v5" {print $3}' "$root/build/tools/kustomize/go.mod")
helm_version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" {print $3}' "$root/build/tools/helm/go.mod")

# build DIR MODULE_DIR OUT PKG [FLAG...]: builds PKG in MODULE_DIR into DIR/OUT unless it is already there, built
# with the same FLAGs (DIR/.OUT.flags keeps them: a binary of a cache filled before a flag changed is built again);
# FLAGs go to go build after the default ones (a later -ldflags replaces the default). With go_test=1 in its
# environment, it builds PKG's test binary (go test -c) instead.
build() {
	local dir=$1 moddir=$2 out=$3 pkg=$4
	shift 4
	local flags="$*"
	[ -x "$dir/$out" ] && [ "$(cat "$dir/.$out.flags" 2>/dev/null)" = "$flags" ] && return 0
	if $dry; then
		echo "tools: would build $out into $dir"
		return 0
	fi
	local gocmd=(build)
	[ -z "${go_test:-}" ] || gocmd=(test -c)
	mkdir -p "$dir"
	echo "tools: building $out into $dir (a cold build takes minutes)" >&2
	(cd "$moddir" && CGO_ENABLED=0 go "${gocmd[@]}" -trimpath -ldflags='-s -w' "$@" -o "$dir/$out.tmp" "$pkg")
	mv "$dir/$out.tmp" "$dir/$out"
	printf '%s' "$flags" >"$dir/.$out.flags"
}

# stamp VERSION: the go build flags that make a Kubernetes binary report its release, as the release's own build
# (hack/lib/version.sh) and distributions stamp it, instead of v0.0.0-master+$Format:%H$: nodes, API servers,
# kubectl and e2e.test then say which Kubernetes they are.
stamp() {
	local minor=${1#v1.} x=
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		x+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
	done
	printf '%s\n' -ldflags "-s -w$x"
}

# envtest looks for etcd, kube-apiserver and kubectl in one folder, and the tests find kustomize and helm there
# (clusterset.Tool): `link ASSETS DIR BIN` links the cache's DIR/BIN into its folder ASSETS. The links are relative,
# within the cache, so that they hold wherever the cache is reached from (a git worktree may link to it).
link() {
	$dry && return 0
	mkdir -p "$cache/$1"
	ln -sfn "../$2/$3" "$cache/$1/$3"
}
assets=assets-$kube_version-etcd-$etcd_version
mapfile -t kube_stamp < <(stamp "$kube_version")
# The oldest release's member binaries, with the pinned etcd (etcd 3.6 serves the v3 API that release's clients use).
oldest_assets=assets-$oldest_version-etcd-$etcd_version

if wants core || wants oldest; then
	build "$etcd_dir" "$root/build/tools/etcd" etcd .
fi
if wants core; then
	for b in kube-apiserver kube-controller-manager kubectl kube-scheduler kube-proxy kubelet; do
		build "$kube_dir" "$root/build/tools/kube" "$b" "k8s.io/kubernetes/cmd/$b" "${kube_stamp[@]}"
		link "$assets" "$(basename "$kube_dir")" "$b"
	done
	link "$assets" "$(basename "$etcd_dir")" etcd
fi
if wants kustomize; then
	build "$cache/kustomize-$kustomize_version" "$root/build/tools/kustomize" kustomize sigs.k8s.io/kustomize/kustomize/v5
	link "$assets" "kustomize-$kustomize_version" kustomize
fi
if wants helm; then
	build "$cache/helm-$helm_version" "$root/build/tools/helm" helm helm.sh/helm/v3/cmd/helm
	link "$assets" "helm-$helm_version" helm
fi
# e2e.test holds the specs of k8s.io/kubernetes/test/e2e/network alone (build/tools/kube-e2e/e2e_test.go), DNS's
# among them; agnhost is the program of the image their pods run (test/env/nodeimages). Both from the Kubernetes
# that core builds, stamped with its version, which e2e.test logs; agnhost static, as the image holds no C library.
if wants k8se2e; then
	e2e_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$root/build/tools/kube-e2e/go.mod")
	if [ "$e2e_version" != "$kube_version" ]; then
		echo "tools: build/tools/kube-e2e pins k8s.io/kubernetes $e2e_version and build/tools/kube $kube_version: pin both to one" >&2
		exit 2
	fi
	go_test=1 build "$kube_dir" "$root/build/tools/kube-e2e" e2e.test . "${kube_stamp[@]}"
	build "$kube_dir" "$root/build/tools/kube-e2e" agnhost k8s.io/kubernetes/test/images/agnhost "${kube_stamp[@]}"
	for b in e2e.test agnhost; do
		link "$assets" "$(basename "$kube_dir")" "$b"
	done
fi
if ! $dry && [ -d "$cache/$assets" ]; then
	ln -sfn "$assets" "$cache/current"
fi
# The oldest release's API server and controller manager (a member's); "providerless" leaves out the in-tree cloud
# providers that release still compiles in (Azure, GCE, vSphere: a third of its packages), which neither needs
# here. The version stamped is the one its /version reports, which test/e2e/oldest checks.
if wants oldest; then
	mapfile -t oldest_flags < <(stamp "$oldest_version")
	oldest_flags=(-tags providerless "${oldest_flags[@]}")
	for b in kube-apiserver kube-controller-manager; do
		build "$oldest_dir" "$root/build/tools/kube-oldest" "$b" "k8s.io/kubernetes/cmd/$b" "${oldest_flags[@]}"
		link "$oldest_assets" "$(basename "$oldest_dir")" "$b"
	done
	link "$oldest_assets" "$(basename "$etcd_dir")" etcd
	$dry || ln -sfn "$oldest_assets" "$cache/oldest"
fi

# The Debian packages: with core, dig and nslookup, and what the local clusterset's nodes and pods run (nft for
# kube-proxy, ip and nsenter for namespaces, and the tools test workloads run: sh, socat, OpenBSD nc, curl), and
# what real kubelet nodes run: containerd (1.6, CRI v1, which the pinned kubelet accepts) and ctr to import images,
# runc, the CNI plugins in /usr/lib/cni, and busybox-static for the shell of the test images. The client image and
# the MCS API conformance suite's (test/env/nodeimages.Build), which every fleet with nodes loads, are made of this
# machine's socat, nc.openbsd, BIND's dig, nslookup and host, and curl, with their libraries. The clusterset starts a
# containerd of its own per node, with its own socket, root and state; on a machine with systemd, apt also starts
# Debian's containerd.service, which they neither use nor disturb. HAProxy is the load balancer of a highly
# available broker (clusterset Options.HABroker, `make up BROKER=ha`), as in kubeadm's guide to HA control planes;
# Debian's own haproxy.cfg, which haproxy.service runs on a machine with systemd, binds no port, and the clusterset
# runs one of its own.
missing=()
if wants core; then
	command -v dig >/dev/null && command -v nslookup >/dev/null && command -v host >/dev/null || missing+=(dnsutils)
	command -v nft >/dev/null || missing+=(nftables)
	command -v ip >/dev/null || missing+=(iproute2)
	command -v nsenter >/dev/null || missing+=(util-linux)
	command -v socat >/dev/null || missing+=(socat)
	command -v curl >/dev/null || missing+=(curl)
	command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
	command -v runc >/dev/null || missing+=(runc)
	[ -x /usr/lib/cni/ptp ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
	dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || missing+=(busybox-static)
	case "$(readlink -f "$(command -v nc 2>/dev/null)")" in */nc.openbsd) ;; *) missing+=(netcat-openbsd) ;; esac
fi
if wants dnsperf; then
	command -v dnsperf >/dev/null || missing+=(dnsperf)
fi
if wants haproxy; then
	command -v haproxy >/dev/null || missing+=(haproxy)
fi
if [ ${#missing[@]} -gt 0 ]; then
	if $dry; then
		echo "tools: would install ${missing[*]} (apt)"
	else
		apt_install tools "${missing[@]}"
	fi
fi

# promtool, from Debian's prometheus package, checks the metrics the controller and CoreDNS serve and runs the alert
# rules' unit tests (build/deploy/monitoring); `make up MONITORING=1` runs its prometheus. Without its recommended
# node exporter; on a machine with systemd, apt also starts Debian's prometheus.service, which no test uses.
if wants prometheus && ! command -v promtool >/dev/null; then
	if $dry; then
		echo "tools: would install prometheus (apt, without recommends)"
	else
		apt_install tools --no-install-recommends prometheus
	fi
fi
