// Package member holds the kustomize base of one member's identity on the broker (member.yaml) and the overlay
// that applies it for one member.
package member

import (
	"path/filepath"
	"strconv"

	"vksfleet.dev/fleet/mcs/names"
)

// Kustomization is the kustomization.yaml of the overlay that applies this base for one member, as the base's own
// comment tells operators: everything in the member's broker namespace, names suffixed with suffix (unique to the
// member: it keeps the members' ClusterRoleBindings apart), and the base at basePath, which must be relative to
// the overlay's folder (kustomize refuses absolute paths to bases).
func Kustomization(basePath, clusterID, suffix string) string {
	return "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" +
		"namespace: " + strconv.Quote(names.BrokerNamespace(clusterID)) + "\nnameSuffix: " + strconv.Quote(suffix) + "\n" +
		"resources:\n  - " + strconv.Quote(filepath.ToSlash(basePath)) + "\n"
}
