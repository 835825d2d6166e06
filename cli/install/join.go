package install

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/build/deploy"
	"vksfleet.dev/fleet/build/deploy/member"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
)

// JoinOptions say how to join a member.
type JoinOptions struct {
	// ClusterID is the member's id; empty keeps the one its ClusterProperty holds, or makes one from the
	// kube-system namespace's UID (KEP-2149's default) where there is none.
	ClusterID string
	// TokenExpiration is how long the member's broker token lasts; its controller renews it before it expires.
	TokenExpiration time.Duration
	// ControllerImage and DNSImage replace the manifests' images (ghcr.io/vksfleet/mcs-controller and coredns,
	// at the release's tag) with full references, for a mirror or a build of one's own.
	ControllerImage, DNSImage string
	// DNS is the DNS mode, one of DNSModes; default DNSStandalone.
	DNS string
	// ClusterDomain is the member's cluster DNS domain, the controller's --cluster-domain; empty keeps the
	// manifests' cluster.local.
	ClusterDomain string
	// Region is the member's region, which join records in the member directory and other members rank its
	// endpoints by; empty takes its ClusterProperty region.topology.k8s.io's, if any.
	Region string
	// Wait bounds the wait for the controller, DNS and the member's first Lease renewal.
	Wait time.Duration
	// Given says whether the user gave a flag (FlagDNS, ...): the options of the flags not given take the values
	// the member recorded at its last join, if any. Nil means every option is given.
	Given func(flag string) bool
	// DryRun changes nothing on the member or the broker: join prints what it would change instead, object by
	// object, the diff of each live object and a server-side dry run of join's write.
	DryRun bool
	// ForceConflicts takes over the fields another field manager set to other values, as `kubectl apply
	// --server-side --force-conflicts` does; without it such a conflict stops join, named. The replace DNS mode
	// takes over the cluster's DNS objects (build/deploy/coredns's) in any case: replacing them is what it is for.
	ForceConflicts bool
	// CredentialsOnly gives the member its cluster id, its identity on the broker and its broker credentials, and
	// installs nothing else: for a member whose controller and DNS Helm or GitOps install.
	CredentialsOnly bool
}

// The member's Deployments, as build/deploy names them.
const (
	controllerDeployment = "mcs-controller"
	dnsNamespace         = metav1.NamespaceSystem
	dnsDeployment        = "coredns"
)

// minCredentialLeft is how long a member's token must still last for join to keep it.
const minCredentialLeft = time.Hour

// Join makes the cluster memberCfg reaches a member of the broker's clusterset, in an order that works on a fresh
// cluster: the CRDs, the cluster id and clusterset name, the member's identity on the broker and its region in
// the member directory, its broker credentials, then the controller, the admission policy and DNS in the mode
// asked for, with the record of the settings it joined with. Before a DNS mode changes the cluster's CoreDNS, it
// keeps a copy of it (prepareDNS), which unjoin puts back; the replace mode adds our block to the cluster's own
// Corefile only once our image runs on every replica (serve). The settings not given are the recorded ones, so
// that running it again changes nothing but the region, if the member's is another now: objects are applied
// server-side, and credentials the broker still accepts are kept. With CredentialsOnly it stops after the
// credentials; with DryRun it changes nothing, and prints what it would change.
func Join(ctx context.Context, memberCfg *rest.Config, info BrokerInfo, opts JoinOptions, out io.Writer) (string, error) {
	s := steps{out}
	mc, bc, err := clients(memberCfg, info)
	if err != nil {
		return "", err
	}
	record, err := readRecord(ctx, mc)
	if err != nil {
		return "", fmt.Errorf("reading the settings of the last join, ConfigMap %s/%s: %w", controllerNamespace, recordName, err)
	}
	opts, origins, err := withRecorded(opts, record, opts.Given)
	if err != nil {
		return "", err
	}
	if opts.DNS == "" {
		opts.DNS = DNSStandalone
	}
	if err := checkOptions(opts); err != nil {
		return "", err
	}
	var p *plan
	if opts.DryRun {
		p = &plan{}
		fmt.Fprintln(out, "dry run: nothing changes on the member or the broker")
	}
	m := &writer{Client: mc, cluster: "member", force: opts.ForceConflicts, plan: p}
	b := &writer{Client: bc, cluster: "broker", force: opts.ForceConflicts, plan: p}
	if opts.DNS == DNSReplace && !opts.CredentialsOnly {
		if m.takeOver, err = replacedDNS(); err != nil {
			return "", err
		}
	}
	if opts.CredentialsOnly {
		// Only the settings of what it writes: the DNS mode and images are the chart's.
		origins = slices.DeleteFunc(origins, func(o origin) bool {
			return o.flag != FlagClusterID && o.flag != FlagRegion && o.flag != FlagTokenExpiration
		})
	}
	start := time.Now()
	err = s.do("settings", func() (string, error) { return describeOrigins(origins, record), nil })
	if err != nil {
		return "", err
	}
	if opts.CredentialsOnly {
		err = s.do("ClusterProperty CRD", func() (string, error) { return clusterPropertyCRD(ctx, m) })
	} else {
		err = s.do("CRDs", func() (string, error) {
			n, err := applyRendered(ctx, m, func() ([]byte, error) { return deploy.Render("crds") })
			return fmt.Sprintf("%s %d", p.applied(), n), err
		})
	}
	if err != nil {
		return "", err
	}
	var id string
	err = s.do("cluster id", func() (string, error) {
		dyn, err := dynamic.NewForConfig(memberCfg)
		if err != nil {
			return "", err
		}
		if p != nil {
			id, err = planIdentity(ctx, dyn, m, p, opts.ClusterID, info.ClusterSet)
		} else {
			id, err = ensureIdentity(ctx, dyn, opts.ClusterID, info.ClusterSet)
		}
		return fmt.Sprintf("%s in clusterset %s", id, info.ClusterSet), err
	})
	if err != nil {
		return "", err
	}
	err = s.do("broker identity", func() (string, error) {
		others, err := brokerIdentity(ctx, b, id)
		if err != nil || p != nil {
			return p.applied(), err
		}
		return fmt.Sprintf("namespace %s, which it writes; reads the records of the %d other members, and they its; listed in the member directory",
			names.BrokerNamespace(id), others), nil
	})
	if err != nil {
		return "", err
	}
	err = s.do("region", func() (string, error) {
		region, from, err := memberRegion(ctx, m, opts.Region)
		if err != nil {
			return "", err
		}
		if err := recordRegion(ctx, b, id, region); err != nil {
			return "", err
		}
		if region == "" {
			return fmt.Sprintf("none (no --region, no ClusterProperty %s): no other member ranks this one's endpoints as in its region", aboutv1alpha1.RegionName), nil
		}
		return fmt.Sprintf("%s, from %s, recorded in the member directory: other members rank this one's endpoints by it", region, from), nil
	})
	if err != nil {
		return "", err
	}
	err = s.do("broker credentials", func() (string, error) { return credentials(ctx, m, b, info, id, opts.TokenExpiration) })
	if err != nil {
		return "", err
	}
	if opts.CredentialsOnly {
		return id, p.finish(out)
	}
	if opts.DNS == DNSStandalone || opts.DNS == DNSReplace {
		err = s.do("backup of the cluster's CoreDNS", func() (string, error) { return prepareDNS(ctx, m, opts.DNS == DNSReplace) })
		if err != nil {
			return "", err
		}
	}
	err = s.do("controller, policy and DNS", func() (string, error) {
		recorded := opts
		recorded.ClusterID = id
		return installMember(ctx, m, recorded)
	})
	if err != nil {
		return "", err
	}
	if p != nil {
		switch opts.DNS {
		case DNSStandalone:
			err = forward(ctx, s, memberCfg, m, opts.Wait)
		case DNSReplace:
			err = s.do("CoreDNS serves "+zone, func() (string, error) {
				did, _, err := addZone(ctx, m)
				return did, err
			})
		}
		if err != nil {
			return "", err
		}
		return id, p.finish(out)
	}
	rollouts := []client.ObjectKey{{Namespace: controllerNamespace, Name: controllerDeployment}}
	switch opts.DNS {
	case DNSStandalone:
		rollouts = append(rollouts, client.ObjectKey{Namespace: controllerNamespace, Name: standaloneDNS})
	case DNSReplace:
		rollouts = append(rollouts, client.ObjectKey{Namespace: dnsNamespace, Name: dnsDeployment})
	}
	for _, d := range rollouts {
		err = s.do("rollout of "+d.String(), func() (string, error) {
			return "available", waitFor(ctx, opts.Wait, func() error { return available(ctx, m, d) })
		})
		if err != nil {
			return "", err
		}
	}
	switch opts.DNS {
	case DNSStandalone:
		err = forward(ctx, s, memberCfg, m, opts.Wait)
	case DNSReplace:
		var kube kubernetes.Interface
		if kube, err = kubernetes.NewForConfig(memberCfg); err == nil {
			err = serve(ctx, s, kube, m, opts.Wait)
		}
	}
	if err != nil {
		return "", err
	}
	err = s.do("Lease on the broker", func() (string, error) {
		return "renewed by the controller", waitFor(ctx, opts.Wait, func() error {
			l, err := memberLease(ctx, b, id)
			if err != nil {
				return err
			}
			renewed, _, _ := unstructured.NestedString(l.Object, "spec", "renewTime")
			if at, err := time.Parse(time.RFC3339Nano, renewed); err != nil || at.Before(start.Add(-time.Second)) {
				return fmt.Errorf("MemberLease %s/%s not renewed since join started: see `kubectl -n %s logs deploy/%s`",
					l.GetNamespace(), l.GetName(), controllerNamespace, controllerDeployment)
			}
			return nil
		})
	})
	if err != nil {
		return id, err
	}
	err = s.do("member directory", func() (string, error) { return MarkPublished(ctx, b, id, opts.Wait) })
	return id, err
}

// checkOptions says why join cannot run with opts, before it changes anything.
func checkOptions(opts JoinOptions) error {
	if err := checkLifetime(opts.TokenExpiration); err != nil {
		return err
	}
	if err := broker.ValidRegion(opts.Region); err != nil {
		return fmt.Errorf("--region: %w", err)
	}
	if opts.CredentialsOnly {
		return nil
	}
	_, err := memberOverlay(opts.DNS, opts.ControllerImage, opts.DNSImage, opts.ClusterDomain)
	return err
}

// clusterPropertyCRD applies the ClusterProperty CRD, where the cluster id goes, when the member does not serve
// the kind yet: join --credentials-only installs no other CRD, which the chart's crds/ hold and Helm skips as
// present.
func clusterPropertyCRD(ctx context.Context, m *writer) (string, error) {
	gk := schema.GroupKind{Group: aboutv1alpha1.GroupVersion.Group, Kind: "ClusterProperty"}
	_, err := m.RESTMapper().RESTMapping(gk)
	if err == nil {
		return "served already", nil
	}
	if !meta.IsNoMatchError(err) {
		return "", err
	}
	objs, err := rendered("crds")
	if err != nil {
		return "", err
	}
	for _, o := range objs {
		if o.GetName() == "clusterproperties."+gk.Group {
			return m.plan.applied() + " " + o.GetName() + ", which the member did not serve", apply(ctx, m, []*unstructured.Unstructured{o})
		}
	}
	return "", fmt.Errorf("build/deploy/crds holds no CRD of %s", gk)
}

// ensureIdentity gives the member its cluster id, as resolveID does, and the broker's clusterset name, and returns
// the id.
func ensureIdentity(ctx context.Context, dyn dynamic.Interface, want, clusterSet string) (string, error) {
	id, err := resolveID(ctx, dyn, want)
	if err != nil {
		return "", err
	}
	return id, clusterid.Ensure(ctx, dyn, aboutv1alpha1.ClusterSetName, clusterSet)
}

// planIdentity is the cluster id step of a dry run: it returns the id join would give the member, adds the
// ClusterProperties it would create to the plan, and refuses, as clusterid.Ensure does, to change either.
func planIdentity(ctx context.Context, dyn dynamic.Interface, m client.Reader, p *plan, want, clusterSet string) (string, error) {
	have, haveSet, err := clusterid.Read(ctx, dyn)
	if err != nil {
		return "", err
	}
	id := want
	switch {
	case want == "" && have != "":
		id = have
	case want == "":
		// What clusterid.Resolve makes when it is absent.
		var ns corev1.Namespace
		if err := m.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
			return "", fmt.Errorf("reading the kube-system namespace for a default cluster id: %w", err)
		}
		id = string(ns.UID)
	}
	if err := clusterid.Validate(id); err != nil {
		return "", err
	}
	for _, prop := range []struct{ name, have, want string }{
		{aboutv1alpha1.ClusterIDName, have, id},
		{aboutv1alpha1.ClusterSetName, haveSet, clusterSet},
	} {
		c := change{cluster: "member", kind: "ClusterProperty", name: prop.name, note: prop.want}
		switch prop.have {
		case prop.want:
			c.action = actionUnchanged
		case "":
			c.action = actionCreated
		default:
			return "", fmt.Errorf("ClusterProperty %s is %q, not %q: a member keeps its value for life (unjoin, then delete it, to change it)", prop.name, prop.have, prop.want)
		}
		p.add(c)
	}
	return id, nil
}

// credentials keeps the member's broker credentials if the broker still accepts them, else gives it new ones, and
// says which. In a dry run it mints none, and adds what it would write to the plan.
func credentials(ctx context.Context, m, b *writer, info BrokerInfo, id string, expiration time.Duration) (string, error) {
	secret := controllerNamespace + "/" + brokerSecret
	current, err := readMemberKubeconfig(ctx, m)
	if err != nil {
		return "", err
	}
	why := "none yet"
	if current != nil {
		if why = "unusable"; usableCredential(ctx, current, info, minCredentialLeft) == nil {
			m.plan.add(change{cluster: "member", kind: "Secret", name: secret, action: actionUnchanged, note: "the broker accepts its token"})
			return fmt.Sprintf("kept Secret %s: the broker accepts its token", secret), nil
		}
	}
	if p := m.plan; p != nil {
		p.add(change{cluster: "broker", kind: "ServiceAccount and Secret", name: names.BrokerNamespace(id) + "/" + credentialPrefix + "<random>",
			action: actionCreated, note: fmt.Sprintf("a credential, and a token of it for %v", expiration)})
		c := change{cluster: "member", kind: "Secret", name: secret, action: actionCreated, note: "the new token's kubeconfig, not shown"}
		if current != nil {
			c.action, c.note = actionChanged, "the new token's kubeconfig in place of an unusable one, not shown"
		}
		p.add(c)
		return fmt.Sprintf("dry run: a new credential (%s before)", why), nil
	}
	kubeconfig, anchor, err := mintCredential(ctx, b, info, id, expiration)
	if err != nil {
		return "", err
	}
	if err := writeMemberKubeconfig(ctx, m, kubeconfig); err != nil {
		return "", err
	}
	return fmt.Sprintf("wrote Secret %s (%s before) with a token of credential %s/%s, for %v", secret, why, names.BrokerNamespace(id), anchor, expiration), nil
}

// installMember applies the member's controller, admission policy and DNS in the mode of opts, and the record of
// opts, and says what it applied.
func installMember(ctx context.Context, m *writer, opts JoinOptions) (string, error) {
	overlay, err := memberOverlay(opts.DNS, opts.ControllerImage, opts.DNSImage, opts.ClusterDomain)
	if err != nil {
		return "", err
	}
	manifests, err := deploy.RenderOverlay(overlay)
	if err != nil {
		return "", err
	}
	objs, err := decode(manifests)
	if err != nil {
		return "", err
	}
	if opts.DNS == DNSReplace {
		// The Corefile is the cluster's own, or the base's from prepareDNS: our block goes into it only once our
		// image runs (serve).
		objs = slices.DeleteFunc(objs, isCorefileConfigMap)
	}
	objs, dropped := withoutUnservedPolicy(objs, func(gvk schema.GroupVersionKind) bool {
		_, err := m.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		return !meta.IsNoMatchError(err)
	})
	objs = append(objs, recordObject(opts))
	if err := apply(ctx, m, objs); err != nil {
		return "", err
	}
	did := fmt.Sprintf("%s %d objects, DNS mode %s, settings recorded in ConfigMap %s/%s", m.plan.applied(), len(objs), opts.DNS, controllerNamespace, recordName)
	if dropped > 0 {
		did += fmt.Sprintf("; the cluster serves no ValidatingAdmissionPolicy (Kubernetes before 1.30), so the controller's --denied-export-namespaces alone refuses exports in the shared namespaces (%d policy objects left out)", dropped)
	}
	return did, nil
}

// forward makes the cluster's DNS forward clusterset.local to the standalone DNS, and waits until every CoreDNS
// replica that ran before runs the new Corefile. A dry run only plans the edit, to the standalone DNS's address
// where its Service is yet to be created.
func forward(ctx context.Context, s steps, cfg *rest.Config, m *writer, wait time.Duration) error {
	var kube kubernetes.Interface
	var before map[string]replica
	if m.plan == nil {
		var err error
		if kube, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
		if before, err = replicasBefore(ctx, kube, m); err != nil {
			return err
		}
	}
	var changed bool
	err := s.do("cluster DNS forwards "+zone, func() (string, error) {
		var svc corev1.Service
		ip := "<ClusterIP of " + controllerNamespace + "/" + standaloneDNS + ">"
		err := m.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: standaloneDNS}, &svc)
		switch {
		case err == nil:
			ip = svc.Spec.ClusterIP
		case m.plan == nil || !apierrors.IsNotFound(err):
			return "", err
		}
		did, c, err := forwardToStandalone(ctx, m, ip)
		changed = c
		return did, err
	})
	if err != nil || !changed || m.plan != nil {
		return err
	}
	return s.do("cluster DNS replicas reloaded", func() (string, error) { return waitReloaded(ctx, kube, m, before, wait) })
}

// BrokerIdentity gives the member id its identity on the broker, as join does: its broker namespace (with
// build/deploy/member's static ServiceAccount MemberServiceAccount), write access there and read access to every
// other member's namespace and theirs to its own, for every ServiceAccount of its namespace, and its entry in the
// member directory. Its credentials come from MintCredential.
func BrokerIdentity(ctx context.Context, info BrokerInfo, id string) error {
	b, err := newClient(info.Config(), "broker")
	if err != nil {
		return err
	}
	_, err = brokerIdentity(ctx, b, id)
	return err
}

// brokerIdentity applies the member's overlay of build/deploy/member on the broker, and grants writes and reads.
// It returns the number of other members.
func brokerIdentity(ctx context.Context, b client.Client, id string) (int, error) {
	overlay := member.Kustomization("../deploy/member", id, "-"+id)
	if _, err := applyRendered(ctx, b, func() ([]byte, error) { return deploy.RenderOverlay(overlay) }); err != nil {
		return 0, fmt.Errorf("%w (is the broker-info's token still valid, and has this release's `kubectl mcs broker init` run? it writes a new one)", err)
	}
	if err := applyTyped(ctx, b, writerBinding(id), fieldOwner); err != nil {
		return 0, err
	}
	return GrantReads(ctx, b, id)
}

// memberRegion returns the member's region, and where it comes from: want (--region) if set, else the member's
// ClusterProperty region.topology.k8s.io, else none. It must be a label value, as importers compare it with theirs.
func memberRegion(ctx context.Context, m client.Reader, want string) (region, from string, err error) {
	if want != "" {
		if err := broker.ValidRegion(want); err != nil {
			return "", "", fmt.Errorf("--region: %w", err)
		}
		return want, "--region", nil
	}
	cp := &aboutv1alpha1.ClusterProperty{}
	if err := m.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.RegionName}, cp); apierrors.IsNotFound(err) {
		return "", "", nil
	} else if err != nil {
		return "", "", fmt.Errorf("reading ClusterProperty %s: %w", aboutv1alpha1.RegionName, err)
	}
	if err := broker.ValidRegion(cp.Spec.Value); err != nil {
		return "", "", fmt.Errorf("ClusterProperty %s: %w: correct it, or give join --region", aboutv1alpha1.RegionName, err)
	}
	return cp.Spec.Value, "ClusterProperty " + aboutv1alpha1.RegionName, nil
}

// RecordRegion records region ("" for none) as the joined member id's in the member directory, with the
// broker-info's identity, as join does: other members rank the member's endpoints by it, from their next read of
// the directory.
func RecordRegion(ctx context.Context, info BrokerInfo, id, region string) error {
	if err := broker.ValidRegion(region); err != nil {
		return err
	}
	b, err := newClient(info.Config(), "broker")
	if err != nil {
		return err
	}
	// The entry lists the member too: it is for join to make.
	if err := b.Get(ctx, client.ObjectKeyFromObject(broker.DirectoryEntry(id)), &corev1.ConfigMap{}); err != nil {
		return fmt.Errorf("the member directory entry of %s (was it joined?): %w", id, err)
	}
	return recordRegion(ctx, b, id, region)
}

// recordRegion applies the member's directory entry with its region, as regionOwner: the region is that field
// manager's alone, so that applying the entry again without it (GrantReads) keeps it, and applying it with none
// removes it.
func recordRegion(ctx context.Context, b client.Client, id, region string) error {
	return applyTyped(ctx, b, broker.RegionEntry(id, region), regionOwner)
}

// regionOwner is the field manager of the region in a member's directory entry.
const regionOwner = fieldOwner + "-region"

// resolveID returns the member's cluster id: the one asked for, written as its ClusterProperty (which must not
// hold another), or the ClusterProperty's, made from the kube-system UID when absent.
func resolveID(ctx context.Context, dyn dynamic.Interface, want string) (string, error) {
	if want == "" {
		id, _, err := clusterid.Resolve(ctx, dyn)
		return id, err
	}
	if err := clusterid.Validate(want); err != nil {
		return "", err
	}
	return want, clusterid.Ensure(ctx, dyn, aboutv1alpha1.ClusterIDName, want)
}

// The images build/deploy's kustomizations name.
const (
	controllerImage = "ghcr.io/vksfleet/mcs-controller"
	dnsImage        = "ghcr.io/vksfleet/coredns"
)

// splitRef splits an image reference into its name, tag and digest; a port in the registry's host is not a tag.
func splitRef(ref string) (name, tag, digest string) {
	if at := strings.Index(ref, "@"); at >= 0 {
		ref, digest = ref[:at], ref[at+1:]
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "", digest
	}
	return ref[:i], ref[i+1:], digest
}

// withoutUnservedPolicy leaves out the admission policy's objects when the cluster does not serve their kind: the
// policy is a second line (the controller refuses the same exports), and a cluster older than the API must still
// join. Any other kind the cluster does not serve fails the apply, as it should.
func withoutUnservedPolicy(objs []*unstructured.Unstructured, served func(schema.GroupVersionKind) bool) ([]*unstructured.Unstructured, int) {
	kept := objs[:0:0]
	dropped := 0
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Group == admissionregistrationv1.GroupName && !served(gvk) {
			dropped++
			continue
		}
		kept = append(kept, o)
	}
	return kept, dropped
}

// applyRendered applies what render renders, and returns the number of objects.
func applyRendered(ctx context.Context, c client.Client, render func() ([]byte, error)) (int, error) {
	manifests, err := render()
	if err != nil {
		return 0, err
	}
	objs, err := decode(manifests)
	if err != nil {
		return 0, err
	}
	return len(objs), apply(ctx, c, objs)
}

// available says why the Deployment has not rolled out yet.
func available(ctx context.Context, c client.Client, key client.ObjectKey) error {
	var d appsv1.Deployment
	if err := c.Get(ctx, key, &d); err != nil {
		return err
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want {
		return fmt.Errorf("%s: %d of %d replicas updated, %d available: see `kubectl -n %s describe deploy/%s`",
			key, st.UpdatedReplicas, want, st.AvailableReplicas, key.Namespace, key.Name)
	}
	return nil
}
