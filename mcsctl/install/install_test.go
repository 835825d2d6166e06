package install

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestImagesOverlay renders a member's manifests with replaced images and checks every container uses them.
func TestImagesOverlay(t *testing.T) {
	for _, tc := range []struct {
		name, controller, dns string
		want                  []string
	}{
		{"release images", "", "", []string{"ghcr.io/vksfleet/mcs-controller:v0.1.0", "ghcr.io/vksfleet/coredns:v0.1.0"}},
		{"mirror", "mirror:5000/mcs/controller:v2", "mirror:5000/mcs/coredns@sha256:0123", []string{"mirror:5000/mcs/controller:v2", "mirror:5000/mcs/coredns@sha256:0123"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifests, err := deploy.RenderOverlay(imagesOverlay(tc.controller, tc.dns))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decode(manifests)
			if err != nil {
				t.Fatal(err)
			}
			var images []string
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				containers, _, _ := unstructuredContainers(o.Object)
				images = append(images, containers...)
			}
			for _, w := range tc.want {
				found := false
				for _, img := range images {
					found = found || img == w
				}
				if !found {
					t.Errorf("no container runs %s; images %v", w, images)
				}
			}
			if len(images) != 2 {
				t.Errorf("images %v, want the controller's and DNS's", images)
			}
		})
	}
}

func TestTokenExpiry(t *testing.T) {
	jwt := func(payload string) string {
		return "e30." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	for _, tc := range []struct {
		name, token string
		want        time.Time
		err         string
	}{
		{"exp", jwt(`{"exp":1800000000}`), time.Unix(1800000000, 0), ""},
		{"no exp", jwt(`{"sub":"x"}`), time.Time{}, "no expiry"},
		{"not a JWT", "abc", time.Time{}, "not a JWT"},
		{"bad payload", "e30.!!.sig", time.Time{}, "payload"},
		{"bad claims", jwt(`[`), time.Time{}, "claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tokenExpiry(tc.token)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) || !got.Equal(tc.want) {
				t.Errorf("tokenExpiry = %v, %v; want %v, %q", got, err, tc.want, tc.err)
			}
		})
	}
}

// unstructuredContainers returns the images of a Deployment's containers.
func unstructuredContainers(obj map[string]any) ([]string, bool, error) {
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	cs, _ := pod["containers"].([]any)
	var out []string
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok {
			if img, ok := m["image"].(string); ok {
				out = append(out, img)
			}
		}
	}
	return out, len(out) > 0, nil
}
