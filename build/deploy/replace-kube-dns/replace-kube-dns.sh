#!/usr/bin/env bash
# Replaces a cluster's stock CoreDNS (kube-dns) with ours in place, and back, keeping every line of its Corefile.
#
#   replace-kube-dns.sh [--context CONTEXT] install [IMAGE]   default IMAGE: the coredns base's
#   replace-kube-dns.sh [--context CONTEXT] --restore         (or: restore, uninstall)
#
# install keeps the original in the ConfigMap kube-system/coredns-vksfleet-original, in the format kubectl mcs join
# and the Helm chart keep too (keys Corefile, image, replicas, template: the Deployment's pod template as JSON, and
# replaced), once: a copy that is there stays, so that running it again keeps the first original. It applies this
# folder's RBAC, sets the coredns container's image and waits until every pod of the Deployment runs it, and only
# then appends clusterset.server to the Corefile (a server-side apply of that key alone): the stock binary never
# sees a Corefile that loads multicluster, which it could neither reload nor start with.
# --restore goes the other way: the Corefile first (the live one without clusterset.server, so that an edit made
# since stays; the saved original where the live one loads multicluster otherwise), then the Deployment's pod
# template and replicas, waited for, then it deletes the RBAC and the copy.
# It uses kubectl ($KUBECTL, default kubectl) with the current context, or --context; $WAIT bounds each wait
# (default 5m). Needs the stock names: Deployment, ConfigMap and ServiceAccount coredns in kube-system, the container
# named coredns, a server block on port 53.
set -euo pipefail

dir=$(cd "$(dirname "$0")" && pwd)
kubectl=${KUBECTL:-kubectl}
wait=${WAIT:-5m}
ns=kube-system
backup=coredns-vksfleet-original
manager=vksfleet-replace-kube-dns
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

usage() {
	sed -n '2,18p' "$0" >&2
	exit 2
}

ctx=()
if [ "${1:-}" = --context ]; then
	[ -n "${2:-}" ] || usage
	ctx=(--context "$2")
	shift 2
fi

# ${ctx[@]+...}: an empty array is unset to bash before 4.4 (macOS's), which set -u refuses.
kc() { $kubectl ${ctx[@]+"${ctx[@]}"} "$@"; }
k() { kc -n "$ns" "$@"; }
fail() {
	echo "replace-kube-dns: $*" >&2
	exit 1
}

# set_corefile FILE: makes FILE the ConfigMap's Corefile, changing no other field (server-side apply of that key).
set_corefile() {
	k create configmap coredns --from-file=Corefile="$1" --dry-run=client -o yaml |
		k apply --server-side --force-conflicts --field-manager="$manager" -f - >/dev/null
}

# without_block: stdin without the lines from "# BEGIN vksfleet multicluster" to "# END vksfleet multicluster", both
# included; a begin with no end keeps everything, as kubectl mcs does (its owner edited it).
without_block() {
	awk '
		!held && /^# BEGIN vksfleet multicluster/ { held = 1; buf = $0 ORS; next }
		held { buf = buf $0 ORS; if (/^# END vksfleet multicluster/) { held = 0; buf = "" }; next }
		{ print }
		END { if (held) printf "%s", buf }'
}

# loads_multicluster FILE: whether a line of FILE, comments aside, names the multicluster plugin.
loads_multicluster() {
	sed 's/#.*//' "$1" | grep -Eq '(^|[[:space:]])multicluster([[:space:]{]|$)'
}

# rolled_out IMAGE: waits until the Deployment has rolled out and no pod of it runs another image in its coredns
# container, terminating ones included (for at most five minutes more).
rolled_out() {
	k rollout status deployment/coredns --timeout="$wait" >/dev/null
	local deadline=$((SECONDS + 300)) images
	while :; do
		images=$(k get pods -l k8s-app=kube-dns -o jsonpath='{range .items[*]}{.spec.containers[?(@.name=="coredns")].image}{"\n"}{end}')
		grep -v -x -F -e "$1" -e '' <<<"$images" >/dev/null || return 0
		[ "$SECONDS" -lt "$deadline" ] || fail "pods of deployment/coredns still run another image than $1"
		sleep 1
	done
}

case "${1:-}" in
install)
	image=${2:-}
	if [ -z "$image" ]; then
		# The coredns base's newName and newTag, the image `kubectl apply -k build/deploy/coredns` runs.
		image=$(awk '{ gsub(/["\047]/, "", $2) } $1 == "newName:" { name = $2 } $1 == "newTag:" { tag = $2 } END { if (name != "" && tag != "") print name ":" tag }' \
			"$dir/../coredns/kustomization.yaml")
		[ -n "$image" ] || fail "no image in $dir/../coredns/kustomization.yaml: give one"
	fi
	if k get configmap "$backup" >/dev/null 2>&1; then
		k patch configmap "$backup" --type merge -p '{"data":{"replaced":"true"}}' >/dev/null
	else
		k get configmap coredns -o jsonpath='{.data.Corefile}' | without_block >"$tmp/Corefile"
		! loads_multicluster "$tmp/Corefile" || fail "the Corefile loads multicluster already, and no original is kept in $ns/$backup"
		old=$(k get deployment coredns -o jsonpath='{.spec.template.spec.containers[?(@.name=="coredns")].image}')
		[ -n "$old" ] || fail "deployment $ns/coredns has no container named coredns"
		k get deployment coredns -o jsonpath='{.spec.template}' >"$tmp/template"
		k create configmap "$backup" --from-file=Corefile="$tmp/Corefile" --from-file=template="$tmp/template" \
			--from-literal=image="$old" --from-literal=replicas="$(k get deployment coredns -o jsonpath='{.spec.replicas}')" \
			--from-literal=replaced=true >/dev/null
	fi
	kc apply --server-side --field-manager="$manager" -k "$dir" >/dev/null
	# Our image first, on every replica: it reads the Corefile as it is, and the one that follows.
	k set image deployment/coredns coredns="$image" >/dev/null
	rolled_out "$image"
	k get configmap coredns -o jsonpath='{.data.Corefile}' | without_block >"$tmp/Corefile"
	if loads_multicluster "$tmp/Corefile"; then
		cp "$tmp/Corefile" "$tmp/new"
	else
		# The Corefile, a newline if it lacks one, then the block.
		{ cat "$tmp/Corefile"; [ -z "$(tail -c1 "$tmp/Corefile")" ] || echo; cat "$dir/clusterset.server"; } >"$tmp/new"
	fi
	set_corefile "$tmp/new"
	echo "replace-kube-dns: every replica runs $image, and the Corefile serves clusterset.local (once each reloads it); the original is kept in $ns/$backup"
	;;
--restore | restore | uninstall)
	k get configmap "$backup" >/dev/null || fail "no $ns/$backup, nothing to restore"
	k get configmap coredns -o jsonpath='{.data.Corefile}' >"$tmp/live"
	without_block <"$tmp/live" >"$tmp/Corefile"
	if loads_multicluster "$tmp/Corefile"; then
		k get configmap "$backup" -o jsonpath='{.data.Corefile}' >"$tmp/Corefile"
	fi
	cmp -s "$tmp/Corefile" "$tmp/live" || set_corefile "$tmp/Corefile"
	# The Corefile first: the original image's pods must start with a Corefile they can read.
	if [ "$(k get configmap "$backup" -o jsonpath='{.data.replaced}')" = true ]; then
		template=$(k get configmap "$backup" -o jsonpath='{.data.template}')
		replicas=$(k get configmap "$backup" -o jsonpath='{.data.replicas}')
		if [ -n "$template" ]; then
			k patch deployment coredns --type json -p "[{\"op\":\"replace\",\"path\":\"/spec/template\",\"value\":$template}]" >/dev/null
		else
			k set image deployment/coredns coredns="$(k get configmap "$backup" -o jsonpath='{.data.image}')" >/dev/null
		fi
		[ -z "$replicas" ] || k scale deployment/coredns --replicas="$replicas" >/dev/null
		k rollout status deployment/coredns --timeout="$wait" >/dev/null
	fi
	kc delete --ignore-not-found -k "$dir" >/dev/null
	k delete configmap "$backup" >/dev/null
	echo "replace-kube-dns: restored the Corefile and the Deployment kept in $ns/$backup, and deleted it"
	;;
*)
	usage
	;;
esac
