#!/usr/bin/env bash
# Builds the pinned Kubernetes and etcd binaries from source into a cache folder keyed by version, and installs
# the Debian tools the tests use. Work already done is skipped, so a warm run takes well under a second.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=build/apt.sh
. "$root/build/apt.sh"
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

# build DIR MODULE_DIR OUT PKG [FLAG...]: builds PKG in MODULE_DIR into DIR/OUT unless it is already there; FLAGs go
# to go build after the default ones (a later -ldflags replaces the default).
build() {
	local dir=$1 moddir=$2 out=$3 pkg=$4
	shift 4
	[ -x "$dir/$out" ] && return 0
	mkdir -p "$dir"
	echo "tools: building $out into $dir (a cold build takes minutes)" >&2
	(cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' "$@" -o "$dir/$out.tmp" "$pkg")
	mv "$dir/$out.tmp" "$dir/$out"
}

build "$etcd_dir" "$root/build/tools/etcd" etcd .
build "$kube_dir" "$root/build/tools/kube" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build "$kube_dir" "$root/build/tools/kube" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build "$kube_dir" "$root/build/tools/kube" kubectl k8s.io/kubernetes/cmd/kubectl
build "$kube_dir" "$root/build/tools/kube" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build "$kube_dir" "$root/build/tools/kube" kube-proxy k8s.io/kubernetes/cmd/kube-proxy
build "$kube_dir" "$root/build/tools/kube" kubelet k8s.io/kubernetes/cmd/kubelet
build "$cache/kustomize-$kustomize_version" "$root/build/tools/kustomize" kustomize sigs.k8s.io/kustomize/kustomize/v5
build "$cache/helm-$helm_version" "$root/build/tools/helm" helm helm.sh/helm/v3/cmd/helm
# The oldest release's API server and controller manager (a member's); "providerless" leaves out the in-tree cloud
# providers that release still compiles in (Azure, GCE, vSphere: a third of its packages), which neither needs
# here. The version stamped is the one its /version reports, which test/e2e/oldest checks.
version_pkg=k8s.io/component-base/version
oldest_minor=${oldest_version#v1.}
oldest_flags=(-tags providerless -ldflags "-s -w -X $version_pkg.gitVersion=$oldest_version -X $version_pkg.gitMajor=1 -X $version_pkg.gitMinor=${oldest_minor%%.*}")
build "$oldest_dir" "$root/build/tools/kube-oldest" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "${oldest_flags[@]}"
build "$oldest_dir" "$root/build/tools/kube-oldest" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "${oldest_flags[@]}"

# envtest looks for etcd, kube-apiserver and kubectl in one folder: link them together. The links are relative,
# within the cache, so that they hold wherever the cache is reached from (a git worktree may link to it).
assets_name=assets-$kube_version-etcd-$etcd_version
assets=$cache/$assets_name
mkdir -p "$assets"
for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
	ln -sfn "../$(basename "$kube_dir")/$b" "$assets/$b"
done
ln -sfn "../$(basename "$etcd_dir")/etcd" "$assets/etcd"
ln -sfn "../kustomize-$kustomize_version/kustomize" "$assets/kustomize"
ln -sfn "../helm-$helm_version/helm" "$assets/helm"
ln -sfn "$assets_name" "$cache/current"
# The oldest release's member binaries, with the pinned etcd (etcd 3.6 serves the v3 API that release's clients use).
oldest_assets_name=assets-$oldest_version-etcd-$etcd_version
mkdir -p "$cache/$oldest_assets_name"
for b in kube-apiserver kube-controller-manager; do
	ln -sfn "../$(basename "$oldest_dir")/$b" "$cache/$oldest_assets_name/$b"
done
ln -sfn "../$(basename "$etcd_dir")/etcd" "$cache/$oldest_assets_name/etcd"
ln -sfn "$oldest_assets_name" "$cache/oldest"

# The Debian packages the tests use: dig and nslookup, dnsperf, and what the local clusterset's nodes and pods run
# (nft for kube-proxy, ip and nsenter for namespaces, and the tools test workloads run: sh, socat, OpenBSD nc, curl),
# and what real kubelet nodes run: containerd (1.6, CRI v1, which the pinned kubelet accepts) and ctr to import
# images, runc, the CNI plugins in /usr/lib/cni, and busybox-static for the shell of the test images. The images of
# the MCS API conformance suite (test/env/nodeimages.BuildConformance) are made of this machine's socat, nc.openbsd,
# BIND's dig, nslookup and host, and curl, with their libraries. The clusterset starts a containerd of its own per
# node, with its own socket, root and state; on a machine with systemd, apt also starts Debian's containerd.service,
# which they neither use nor disturb. HAProxy is the load balancer of a highly available broker (clusterset
# Options.HABroker, `make up BROKER=ha`), as in kubeadm's guide to HA control planes; Debian's own haproxy.cfg, which
# haproxy.service runs on a machine with systemd, binds no port, and the clusterset runs one of its own.
missing=()
command -v dig >/dev/null && command -v nslookup >/dev/null && command -v host >/dev/null || missing+=(dnsutils)
command -v dnsperf >/dev/null || missing+=(dnsperf)
command -v nft >/dev/null || missing+=(nftables)
command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v socat >/dev/null || missing+=(socat)
command -v curl >/dev/null || missing+=(curl)
command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/ptp ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || missing+=(busybox-static)
command -v haproxy >/dev/null || missing+=(haproxy)
case "$(readlink -f "$(command -v nc 2>/dev/null)")" in */nc.openbsd) ;; *) missing+=(netcat-openbsd) ;; esac
if [ ${#missing[@]} -gt 0 ]; then
	apt_install tools "${missing[@]}"
fi

# promtool, from Debian's prometheus package, checks the metrics the controller and CoreDNS serve and runs the alert
# rules' unit tests (build/deploy/monitoring). Without its recommended node exporter; on a machine with systemd, apt
# also starts Debian's prometheus.service, which no test uses.
if ! command -v promtool >/dev/null; then
	apt_install tools --no-install-recommends prometheus
fi
