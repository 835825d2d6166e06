package install

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"vksfleet.dev/fleet/build/deploy"
)

func TestBrokerInfoValidate(t *testing.T) {
	ok := BrokerInfo{Server: "https://10.0.0.1:6443", ClusterSet: "prod", Token: "t"}
	for _, tc := range []struct {
		name string
		edit func(*BrokerInfo)
		want string
	}{
		{"complete", func(*BrokerInfo) {}, ""},
		{"http", func(i *BrokerInfo) { i.Server = "http://10.0.0.1" }, "not an https URL"},
		{"no host", func(i *BrokerInfo) { i.Server = "https://" }, "not an https URL"},
		{"no clusterset", func(i *BrokerInfo) { i.ClusterSet = "" }, "clusterSet is empty"},
		{"no token", func(i *BrokerInfo) { i.Token = "" }, "token is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := ok
			tc.edit(&i)
			err := i.Validate()
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBrokerInfoRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "broker-info.yaml")
	want := BrokerInfo{Server: "https://broker.example:6443", CertificateAuthorityData: []byte("PEM"), ClusterSet: "prod", Token: "t"}
	if err := want.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBrokerInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != want.Server || string(got.CertificateAuthorityData) != "PEM" || got.ClusterSet != want.ClusterSet || got.Token != want.Token {
		t.Errorf("read %+v, wrote %+v", got, want)
	}
	if _, err := ReadBrokerInfo(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "broker init") {
		t.Errorf("a missing file gives %v, want a hint at broker init", err)
	}
}

func TestSplitRef(t *testing.T) {
	for _, tc := range []struct{ ref, name, tag, digest string }{
		{"mirror.local/mcs-controller", "mirror.local/mcs-controller", "", ""},
		{"mirror.local/mcs-controller:v1", "mirror.local/mcs-controller", "v1", ""},
		{"mirror.local:5000/mcs-controller", "mirror.local:5000/mcs-controller", "", ""},
		{"mirror.local:5000/mcs-controller:v1", "mirror.local:5000/mcs-controller", "v1", ""},
		{"mirror.local/coredns@sha256:abc", "mirror.local/coredns", "", "sha256:abc"},
		{"mirror.local/coredns:v1@sha256:abc", "mirror.local/coredns", "v1", "sha256:abc"},
	} {
		name, tag, digest := splitRef(tc.ref)
		if name != tc.name || tag != tc.tag || digest != tc.digest {
			t.Errorf("splitRef(%q) = %q %q %q, want %q %q %q", tc.ref, name, tag, digest, tc.name, tc.tag, tc.digest)
		}
	}
}

// TestMemberOverlay renders a member's manifests in each DNS mode, with and without replaced images, and checks
// which DNS runs, with which image, and the controller's DNS flags.
func TestMemberOverlay(t *testing.T) {
	for _, tc := range []struct {
		name, mode, controller, dns, domain string
		// deployments maps each Deployment to its image.
		deployments map[string]string
		// args are the controller flags wanted, and noArgs those it must not have.
		args, noArgs []string
	}{
		{name: "standalone", mode: DNSStandalone,
			deployments: map[string]string{"mcs-system/mcs-controller": "ghcr.io/vksfleet/mcs-controller:v0.1.0", "mcs-system/mcs-dns": "ghcr.io/vksfleet/coredns:v0.1.0"},
			args:        []string{"--dns-address=kube-dns.kube-system.svc:53"}, noArgs: []string{"--cluster-local-services"}},
		{name: "replace, mirrored", mode: DNSReplace, controller: "mirror:5000/mcs/controller:v2", dns: "mirror:5000/mcs/coredns@sha256:0123",
			deployments: map[string]string{"mcs-system/mcs-controller": "mirror:5000/mcs/controller:v2", "kube-system/coredns": "mirror:5000/mcs/coredns@sha256:0123"},
			args:        []string{"--dns-address=kube-dns.kube-system.svc:53"}},
		{name: "standalone in another cluster domain", mode: DNSStandalone, domain: "corp.example",
			deployments: map[string]string{"mcs-system/mcs-controller": "ghcr.io/vksfleet/mcs-controller:v0.1.0", "mcs-system/mcs-dns": "ghcr.io/vksfleet/coredns:v0.1.0"},
			args:        []string{"--dns-address=kube-dns.kube-system.svc:53", "--cluster-domain=corp.example"}, noArgs: []string{"--cluster-domain=cluster.local"}},
		{name: "cluster-local in another cluster domain", mode: DNSClusterLocal, domain: "corp.example",
			deployments: map[string]string{"mcs-system/mcs-controller": "ghcr.io/vksfleet/mcs-controller:v0.1.0"},
			args:        []string{"--cluster-local-services", "--cluster-domain=corp.example"}, noArgs: []string{"--cluster-domain=cluster.local"}},
		{name: "cluster-local", mode: DNSClusterLocal,
			deployments: map[string]string{"mcs-system/mcs-controller": "ghcr.io/vksfleet/mcs-controller:v0.1.0"},
			args:        []string{"--cluster-local-services", "--broker-secret=mcs-system/broker-kubeconfig"}, noArgs: []string{"--dns-address=kube-dns.kube-system.svc:53"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderMember(t, tc.mode, tc.controller, tc.dns, tc.domain)
			got := map[string]string{}
			var args []string
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				var d appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
					t.Fatal(err)
				}
				got[objectName(o)] = d.Spec.Template.Spec.Containers[0].Image
				if d.Name == "mcs-controller" {
					args = d.Spec.Template.Spec.Containers[0].Args
				}
			}
			if !maps.Equal(got, tc.deployments) {
				t.Errorf("deployments and images %v, want %v", got, tc.deployments)
			}
			for _, a := range tc.args {
				if !slices.Contains(args, a) {
					t.Errorf("controller args %v lack %s", args, a)
				}
			}
			for _, a := range tc.noArgs {
				if slices.Contains(args, a) {
					t.Errorf("controller args %v have %s", args, a)
				}
			}
		})
	}
	if _, err := memberOverlay("coredns", "", "", ""); err == nil || !strings.Contains(err.Error(), "standalone, replace, cluster-local") {
		t.Errorf("an unknown mode gives %v", err)
	}
	if _, err := memberOverlay(DNSStandalone, "", "", "Corp_Example"); err == nil || !strings.Contains(err.Error(), `cluster domain "Corp_Example"`) {
		t.Errorf("an invalid cluster domain gives %v", err)
	}
}

// TestWithoutUnservedPolicy renders a member's manifests and leaves out the admission policy as for a cluster that
// does not serve it, and only it.
func TestWithoutUnservedPolicy(t *testing.T) {
	objs := renderMember(t, DNSStandalone, "", "", "")
	all := len(objs)
	kept, dropped := withoutUnservedPolicy(objs, func(gvk schema.GroupVersionKind) bool { return true })
	if len(kept) != all || dropped != 0 {
		t.Errorf("a cluster serving every kind: %d of %d kept, %d dropped", len(kept), all, dropped)
	}
	kept, dropped = withoutUnservedPolicy(objs, func(gvk schema.GroupVersionKind) bool { return gvk.Group != "admissionregistration.k8s.io" })
	if dropped != 2 || len(kept) != all-2 {
		t.Errorf("a cluster without the policy API: %d of %d kept, %d dropped; want the policy and its binding dropped", len(kept), all, dropped)
	}
	for _, o := range kept {
		if o.GroupVersionKind().Group == "admissionregistration.k8s.io" {
			t.Errorf("%s %s kept", o.GetKind(), o.GetName())
		}
	}
}

// renderMember renders a member's manifests as join applies them.
func renderMember(t *testing.T, mode, controllerRef, dnsRef, clusterDomain string) []*unstructured.Unstructured {
	t.Helper()
	overlay, err := memberOverlay(mode, controllerRef, dnsRef, clusterDomain)
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := deploy.RenderOverlay(overlay)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(manifests)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
