package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
)

// UnjoinOptions say how to take a member out.
type UnjoinOptions struct {
	// ClusterID is the member's id; empty reads its ClusterProperty.
	ClusterID string
	// Wait bounds each wait: the controller's pods to go, the broker namespace to be emptied.
	Wait time.Duration
}

// ErrMemberUnreachable is in the error of an Unjoin whose member's API server does not answer: it changed nothing.
// A member whose cluster is gone is taken out from the broker alone, as Evict does.
var ErrMemberUnreachable = errors.New("the member's API server does not answer")

// reachTimeout bounds the question that tells whether the member's API server answers at all.
const reachTimeout = 30 * time.Second

// Unjoin takes the member out of the clusterset: it stops its controller, removes its identity and records from
// the broker as Evict does (other members then withdraw its endpoints), deletes what the controller imported into
// it, puts the cluster's CoreDNS back from the copy join kept (restoreDNS) and removes the blocks join added to
// its DNS, and deletes the controller's own objects; and it prints what it leaves, and why. A member whose API
// server does not answer stops it before anything changes, with ErrMemberUnreachable.
func Unjoin(ctx context.Context, memberCfg *rest.Config, info BrokerInfo, opts UnjoinOptions, out io.Writer) error {
	s := steps{out}
	m, b, err := clients(memberCfg, info)
	if err != nil {
		return err
	}
	// Before anything else: every step but the broker's needs the member, and one that stopped half way would leave
	// the member in the broker's directory with its controller gone.
	if err := s.do("member reachable", func() (string, error) { return memberAnswers(memberCfg) }); err != nil {
		return err
	}
	id := opts.ClusterID
	err = s.do("cluster id", func() (string, error) {
		if id != "" {
			return id + ", as given", clusterid.Validate(id)
		}
		id, err = memberID(ctx, memberCfg)
		return id, err
	})
	if err != nil {
		return err
	}
	// The controller goes first: running, it would publish its records and Lease again.
	err = s.do("controller stopped", func() (string, error) {
		d := &metav1.PartialObjectMetadata{}
		d.SetGroupVersionKind(appsDeployment)
		d.Namespace, d.Name = controllerNamespace, controllerDeployment
		if err := m.Delete(ctx, d); client.IgnoreNotFound(err) != nil {
			return "", err
		}
		return "Deployment deleted, no pod left", waitFor(ctx, opts.Wait, func() error {
			var pods corev1.PodList
			if err := m.List(ctx, &pods, client.InNamespace(controllerNamespace), client.MatchingLabels{"app.kubernetes.io/name": controllerDeployment}); err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d controller pods still run", len(pods.Items))
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if err := evict(ctx, s, b, id, opts.Wait); err != nil {
		return err
	}
	err = s.do("imports in the member", func() (string, error) {
		n, err := deleteImports(ctx, m)
		return fmt.Sprintf("%d objects deleted (ServiceImports, derived Services, imported EndpointSlices)", n), err
	})
	if err != nil {
		return err
	}
	err = s.do("cluster DNS", func() (string, error) {
		kube, err := kubernetes.NewForConfig(memberCfg)
		if err != nil {
			return "", err
		}
		// The restore first: in the replace mode its Corefile must be in place before the original image is.
		restored, err := restoreDNS(ctx, m, kube, opts.Wait)
		if err != nil {
			return "", err
		}
		removed, err := stopForwarding(ctx, m)
		return restored + "; " + removed, err
	})
	if err != nil {
		return err
	}
	err = s.do("controller, policy and standalone DNS", func() (string, error) {
		n := 0
		for _, dir := range []string{"controller", "policy", "dns-standalone"} {
			k, err := deleteRendered(ctx, m, dir, opts.Wait)
			if err != nil {
				return "", err
			}
			n += k
		}
		return fmt.Sprintf("%d objects deleted (namespace %s with its broker Secret and DNS, RBAC, admission policy)", n, controllerNamespace), nil
	})
	if err != nil {
		return err
	}
	exports, err := countExports(ctx, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "left  the mcs-api CRDs, and %d ServiceExports in them: they are your objects; delete the CRDs with `kubectl delete -k build/deploy/crds` to remove both\n", exports)
	fmt.Fprintf(out, "left  the ClusterProperties: the cluster keeps its id %s, so that joining again gives it back its records\n", id)
	var cm corev1.ConfigMap
	err = m.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	if whole, err := ours(cm.Data[corefileKey]); err == nil && whole {
		fmt.Fprintf(out, "left  our CoreDNS serving kube-dns in %s (DNS mode replace), with a Corefile of ours and no copy of an original in ConfigMap %s/%s (joined by a release before backups, or the cluster had no CoreDNS of its own): the cluster's DNS depends on it; put your own CoreDNS image and Corefile back to stop serving clusterset.local\n",
			dnsNamespace, dnsNamespace, DNSBackup)
	}
	return nil
}

// memberAnswers asks the member's API server for its version, which any client may ask: an error that is no answer
// of the API server (refused, timed out, no such host, TLS) is ErrMemberUnreachable.
func memberAnswers(cfg *rest.Config) (string, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = reachTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		if unanswered(err) {
			return "", fmt.Errorf("%w (%s): %w", ErrMemberUnreachable, cfg.Host, err)
		}
		return "", err
	}
	return fmt.Sprintf("%s answers, Kubernetes %s", cfg.Host, v.GitVersion), nil
}

// unanswered says whether err is no answer of an API server, but a failure to reach it: an answer, even a refusal
// (401, 403, 500), is a status.
func unanswered(err error) bool {
	var status apierrors.APIStatus
	return err != nil && !errors.As(err, &status)
}

// appsDeployment is the Deployment kind, deleted by metadata alone.
var appsDeployment = appsv1.SchemeGroupVersion.WithKind("Deployment")

// deleteImports deletes what the member's controller imported: ServiceImports, and the Services and
// EndpointSlices it labels as its own.
func deleteImports(ctx context.Context, c client.Client) (int, error) {
	n := 0
	var services corev1.ServiceList
	if err := c.List(ctx, &services, client.MatchingLabels{names.LabelManagedBy: names.ManagedBy}); err != nil {
		return n, err
	}
	for i := range services.Items {
		if err := c.Delete(ctx, &services.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.MatchingLabels{discoveryv1.LabelManagedBy: names.ManagedBy}); err != nil {
		return n, err
	}
	for i := range slices.Items {
		if err := c.Delete(ctx, &slices.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	imports, err := listServed(ctx, c, "serviceimports.multicluster.x-k8s.io")
	if err != nil {
		return n, err
	}
	for i := range imports {
		if err := c.Delete(ctx, &imports[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// countExports counts the member's ServiceExports.
func countExports(ctx context.Context, c client.Client) (int, error) {
	exports, err := listServed(ctx, c, "serviceexports.multicluster.x-k8s.io")
	return len(exports), err
}

// listServed lists every object of a CRD's kind, at its storage version; none if the CRD is absent.
func listServed(ctx context.Context, c client.Client, crdName string) ([]unstructured.Unstructured, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, &crd); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	for _, v := range crd.Spec.Versions {
		if !v.Storage {
			continue
		}
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(crd.Spec.Group + "/" + v.Name)
		list.SetKind(crd.Spec.Names.ListKind)
		if err := c.List(ctx, list); err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	return nil, fmt.Errorf("CRD %s has no storage version", crdName)
}

// deleteRendered deletes the objects a folder of build/deploy renders, and returns how many it found, as
// deleteObjects does.
func deleteRendered(ctx context.Context, c client.Client, dir string, wait time.Duration) (int, error) {
	objs, err := rendered(dir)
	if err != nil {
		return 0, err
	}
	deleted, err := deleteObjects(ctx, c, objs, wait)
	return len(deleted), err
}

// deleteObjects deletes objs in their order, and returns those it found, as "Kind name"; it waits until the
// namespaces among them are gone with what they held, and the CRDs with the objects of their kinds.
func deleteObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, wait time.Duration) ([]string, error) {
	var deleted []string
	var waits []*unstructured.Unstructured
	for _, o := range objs {
		err := c.Delete(ctx, o)
		// A kind the cluster does not serve has no object: the admission policy before Kubernetes 1.30.
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("deleting %s %s: %w", o.GetKind(), objectName(o), err)
		}
		deleted = append(deleted, o.GetKind()+" "+objectName(o))
		if k := o.GetKind(); k == "Namespace" || k == "CustomResourceDefinition" {
			waits = append(waits, o)
		}
	}
	for _, o := range waits {
		if err := waitGone(ctx, c, o.DeepCopy(), wait); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// waitGone waits until o no longer exists.
func waitGone(ctx context.Context, c client.Client, o client.Object, wait time.Duration) error {
	return waitFor(ctx, wait, func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("%s %s is still there (deleted at %v)", o.GetObjectKind().GroupVersionKind().Kind, objectName(o), o.GetDeletionTimestamp())
		}
		return err
	})
}
