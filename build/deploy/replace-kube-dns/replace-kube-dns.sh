#!/usr/bin/env bash
# Replaces a cluster's stock kube-dns CoreDNS with ours in place, and back.
#
#   replace-kube-dns.sh install [IMAGE]   default IMAGE: the coredns base's (build/deploy/coredns/kustomization.yaml)
#   replace-kube-dns.sh uninstall
#
# install keeps a copy of the Corefile and the image in the ConfigMap kube-system/coredns-vksfleet-original (once:
# a second install keeps the first copy), applies this folder's RBAC (kubectl apply -k), sets the ConfigMap's
# Corefile to the original followed by clusterset.server, and sets the coredns container's image. Every line of the
# original Corefile stays as it was. uninstall puts the copied Corefile and image back, deletes the RBAC and the
# copy. It uses kubectl with the current context ($KUBECTL, default kubectl). Needs the stock names: Deployment,
# ConfigMap and ServiceAccount coredns in kube-system, the container named coredns, a server block on port 53.
set -euo pipefail

dir=$(cd "$(dirname "$0")" && pwd)
kubectl=${KUBECTL:-kubectl}
ns=kube-system
backup=coredns-vksfleet-original
manager=vksfleet-replace-kube-dns
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

k() { $kubectl -n "$ns" "$@"; }

# set_corefile FILE: makes FILE the ConfigMap's Corefile, changing no other field (server-side apply of that key).
set_corefile() {
	k create configmap coredns --from-file=Corefile="$1" --dry-run=client -o yaml |
		k apply --server-side --force-conflicts --field-manager="$manager" -f - >/dev/null
}

case "${1:-}" in
install)
	image=${2:-}
	if [ -z "$image" ]; then
		# The coredns base's newName and newTag, the image `kubectl apply -k build/deploy/coredns` runs.
		image=$(awk '{ gsub(/["\047]/, "", $2) } $1 == "newName:" { name = $2 } $1 == "newTag:" { tag = $2 } END { if (name != "" && tag != "") print name ":" tag }' \
			"$dir/../coredns/kustomization.yaml")
		[ -n "$image" ] || { echo "replace-kube-dns: no image in $dir/../coredns/kustomization.yaml: give one" >&2; exit 1; }
	fi
	if ! k get configmap "$backup" >/dev/null 2>&1; then
		k get configmap coredns -o jsonpath='{.data.Corefile}' >"$tmp/Corefile"
		old=$(k get deployment coredns -o jsonpath='{.spec.template.spec.containers[?(@.name=="coredns")].image}')
		[ -n "$old" ] || { echo "replace-kube-dns: deployment $ns/coredns has no container named coredns" >&2; exit 1; }
		k create configmap "$backup" --from-file=Corefile="$tmp/Corefile" --from-literal=image="$old" >/dev/null
	fi
	if grep -q '^# BEGIN vksfleet multicluster' <(k get configmap "$backup" -o jsonpath='{.data.Corefile}'); then
		echo "replace-kube-dns: the saved Corefile already has the multicluster block" >&2
		exit 1
	fi
	$kubectl apply --server-side --field-manager="$manager" -k "$dir" >/dev/null
	k get configmap "$backup" -o jsonpath='{.data.Corefile}' >"$tmp/Corefile"
	# The original, a newline if it lacks one, then the block.
	{ cat "$tmp/Corefile"; [ -z "$(tail -c1 "$tmp/Corefile")" ] || echo; cat "$dir/clusterset.server"; } >"$tmp/new"
	set_corefile "$tmp/new"
	k set image deployment/coredns coredns="$image" >/dev/null
	echo "replace-kube-dns: installed $image; the original is kept in $ns/$backup"
	;;
uninstall)
	k get configmap "$backup" >/dev/null || { echo "replace-kube-dns: no $ns/$backup, nothing to restore" >&2; exit 1; }
	k get configmap "$backup" -o jsonpath='{.data.Corefile}' >"$tmp/Corefile"
	set_corefile "$tmp/Corefile"
	k set image deployment/coredns coredns="$(k get configmap "$backup" -o jsonpath='{.data.image}')" >/dev/null
	$kubectl delete --ignore-not-found -k "$dir" >/dev/null
	k delete configmap "$backup" >/dev/null
	echo "replace-kube-dns: restored the original Corefile and image"
	;;
*)
	sed -n '2,13p' "$0" >&2
	exit 2
	;;
esac
