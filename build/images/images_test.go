// The images are assembled here from fake binaries, without a container engine: their configuration, platforms
// and index, the capability on coredns's binary, the OCI layout and the docker-archive the nodes import, read back
// as a registry client and containerd read them. test/e2e/install builds the real images and runs them.
package images

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"vksfleet.dev/fleet/test/env/nodeimages"
)

const xattrCapability = "SCHILY.xattr.security.capability"

func TestFileCapability(t *testing.T) {
	for _, tc := range []struct {
		caps []int
		want string // hex
	}{
		// What `setcap cap_net_bind_service=+ep` wrote into the coredns images that Docker's classic builder made.
		{[]int{CapNetBindService}, "01000002" + "00040000" + "00000000" + "00000000" + "00000000"},
		{nil, "01000002" + "00000000" + "00000000" + "00000000" + "00000000"},
		// CAP_NET_BIND_SERVICE and CAP_NET_RAW (13).
		{[]int{10, 13}, "01000002" + "00240000" + "00000000" + "00000000" + "00000000"},
		// CAP_CHOWN (0), and CAP_MAC_ADMIN (33) and CAP_CHECKPOINT_RESTORE (40) in the upper word.
		{[]int{0, 33, 40}, "01000002" + "01000000" + "00000000" + "02010000" + "00000000"},
	} {
		got, err := fileCapability(tc.caps)
		if err != nil {
			t.Errorf("%v: %v", tc.caps, err)
		} else if hex.EncodeToString(got) != tc.want {
			t.Errorf("%v: %x, want %s", tc.caps, got, tc.want)
		}
	}
	for _, c := range []int{-1, 64} {
		if _, err := fileCapability([]int{c}); err == nil {
			t.Errorf("capability %d: no error", c)
		}
	}
}

// TestProduct checks what the images are made of: coredns binds port 53 as a non-root user through its file
// capability, the controller's image holds kubectl-mcs for diagnose --in-cluster's probe, and every binary is a
// command of this module.
func TestProduct(t *testing.T) {
	byName := map[string]Image{}
	for _, im := range Product {
		byName[im.Name] = im
		for _, bin := range im.Binaries {
			dir, ok := strings.CutPrefix(bin.Package, "vksfleet.dev/fleet/")
			if _, err := os.Stat(filepath.Join("..", "..", dir, "main.go")); !ok || err != nil {
				t.Errorf("%s: %s is no command of this module (%v)", im.Name, bin.Package, err)
			}
		}
	}
	if got := slices.Sorted(maps.Keys(byName)); !slices.Equal(got, []string{"coredns", "mcs-controller"}) {
		t.Fatalf("images %v, want coredns and mcs-controller", got)
	}
	dns := byName["coredns"]
	if len(dns.Binaries) != 1 || dns.Binaries[0].Name != "coredns" || !slices.Equal(dns.Binaries[0].Capabilities, []int{CapNetBindService}) {
		t.Errorf("coredns: %+v, want the coredns binary alone, with CAP_NET_BIND_SERVICE", dns.Binaries)
	}
	if !slices.Contains(dns.Ports, "53/udp") || !slices.Contains(dns.Ports, "53/tcp") {
		t.Errorf("coredns exposes %v, without port 53 over UDP and TCP", dns.Ports)
	}
	ctl := byName["mcs-controller"]
	var names []string
	for _, bin := range ctl.Binaries {
		names = append(names, bin.Name)
		if len(bin.Capabilities) > 0 {
			t.Errorf("mcs-controller: %s has capabilities %v; it binds no privileged port", bin.Name, bin.Capabilities)
		}
	}
	if !slices.Equal(names, []string{"mcs-controller", "kubectl-mcs"}) {
		t.Errorf("mcs-controller's binaries %v, want mcs-controller (the entrypoint) and kubectl-mcs", names)
	}
}

func TestTag(t *testing.T) {
	im := Image{Name: "coredns"}
	tag, err := Build{Repo: "ghcr.io/vksfleet", Version: "v0.2.0-3-gb35ea41-dirty"}.Tag(im)
	if err != nil || tag.String() != "ghcr.io/vksfleet/coredns:v0.2.0-3-gb35ea41-dirty" {
		t.Errorf("Tag: %v, %v", tag, err)
	}
	for _, v := range []string{"", "-x", ".x", "a/b", "a:b", "a b", strings.Repeat("a", 129)} {
		if _, err := (Build{Repo: "ghcr.io/vksfleet", Version: v}).Tag(im); err == nil {
			t.Errorf("version %q: no error", v)
		}
	}
	if _, err := (Build{Repo: "Upper/Case", Version: "v1"}).Tag(im); err == nil {
		t.Error("repository Upper/Case: no error")
	}
}

// entry is a file of a layer, read back.
type entry struct {
	hdr  *tar.Header
	data string
}

// layerEntries reads the files of img's only layer.
func layerEntries(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = entry{h, string(data)}
	}
}

// TestAssemble builds both images for two platforms from fake binaries and reads them back from the layout and
// the archive that mkimage writes.
func TestAssemble(t *testing.T) {
	b := Build{Repo: "registry.example/fleet", Version: "v0.2.0-3-gb35ea41", Revision: strings.Repeat("b35ea417", 5),
		Source: "https://example.com/fleet"}
	platforms := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
	wantCap, err := fileCapability([]int{CapNetBindService})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, im := range Product {
		t.Run(im.Name, func(t *testing.T) {
			tag, err := b.Tag(im)
			if err != nil {
				t.Fatal(err)
			}
			var imgs []v1.Image
			for _, p := range platforms {
				dir := filepath.Join(t.TempDir(), p.Architecture)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, bin := range im.Binaries {
					if err := os.WriteFile(filepath.Join(dir, bin.Name), []byte("fake "+bin.Name+" for "+p.String()), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				img, err := b.Assemble(im, p, dir)
				if err != nil {
					t.Fatal(err)
				}
				checkImage(t, b, im, p, img, wantCap)
				if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
					t.Errorf("media type %s, want %s", mt, types.OCIManifestSchema1)
				}
				imgs = append(imgs, img)
			}

			idx, err := b.Index(im, imgs)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(out, "oci", im.Name)
			if err := WriteLayout(dir, tag, idx); err != nil {
				t.Fatal(err)
			}
			// A second build replaces the first's layout, blobs included.
			if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", "0123"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := WriteLayout(dir, tag, idx); err != nil {
				t.Fatal(err)
			}
			checkLayout(t, dir, tag, im, platforms, imgs, b.Labels(im))

			archive := filepath.Join(out, im.Name+".tar")
			if err := WriteArchive(archive, tag, imgs[1]); err != nil {
				t.Fatal(err)
			}
			// As the local clusterset reads it, and then as a loader does: manifest.json's tag, config and layers.
			tags, err := nodeimages.ArchiveTags(archive)
			if err != nil || !slices.Equal(tags, []string{tag.String()}) {
				t.Errorf("the archive's tags %v (%v), want %s", tags, err, tag)
			}
			loaded, err := tarball.ImageFromPath(archive, &tag)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, b, im, platforms[1], loaded, wantCap)
			if want, _ := imgs[1].ConfigName(); !sameHash(t, loaded.ConfigName, want) {
				t.Error("the archive holds another config than the arm64 image's")
			}

			unpacked, stored, err := Sizes(imgs[0])
			if err != nil {
				t.Fatal(err)
			}
			manifest, _ := imgs[0].RawManifest()
			config, _ := imgs[0].RawConfigFile()
			layers, _ := imgs[0].Layers()
			packed, _ := layers[0].Size()
			if want := int64(len(manifest)+len(config)) + packed; stored != want {
				t.Errorf("stored size %d, want %d", stored, want)
			}
			// A tar holds at least a 512-byte header and the data of each file, and two zero blocks at the end.
			if unpacked < int64(len(im.Binaries)*512+1024) || unpacked%512 != 0 {
				t.Errorf("unpacked size %d: not a tar of %d files", unpacked, len(im.Binaries))
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(out, "*.tmp")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(out, "oci", "*.tmp")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func sameHash(t *testing.T, f func() (v1.Hash, error), want v1.Hash) bool {
	t.Helper()
	got, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return got == want
}

// checkImage checks img, im's image for platform p: its configuration, and its layer holding the binaries as
// root-owned executables, coredns's with CAP_NET_BIND_SERVICE as the file capability setcap would give it.
func checkImage(t *testing.T, b Build, im Image, p v1.Platform, img v1.Image, wantCap []byte) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: platform %s/%s, want %s", im.Name, cf.OS, cf.Architecture, p)
	}
	if want := []string{"/" + im.Binaries[0].Name}; !slices.Equal(cf.Config.Entrypoint, want) {
		t.Errorf("%s: entrypoint %v, want %v", im.Name, cf.Config.Entrypoint, want)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532", im.Name, cf.Config.User)
	}
	if got := slices.Sorted(maps.Keys(cf.Config.ExposedPorts)); !slices.Equal(got, slices.Sorted(slices.Values(im.Ports))) {
		t.Errorf("%s: exposed ports %v, want %v", im.Name, got, im.Ports)
	}
	if !maps.Equal(cf.Config.Labels, b.Labels(im)) {
		t.Errorf("%s: labels %v, want %v", im.Name, cf.Config.Labels, b.Labels(im))
	}
	for l, want := range map[string]string{"title": im.Name, "version": b.Version, "revision": b.Revision,
		"source": b.Source, "licenses": "Apache-2.0"} {
		if got := cf.Config.Labels["org.opencontainers.image."+l]; got != want {
			t.Errorf("%s: label org.opencontainers.image.%s %q, want %q", im.Name, l, got, want)
		}
	}
	if !cf.Created.Equal(epoch) {
		t.Errorf("%s: created %v: the same binaries must give the same image", im.Name, cf.Created)
	}
	entries := layerEntries(t, img)
	if len(entries) != len(im.Binaries) {
		t.Errorf("%s: layer entries %v, want the binaries alone", im.Name, slices.Sorted(maps.Keys(entries)))
	}
	for _, bin := range im.Binaries {
		e, ok := entries[bin.Name]
		if !ok {
			t.Errorf("%s: no /%s in the layer", im.Name, bin.Name)
			continue
		}
		if want := "fake " + bin.Name + " for " + p.String(); e.data != want {
			t.Errorf("%s: /%s holds %q, want %q", im.Name, bin.Name, e.data, want)
		}
		if e.hdr.Typeflag != tar.TypeReg || e.hdr.Mode != 0o755 || e.hdr.Uid != 0 || e.hdr.Gid != 0 {
			t.Errorf("%s: /%s: type %c, mode %o, owner %d:%d, want a file 0755 of root", im.Name, bin.Name, e.hdr.Typeflag,
				e.hdr.Mode, e.hdr.Uid, e.hdr.Gid)
		}
		got, has := e.hdr.PAXRecords[xattrCapability]
		switch {
		case bin.Name == "coredns" && !bytes.Equal([]byte(got), wantCap):
			t.Errorf("%s: /%s: security.capability %x, want %x (cap_net_bind_service=ep)", im.Name, bin.Name, got, wantCap)
		case bin.Name != "coredns" && has:
			t.Errorf("%s: /%s has the file capability %x", im.Name, bin.Name, got)
		}
	}
}

// checkLayout reads the OCI layout at dir as a registry client does: index.json names one index by tag, whose
// manifests are the images of each platform, in order.
func checkLayout(t *testing.T, dir string, tag name.Tag, im Image, platforms []v1.Platform, imgs []v1.Image, labels map[string]string) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("%s: index.json lists %+v, want one image index", im.Name, tm.Manifests)
	}
	d := tm.Manifests[0]
	if d.Annotations["org.opencontainers.image.ref.name"] != tag.TagStr() || d.Annotations["io.containerd.image.name"] != tag.String() {
		t.Errorf("%s: index.json's annotations %v, want the tag %s and the reference %s", im.Name, d.Annotations, tag.TagStr(), tag)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(m.Annotations, labels) {
		t.Errorf("%s: the index's annotations %v, want the labels %v", im.Name, m.Annotations, labels)
	}
	if len(m.Manifests) != len(platforms) {
		t.Fatalf("%s: the index lists %d images, want %d", im.Name, len(m.Manifests), len(platforms))
	}
	for i, md := range m.Manifests {
		if md.Platform == nil || !md.Platform.Equals(platforms[i]) {
			t.Errorf("%s: image %d's platform %v, want %s", im.Name, i, md.Platform, platforms[i])
		}
		want, err := imgs[i].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if md.Digest != want || md.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: image %d is %s %s, want %s %s", im.Name, i, md.MediaType, md.Digest, types.OCIManifestSchema1, want)
		}
		// Every blob is in the layout: a push sends them from there.
		img, err := idx.Image(md.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			digest, _ := l.Digest()
			if _, err := os.Stat(filepath.Join(dir, "blobs", digest.Algorithm, digest.Hex)); err != nil {
				t.Errorf("%s: layer %s not in the layout: %v", im.Name, digest, err)
			}
		}
	}
	// Only the blobs of this index: a layout written over another would keep the other's too.
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	// The index, and per platform a manifest, a config and a layer.
	if want := 1 + 3*len(platforms); len(blobs) != want {
		t.Errorf("%s: %d blobs in the layout, want %d", im.Name, len(blobs), want)
	}
}

// TestVersion runs version.sh in a repository of its own: the tag of the images and the version linked into the
// binaries follow `git describe`, and a tree without git gets "dev".
func TestVersion(t *testing.T) {
	script, err := os.ReadFile("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "build", "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "build", "images", "version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	// The temporary folder is no repository: git must not find the one around this test's package, if any.
	env := append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(tree), "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = tree, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func(args ...string) string {
		return run("bash", append([]string{"build/images/version.sh"}, args...)...)
	}

	if got := version(); got != "dev" {
		t.Errorf("without git: %q, want dev", got)
	}
	if got := version("revision"); got != "unknown" {
		t.Errorf("revision without git: %q, want unknown", got)
	}
	run("git", "init", "-q")
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "first")
	first := run("git", "rev-parse", "HEAD")
	short := run("git", "rev-parse", "--short", "HEAD")
	if got := version(); got != short {
		t.Errorf("before any tag: %q, want the commit %s", got, short)
	}
	run("git", "tag", "v0.2.0")
	run("git", "tag", "not-a-version")
	if got := version(); got != "v0.2.0" {
		t.Errorf("at a tag: %q, want v0.2.0 (a tag not named v<digit> is not a version)", got)
	}
	if got := version("revision"); got != first {
		t.Errorf("revision: %q, want %s", got, first)
	}
	if err := os.WriteFile(filepath.Join(tree, "build", "images", "version.sh"), append(script, '\n'), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := version(); got != "v0.2.0-dirty" {
		t.Errorf("with a change: %q, want v0.2.0-dirty", got)
	}
	if got := version("revision"); got != first+"-dirty" {
		t.Errorf("revision with a change: %q, want %s-dirty", got, first)
	}
	run("git", "commit", "-q", "-am", "second")
	if got, want := version(), "v0.2.0-1-g"+run("git", "rev-parse", "--short", "HEAD"); got != want {
		t.Errorf("a commit after the tag: %q, want %s", got, want)
	}
}
