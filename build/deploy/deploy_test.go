package deploy

import (
	"bytes"
	"io/fs"
	"maps"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/test/env/clusterset"
)

// TestRenderMatchesKustomize checks that the embedded bases render, in process, exactly what the kustomize
// binary renders from the repository's folders: the two install paths give the same objects.
func TestRenderMatchesKustomize(t *testing.T) {
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Skipf("no tools cache (make tools): %v", err)
	}
	for _, dir := range []string{".", "broker", "crds", "replace", "replace-kube-dns"} {
		t.Run(dir, func(t *testing.T) {
			got, err := Render(dir)
			if err != nil {
				t.Fatal(err)
			}
			want, err := exec.Command(filepath.Join(assets, "kustomize"), "build", dir).Output()
			if err != nil {
				t.Fatalf("kustomize build %s: %v", dir, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("in-process render of %s differs from kustomize build (%d and %d bytes)", dir, len(got), len(want))
			}
		})
	}
}

// TestImages checks our images in the rendered bases: every Deployment's container is ours, pulled only when its
// node lacks the tag, at the bases' one tag or, for a binary built at a version, at that version's; an image an
// overlay sets wins.
func TestImages(t *testing.T) {
	name, baseTag, err := controllerImage()
	if err != nil {
		t.Fatal(err)
	}
	if name != "ghcr.io/vksfleet/mcs-controller" || baseTag == "" {
		t.Fatalf("the controller base names %s:%s", name, baseTag)
	}
	// A test binary is built at no version: the bases' tag.
	if got, err := ControllerImage(); err != nil || got != name+":"+baseTag {
		t.Errorf("ControllerImage() = %q, %v; want %s:%s", got, err, name, baseTag)
	}
	const overlayDNS = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../deploy\n" +
		"images:\n  - name: ghcr.io/vksfleet/coredns\n    newName: mirror.example/coredns\n    newTag: mine\n"
	for _, tc := range []struct {
		name, dir, overlay, tag string
		want                    map[string]string // image by Deployment
	}{{
		name: "the bases' tag", dir: ".",
		want: map[string]string{"mcs-controller": "ghcr.io/vksfleet/mcs-controller:" + baseTag, "mcs-dns": "ghcr.io/vksfleet/coredns:" + baseTag},
	}, {
		name: "a build's version", dir: ".", tag: "v0.2.0-3-gb35ea41-dirty",
		want: map[string]string{"mcs-controller": "ghcr.io/vksfleet/mcs-controller:v0.2.0-3-gb35ea41-dirty", "mcs-dns": "ghcr.io/vksfleet/coredns:v0.2.0-3-gb35ea41-dirty"},
	}, {
		name: "the replace mode's base", dir: "coredns", tag: "v0.2.0",
		want: map[string]string{"coredns": "ghcr.io/vksfleet/coredns:v0.2.0"},
	}, {
		name: "a commit of digits only stays a string", dir: "dns-standalone", tag: "1234567",
		want: map[string]string{"mcs-dns": "ghcr.io/vksfleet/coredns:1234567"},
	}, {
		name: "an overlay's image wins", overlay: overlayDNS, tag: "b35ea41",
		want: map[string]string{"mcs-controller": "ghcr.io/vksfleet/mcs-controller:b35ea41", "mcs-dns": "mirror.example/coredns:mine"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := path.Join(root, tc.dir)
			if tc.overlay != "" {
				dir = overlay
			}
			b, err := build(dir, tc.overlay, tc.tag)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, doc := range strings.Split(string(b), "\n---\n") {
				var d appsv1.Deployment
				if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil {
					t.Fatal(err)
				}
				if d.Kind != "Deployment" {
					continue
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					got[d.Name] = c.Image
					if c.ImagePullPolicy != corev1.PullIfNotPresent {
						t.Errorf("Deployment %s, container %s: imagePullPolicy %q, want IfNotPresent", d.Name, c.Name, c.ImagePullPolicy)
					}
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("images %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOneTag checks what ImageTag relies on: every image the bases name is ours, at one tag.
func TestOneTag(t *testing.T) {
	_, want, err := controllerImage()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = fs.WalkDir(bases, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || path.Base(p) != "kustomization.yaml" {
			return err
		}
		b, err := bases.ReadFile(p)
		if err != nil {
			return err
		}
		var k struct {
			Images []struct{ Name, NewName, NewTag string }
		}
		if err := sigsyaml.Unmarshal(b, &k); err != nil {
			return err
		}
		for _, im := range k.Images {
			n++
			if !strings.HasPrefix(im.NewName, "ghcr.io/vksfleet/") || im.NewTag != want {
				t.Errorf("%s: image %s becomes %s:%s, want one of ours at %s", p, im.Name, im.NewName, im.NewTag, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Errorf("%d images in the bases, want the controller's and the two DNS modes'", n)
	}
}

// TestMemberLeavesClusterDNS checks the raw member manifests, the root (the DNS mode standalone, join's and the
// chart's default) and replace/: applying either changes nothing of the cluster's own DNS in kube-system, its
// CoreDNS Deployment, Corefile and kube-dns Service, which only join, the chart's hooks and replace-kube-dns.sh
// change, keeping a copy first. The standalone mode runs its own DNS.
func TestMemberLeavesClusterDNS(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		ownDNS bool
	}{{dir: ".", ownDNS: true}, {dir: "replace"}} {
		t.Run(tc.dir, func(t *testing.T) {
			b, err := Render(tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			dns := false
			for _, doc := range strings.Split(string(b), "\n---\n") {
				var o metav1.PartialObjectMetadata
				if err := sigsyaml.Unmarshal([]byte(doc), &o); err != nil {
					t.Fatal(err)
				}
				if o.Namespace == metav1.NamespaceSystem {
					t.Errorf("%s renders %s %s/%s: the cluster's own DNS is not the raw manifests' to change", tc.dir, o.Kind, o.Namespace, o.Name)
				}
				dns = dns || o.Kind == "Deployment" && o.Name == "mcs-dns"
			}
			if dns != tc.ownDNS {
				t.Errorf("%s renders the standalone DNS: %v, want %v", tc.dir, dns, tc.ownDNS)
			}
		})
	}
}
