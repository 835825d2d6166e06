package install

import (
	"context"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/build/deploy"
)

// replaceBlock is the server block with which our CoreDNS, in place of the cluster's, serves clusterset.local from
// the cluster's own Corefile: join --dns replace, the chart's hooks and replace-kube-dns.sh all append this file.
// A block of its own rather than an edit of the cluster's server blocks: every line of theirs stays, and removing
// it between the markers gives their Corefile back.
const replaceBlock = "replace-kube-dns/clusterset.server"

// baseCorefile applies the replace base's ConfigMap coredns (Corefile.example) where the cluster has no Corefile
// of its own: none at all, or one that is ours whole, which an earlier release wrote and this one's replaces. A
// Corefile of the cluster's own stays as it is: serve adds our block to it once our image runs. It says which.
func baseCorefile(ctx context.Context, c client.Client) (string, error) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	if corefile, found := cm.Data[corefileKey]; err == nil && found {
		whole, err := ours(corefile)
		if err != nil {
			return "", fmt.Errorf("ConfigMap %s/%s: %w", dnsNamespace, coreDNSConfigMap, err)
		}
		if !whole {
			return "the cluster's own Corefile stays; the " + zone + " block is added once our image runs on every replica", nil
		}
	}
	obj, err := baseCorefileObject()
	if err != nil {
		return "", err
	}
	if err := apply(ctx, c, []*unstructured.Unstructured{obj}); err != nil {
		return "", err
	}
	applied := "applied"
	if w, ok := c.(*writer); ok {
		applied = w.plan.applied()
	}
	return applied + " the replace base's Corefile: the cluster has none of its own", nil
}

// baseCorefileObject is the replace base's ConfigMap coredns.
func baseCorefileObject() (*unstructured.Unstructured, error) {
	objs, err := rendered("coredns")
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if isCorefileConfigMap(o) {
			return o, nil
		}
	}
	return nil, fmt.Errorf("build/deploy/coredns holds no ConfigMap %s/%s", dnsNamespace, coreDNSConfigMap)
}

// isCorefileConfigMap says whether o is the ConfigMap kube-system/coredns, which the replace mode leaves to
// baseCorefile and addZone rather than apply with the rest of its base.
func isCorefileConfigMap(o *unstructured.Unstructured) bool {
	return o.GetKind() == "ConfigMap" && o.GetNamespace() == dnsNamespace && o.GetName() == coreDNSConfigMap
}

// addZone adds replaceBlock to the cluster's own Corefile, and says what it did and whether that changed it. A
// Corefile ours whole serves the zone already: it only loses a block of ours, such as the standalone mode's
// forward, which would take the zone from it.
func addZone(ctx context.Context, c client.Client) (string, bool, error) {
	block, err := deploy.File(replaceBlock)
	if err != nil {
		return "", false, err
	}
	var whole bool
	var parseErr error
	changed, found, err := editCorefile(ctx, c, coreDNSConfigMap, func(corefile string) (string, bool) {
		rest, _ := withoutBlock(corefile)
		if whole, parseErr = loadsPlugin(rest, multiclusterPlugin); parseErr != nil {
			return corefile, false
		}
		if whole {
			return rest, rest != corefile
		}
		return withBlock(corefile, string(block))
	})
	switch {
	case err != nil:
		return "", false, err
	case parseErr != nil:
		return "", false, fmt.Errorf("ConfigMap %s/%s: %w", dnsNamespace, coreDNSConfigMap, parseErr)
	case !found && dryRun(c):
		return "the replace base's Corefile serves " + zone, false, nil
	case !found:
		return "", false, fmt.Errorf("no ConfigMap %s/%s with a Corefile for our CoreDNS", dnsNamespace, coreDNSConfigMap)
	case whole:
		return fmt.Sprintf("the Corefile is ours, and loads multicluster (%s)", unchanged(changed)), changed, nil
	}
	return fmt.Sprintf("the cluster's Corefile, every line of it kept, serves %s in a server block of ours (%s)", zone, unchanged(changed)), changed, nil
}

// runsImage returns the image of the Deployment coredns's CoreDNS container once the Deployment has rolled out and
// every pod it selects that has not ended, terminating ones included, runs that image in its container of that
// name; else why not yet.
func runsImage(ctx context.Context, c client.Client) (string, error) {
	if err := available(ctx, c, coreDNSObject); err != nil {
		return "", err
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, coreDNSObject, &d); err != nil {
		return "", err
	}
	ctr := findContainer(&d.Spec.Template.Spec)
	if ctr == nil {
		return "", fmt.Errorf("the Deployment %s has no container %s", coreDNSObject, coreDNSContainer)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return "", err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(dnsNamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, pc := range p.Spec.Containers {
			if pc.Name == ctr.Name && pc.Image != ctr.Image {
				return "", fmt.Errorf("CoreDNS pod %s still runs %s, not %s", p.Name, pc.Image, ctr.Image)
			}
		}
	}
	return ctr.Image, nil
}

// serve makes our CoreDNS, in place of the cluster's, serve clusterset.local from the cluster's own Corefile: once
// every replica runs our image, whose binary reads the multicluster plugin, it adds our block (addZone), then waits
// until every replica that ran before runs it. The order keeps the cluster's DNS up: a binary without the plugin
// cannot reload a Corefile that loads it, nor start with it.
func serve(ctx context.Context, s steps, kube kubernetes.Interface, c client.Client, wait time.Duration) error {
	err := s.do("CoreDNS replicas run our image", func() (string, error) {
		var image string
		err := waitFor(ctx, wait, func() (err error) {
			image, err = runsImage(ctx, c)
			return err
		})
		return fmt.Sprintf("every pod of Deployment %s runs %s", coreDNSObject, image), err
	})
	if err != nil {
		return err
	}
	before, err := replicasBefore(ctx, kube, c)
	if err != nil {
		return err
	}
	var changed bool
	err = s.do("CoreDNS serves "+zone, func() (did string, err error) {
		did, changed, err = addZone(ctx, c)
		return did, err
	})
	if err != nil || !changed {
		return err
	}
	return s.do("cluster DNS replicas reloaded", func() (string, error) { return waitReloaded(ctx, kube, c, before, wait) })
}

// ServeDNS is `kubectl-mcs dns serve`, the Helm chart's post-install and post-upgrade hook in the replace mode: once
// the chart's Deployment coredns runs our image on every replica, it adds our clusterset.local block to the
// cluster's Corefile, as join does (serve).
func ServeDNS(ctx context.Context, cfg *rest.Config, wait time.Duration, out io.Writer) error {
	c, kube, err := dnsClients(cfg)
	if err != nil {
		return err
	}
	return serve(ctx, steps{out}, kube, c, wait)
}
