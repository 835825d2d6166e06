package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/names"
)

// DNSBackup is the ConfigMap of kube-system that keeps the cluster's own CoreDNS as it was before any tool of ours
// changed it: join in the standalone and replace modes, the Helm chart's hooks in the replace mode, and
// build/deploy/replace-kube-dns/replace-kube-dns.sh, which all write and read this one format. It is taken once and
// never overwritten, so that running any of them again keeps the first original; unjoin, helm uninstall and
// replace-kube-dns.sh --restore put the cluster's DNS back from it and delete it. Its name is the one the script
// kept its copy under before the others took one.
const DNSBackup = "coredns-vksfleet-original"

// The keys of DNSBackup. Plain keys rather than annotations: the script reads and writes them with kubectl alone,
// and an operator reads them with `kubectl -n kube-system get configmap coredns-vksfleet-original -o yaml`.
const (
	// backupCorefile is the ConfigMap coredns's Corefile, without a block of ours (the markers'); absent when the
	// cluster had no such ConfigMap.
	backupCorefile = "Corefile"
	// backupImage is the image of the Deployment coredns's CoreDNS container, backupReplicas its replicas, and
	// backupTemplate its whole pod template as JSON, which the replace mode takes over; absent without a
	// Deployment. A copy the script took before this format has the image alone.
	backupImage    = "image"
	backupReplicas = "replicas"
	backupTemplate = "template"
	// backupReplaced is "true" once a replace path took the Deployment over: only then does a restore put the
	// Deployment back, so that unjoining a standalone member leaves an upgrade of the cluster's own CoreDNS alone.
	backupReplaced = "replaced"
)

// coreDNSContainer is the name of CoreDNS's container in kubeadm's Deployment and ours.
const coreDNSContainer = "coredns"

var (
	backupKey     = client.ObjectKey{Namespace: dnsNamespace, Name: DNSBackup}
	coreDNSObject = client.ObjectKey{Namespace: dnsNamespace, Name: dnsDeployment}
)

// prepareDNS takes the backup of the cluster's CoreDNS (backupDNS) before a DNS mode changes it, and in the
// replace mode gives our CoreDNS a Corefile where the cluster has none of its own (baseCorefile); it says what it
// did.
func prepareDNS(ctx context.Context, c client.Client, replace bool) (string, error) {
	did, err := backupDNS(ctx, c, replace)
	if err != nil || !replace {
		return did, err
	}
	more, err := baseCorefile(ctx, c)
	return did + "; " + more, err
}

// backupDNS copies the cluster's CoreDNS into DNSBackup unless it holds a copy already, and with replace records
// there that the replace mode takes the Deployment over. It copies nothing where there is nothing of the cluster's
// own to keep: no CoreDNS at all, or a Corefile that is ours whole (a release before backups replaced it).
func backupDNS(ctx context.Context, c client.Client, replace bool) (string, error) {
	name := dnsNamespace + "/" + DNSBackup
	var kept corev1.ConfigMap
	err := c.Get(ctx, backupKey, &kept)
	switch {
	case err == nil:
		did := fmt.Sprintf("kept ConfigMap %s, the original of %s", name, kept.CreationTimestamp.UTC().Format(time.RFC3339))
		if !replace || kept.Data[backupReplaced] == "true" {
			planUnchanged(c, "ConfigMap", name, "the original, kept")
			return did, nil
		}
		if kept.Data == nil {
			kept.Data = map[string]string{}
		}
		kept.Data[backupReplaced] = "true"
		if err := c.Update(ctx, &kept); err != nil {
			return "", fmt.Errorf("recording in ConfigMap %s that the replace mode takes the Deployment over: %w", name, err)
		}
		return did + ", now noting that the replace mode takes the Deployment over", nil
	case !apierrors.IsNotFound(err):
		return "", err
	}
	data, why, err := originalDNS(ctx, c)
	if err != nil || data == nil {
		return why, err
	}
	if replace {
		data[backupReplaced] = "true"
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: DNSBackup, Labels: map[string]string{names.LabelManagedBy: fieldOwner}},
		Data:       data,
	}
	// A create, which fails rather than overwrite a copy another run took meanwhile.
	if err := c.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		return backupDNS(ctx, c, replace)
	} else if err != nil {
		return "", fmt.Errorf("creating ConfigMap %s: %w", name, err)
	}
	var parts []string
	if _, ok := data[backupCorefile]; ok {
		parts = append(parts, "the Corefile")
	}
	if image, ok := data[backupImage]; ok {
		parts = append(parts, fmt.Sprintf("the Deployment (image %s, %s replicas)", image, data[backupReplicas]))
	}
	return fmt.Sprintf("copied %s of the cluster's CoreDNS into ConfigMap %s", strings.Join(parts, " and "), name), nil
}

// planUnchanged adds to a dry run's plan that an object stays as it is; nothing for any other client.
func planUnchanged(c client.Client, kind, name, note string) {
	if w, ok := c.(*writer); ok {
		w.plan.add(change{cluster: w.cluster, kind: kind, name: name, action: actionUnchanged, note: note})
	}
}

// originalDNS is what DNSBackup keeps of the cluster's CoreDNS, or nil and why there is nothing to keep.
func originalDNS(ctx context.Context, c client.Reader) (map[string]string, string, error) {
	data := map[string]string{}
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return nil, "", err
	}
	if corefile, found := cm.Data[corefileKey]; err == nil && found {
		whole, err := ours(corefile)
		if err != nil {
			return nil, "", fmt.Errorf("ConfigMap %s/%s: %w", dnsNamespace, coreDNSConfigMap, err)
		}
		if whole {
			return nil, "nothing to keep: the Corefile is ours already (an earlier release replaced it), the cluster's own is gone", nil
		}
		// A block of ours there is from an earlier release's join, which kept no copy: the original is without it.
		data[backupCorefile], _ = withoutBlock(corefile)
	}
	var d appsv1.Deployment
	err = c.Get(ctx, coreDNSObject, &d)
	if client.IgnoreNotFound(err) != nil {
		return nil, "", err
	}
	if err == nil {
		template, err := json.Marshal(d.Spec.Template)
		if err != nil {
			return nil, "", err
		}
		data[backupTemplate] = string(template)
		data[backupReplicas] = strconv.Itoa(int(ptr.Deref(d.Spec.Replicas, 1)))
		if ctr := findContainer(&d.Spec.Template.Spec); ctr != nil {
			data[backupImage] = ctr.Image
		}
	}
	if len(data) == 0 {
		return nil, fmt.Sprintf("nothing to keep: the cluster has no CoreDNS (ConfigMap and Deployment %s/%s)", dnsNamespace, dnsDeployment), nil
	}
	return data, "", nil
}

// findContainer is the pod's CoreDNS container: the one named coredns, as kubeadm and our base name it, else the
// only one.
func findContainer(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == coreDNSContainer {
			return &spec.Containers[i]
		}
	}
	if len(spec.Containers) == 1 {
		return &spec.Containers[0]
	}
	return nil
}

// restoreDNS puts the cluster's CoreDNS back as DNSBackup keeps it, and deletes the backup. The Corefile goes
// first: the live one without our block, which keeps any edit its owner made since, or the original where the
// Corefile is ours whole; where the Deployment is then to run its original image again, whose binary cannot read
// the multicluster plugin, every replica must have reloaded it first. Then, where a replace path took it over, the
// Deployment's pod template and replicas, waited for until available, and join's PodDisruptionBudget. Without a
// backup it changes nothing, and says so.
func restoreDNS(ctx context.Context, c client.Client, kube kubernetes.Interface, wait time.Duration) (string, error) {
	var backup corev1.ConfigMap
	err := c.Get(ctx, backupKey, &backup)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("no ConfigMap %s/%s: no original of the cluster's CoreDNS to put back", dnsNamespace, DNSBackup), nil
	}
	if err != nil {
		return "", err
	}
	var d *appsv1.Deployment
	if backup.Data[backupReplaced] == "true" {
		if d, err = originalDeployment(ctx, c, backup.Data); err != nil {
			return "", err
		}
	}
	var did []string
	var before map[string]replica
	if d != nil {
		if before, err = replicasBefore(ctx, kube, c); err != nil {
			return "", err
		}
	}
	corefile, changed, reloads, err := restoreCorefile(ctx, c, backup.Data)
	if err != nil {
		return "", err
	}
	did = append(did, corefile)
	if changed && reloads && d != nil {
		confirmed, err := waitReloaded(ctx, kube, c, before, wait)
		if err != nil {
			return "", fmt.Errorf("the Corefile is restored, the Deployment not yet (run this again to finish): %w", err)
		}
		did = append(did, confirmed)
	}
	if d != nil {
		// Read again: the Deployment's status changed while the replicas reloaded.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var readErr error
			if d, readErr = originalDeployment(ctx, c, backup.Data); readErr != nil || d == nil {
				return readErr
			}
			return c.Update(ctx, d)
		})
		if err != nil {
			return "", fmt.Errorf("restoring Deployment %s: %w", coreDNSObject, err)
		}
	}
	if d != nil {
		if err := waitFor(ctx, wait, func() error { return available(ctx, c, coreDNSObject) }); err != nil {
			return "", err
		}
		image := ""
		if ctr := findContainer(&d.Spec.Template.Spec); ctr != nil {
			image = ctr.Image
		}
		did = append(did, fmt.Sprintf("Deployment %s runs its original pod template again (image %s, %d replicas)", coreDNSObject, image, ptr.Deref(d.Spec.Replicas, 1)))
		deleted, err := deleteJoinedPDB(ctx, c)
		if err != nil {
			return "", err
		}
		if deleted {
			did = append(did, "deleted the PodDisruptionBudget "+coreDNSObject.String()+" join made")
		}
	}
	if err := c.Delete(ctx, &backup); client.IgnoreNotFound(err) != nil {
		return "", err
	}
	did = append(did, "deleted ConfigMap "+dnsNamespace+"/"+DNSBackup)
	return strings.Join(did, "; "), nil
}

// restoreCorefile puts back the Corefile of ConfigMap coredns, and says how, whether that changed it, and whether
// the Corefile it replaced had replicas reload it.
func restoreCorefile(ctx context.Context, c client.Client, original map[string]string) (did string, changed, reloads bool, err error) {
	want, kept := original[backupCorefile]
	var cm corev1.ConfigMap
	err = c.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err) && kept:
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: coreDNSConfigMap}, Data: map[string]string{corefileKey: want}}
		if err := c.Create(ctx, &cm); err != nil {
			return "", false, false, err
		}
		return "the original Corefile, in the ConfigMap coredns that was gone", true, false, nil
	case apierrors.IsNotFound(err):
		return "no Corefile, as before", false, false, nil
	case err != nil:
		return "", false, false, err
	}
	live := cm.Data[corefileKey]
	rest, _ := withoutBlock(live)
	whole, err := loadsPlugin(rest, multiclusterPlugin)
	if err != nil {
		return "", false, false, fmt.Errorf("ConfigMap %s/%s: %w", dnsNamespace, coreDNSConfigMap, err)
	}
	switch {
	case !whole && rest == live:
		return "the Corefile has nothing of ours", false, false, nil
	case !whole:
		did, want = "the Corefile without our block (every other line as it is now)", rest
	case kept:
		did = "the original Corefile (the live one was ours whole)"
	default:
		return "", false, false, fmt.Errorf("the Corefile is ours whole and ConfigMap %s/%s keeps no original", dnsNamespace, DNSBackup)
	}
	if reloads, err = loadsPlugin(live, reloadPlugin); err != nil {
		return "", false, false, err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[corefileKey] = want
	// An update: a concurrent edit of the owner's fails it rather than be lost.
	if err := c.Update(ctx, &cm); err != nil {
		return "", false, false, fmt.Errorf("updating ConfigMap %s/%s: %w", dnsNamespace, coreDNSConfigMap, err)
	}
	return did, true, reloads, nil
}

// deleteJoinedPDB deletes the replace mode's PodDisruptionBudget kube-system/coredns where join alone wrote it (its
// only field manager but the status's is join's), and says whether it did: the cluster's CoreDNS had none of that
// name before. The chart's is Helm's to delete.
func deleteJoinedPDB(ctx context.Context, c client.Client) (bool, error) {
	var pdb policyv1.PodDisruptionBudget
	if err := c.Get(ctx, coreDNSObject, &pdb); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !joinedOnly(pdb.ManagedFields) {
		return false, nil
	}
	return true, client.IgnoreNotFound(c.Delete(ctx, &pdb))
}

// joinedOnly says whether join is an object's only field manager, but for its status: join made it, and no one
// else set any of it.
func joinedOnly(fields []metav1.ManagedFieldsEntry) bool {
	joined := false
	for _, f := range fields {
		switch {
		case f.Subresource != "":
		case f.Manager != fieldOwner:
			return false
		default:
			joined = true
		}
	}
	return joined
}

// originalDeployment is the live Deployment coredns with the pod template and replicas the backup keeps (the image
// alone, from a copy that has no template), or nil when there is no Deployment or nothing to change.
func originalDeployment(ctx context.Context, c client.Reader, original map[string]string) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	if err := c.Get(ctx, coreDNSObject, &d); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	want := d.DeepCopy()
	switch template, image := original[backupTemplate], original[backupImage]; {
	case template != "":
		want.Spec.Template = corev1.PodTemplateSpec{}
		if err := json.Unmarshal([]byte(template), &want.Spec.Template); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s: %w", dnsNamespace, DNSBackup, backupTemplate, err)
		}
	case image != "":
		ctr := findContainer(&want.Spec.Template.Spec)
		if ctr == nil {
			return nil, fmt.Errorf("the Deployment %s has no container %s to give its image %s back", coreDNSObject, coreDNSContainer, image)
		}
		ctr.Image = image
	}
	if s := original[backupReplicas]; s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s %q: %w", dnsNamespace, DNSBackup, backupReplicas, s, err)
		}
		want.Spec.Replicas = ptr.To(int32(n))
	}
	if apiequality.Semantic.DeepEqual(want.Spec, d.Spec) {
		return nil, nil
	}
	return want, nil
}

// BackupDNS is `kubectl-mcs dns backup`, the Helm chart's pre-install and pre-upgrade hook in the replace mode: it
// takes the backup of the cluster's CoreDNS as join does (prepareDNS), before the chart changes anything of it.
func BackupDNS(ctx context.Context, cfg *rest.Config, replace bool, out io.Writer) error {
	c, err := newClient(cfg, "cluster")
	if err != nil {
		return err
	}
	return steps{out}.do("backup of the cluster's CoreDNS", func() (string, error) { return prepareDNS(ctx, c, replace) })
}

// RestoreDNS is `kubectl-mcs dns restore`, the Helm chart's pre-delete hook in the replace mode: it puts the
// cluster's CoreDNS back from its backup as unjoin does (restoreDNS), while the chart keeps kube-dns.
func RestoreDNS(ctx context.Context, cfg *rest.Config, wait time.Duration, out io.Writer) error {
	c, kube, err := dnsClients(cfg)
	if err != nil {
		return err
	}
	return steps{out}.do("the cluster's CoreDNS restored", func() (string, error) { return restoreDNS(ctx, c, kube, wait) })
}

// dnsClients are the clients of the cluster cfg reaches that the DNS hooks need: objects, and pods' logs and
// status through the typed clientset.
func dnsClients(cfg *rest.Config) (client.Client, kubernetes.Interface, error) {
	c, err := newClient(cfg, "cluster")
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, kube, nil
}
