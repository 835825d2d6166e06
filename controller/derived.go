package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/controller/apply"
	"vksfleet.dev/fleet/mcs/names"
)

// applyDerived makes the derived Service match want (nil: none) and returns it as stored.
func (r *reconciler) applyDerived(ctx context.Context, got, want *corev1.Service) (*corev1.Service, error) {
	switch {
	case want == nil:
		if got != nil && isOurs(got) {
			return nil, apply.Delete(ctx, r.local, got)
		}
		return nil, nil
	case got == nil:
		// Nothing stored to judge: apply.Service creates it.
	case !isOurs(got):
		// A Service of the user's has the derived name: taking it over would change what its own clients reach.
		return nil, fmt.Errorf("derived Service %s/%s: a Service of that name exists without the label %s=%s, and is left alone; rename or delete it",
			got.Namespace, got.Name, names.LabelManagedBy, names.ManagedBy)
	case len(got.Spec.IPFamilies) == 0 || got.Spec.IPFamilies[0] != want.Spec.IPFamilies[0]:
		// The primary family of a Service is immutable: the VIP changes, which only a change of the exports' common
		// families causes. The delete's event brings the service back, and that reconcile creates the new one; until
		// then the import has no IPs and is not Ready.
		r.log.Info("derived Service changes its primary IP family: recreating it", "service", client.ObjectKeyFromObject(got),
			"from", got.Spec.IPFamilies, "to", want.Spec.IPFamilies)
		return nil, apply.Delete(ctx, r.local, got)
	}
	return apply.Service(ctx, r.local, "derived Service", got, want, func(upd, want *corev1.Service) {
		upd.Spec.Ports, upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = want.Spec.Ports, want.Spec.SessionAffinity, want.Spec.SessionAffinityConfig
		upd.Spec.IPFamilyPolicy, upd.Spec.IPFamilies = want.Spec.IPFamilyPolicy, want.Spec.IPFamilies
		if len(want.Spec.IPFamilies) == 1 && len(upd.Spec.ClusterIPs) > 1 {
			upd.Spec.ClusterIPs = upd.Spec.ClusterIPs[:1]
		}
	})
}

func isOurs(obj client.Object) bool { return obj.GetLabels()[names.LabelManagedBy] == names.ManagedBy }
