// Package images defines our two container images, coredns and mcs-controller, and assembles them with
// go-containerregistry, without a container engine and without root: each is FROM scratch, one layer of static
// binaries that runs as the non-root user 65532, built for every platform asked for. The images of all platforms
// go into an OCI image layout under their multi-platform index, for a registry, and the host platform's into a
// docker-archive (docker save's format), which the local clusterset's kubelet nodes import. build/images/mkimage
// builds the binaries and writes both; `make images` runs it through build/images/build.sh.
package images

import (
	"archive/tar"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is one of our images.
type Image struct {
	// Name is the image's name in the repository (<repo>/<Name>) and its title label.
	Name string
	// Description is its org.opencontainers.image.description label.
	Description string
	// Binaries are the files of its only layer, each at /<Binary.Name>; the first is the entrypoint.
	Binaries []Binary
	// Ports are the ports it exposes, such as 53/udp.
	Ports []string
}

// Binary is a command of this module in an image.
type Binary struct {
	// Name is the binary's file name in the image's root.
	Name string
	// Package is the command's import path.
	Package string
	// Capabilities are the file capabilities it is given, permitted and effective (setcap's +ep), by number.
	Capabilities []int
}

// CapNetBindService is CAP_NET_BIND_SERVICE (linux/capability.h): binding ports below 1024.
const CapNetBindService = 10

// User is the user and group of every image: not root (distroless images' nonroot).
const User = "65532:65532"

// Product are our images.
var Product = []Image{{
	Name:        "coredns",
	Description: "CoreDNS with the multicluster plugin: cluster.local and clusterset.local (KEP-1645)",
	// Port 53 as a non-root user needs CAP_NET_BIND_SERVICE as a file capability, as upstream CoreDNS images have it.
	Binaries: []Binary{{Name: "coredns", Package: "vksfleet.dev/fleet/cmd/coredns", Capabilities: []int{CapNetBindService}}},
	Ports:    []string{"53/udp", "53/tcp", "9153/tcp"},
}, {
	Name:        "mcs-controller",
	Description: "Kubernetes Multi-Cluster Services controller: exports to the broker, imports from it",
	// kubectl-mcs beside the controller: `kubectl mcs diagnose --in-cluster` runs its DNS probe pod from this image
	// (kubectl-mcs dns-probe), at the plugin's own version; the image has no shell, no sleep and no dig.
	Binaries: []Binary{{Name: "mcs-controller", Package: "vksfleet.dev/fleet/cmd/controller"},
		{Name: "kubectl-mcs", Package: "vksfleet.dev/fleet/cmd/kubectl-mcs"}},
	Ports: []string{"8080/tcp", "8081/tcp"},
}}

// Build is one build of the images: where they are named and what they are built from.
type Build struct {
	// Repo is the repository the images are named in, such as ghcr.io/vksfleet.
	Repo string
	// Version is their tag and their org.opencontainers.image.version label.
	Version string
	// Revision is the commit they are built from, their org.opencontainers.image.revision label.
	Revision string
	// Source is the address of their source code, their org.opencontainers.image.source label.
	Source string
}

// tagRe is what an image tag may be (the distribution spec's tag grammar).
var tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Tag returns im's reference: <Repo>/<im.Name>:<Version>.
func (b Build) Tag(im Image) (name.Tag, error) {
	if !tagRe.MatchString(b.Version) {
		return name.Tag{}, fmt.Errorf("images: version %q is not an image tag (letters, digits, _ . -; at most 128)", b.Version)
	}
	tag, err := name.NewTag(b.Repo+"/"+im.Name+":"+b.Version, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("images: %w", err)
	}
	return tag, nil
}

// Labels returns im's OCI labels, which the config of each platform's image carries and the index's annotations
// repeat: a registry shows a multi-platform image by the index's.
func (b Build) Labels(im Image) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       im.Name,
		"org.opencontainers.image.description": im.Description,
		"org.opencontainers.image.source":      b.Source,
		"org.opencontainers.image.version":     b.Version,
		"org.opencontainers.image.revision":    b.Revision,
		// The LICENSE at the repository's root.
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

// epoch is the time of every layer entry and of the images: the same binaries give the same digests.
var epoch = time.Unix(0, 0).UTC()

// Assemble assembles im's image for platform from its binaries, built for that platform in dir (dir/<Binary.Name>).
// It writes the layer into dir as layer.tar.gz, which the image reads from until dir is removed.
func (b Build) Assemble(im Image, platform v1.Platform, dir string) (v1.Image, error) {
	if len(im.Binaries) == 0 {
		return nil, fmt.Errorf("images: %s has no binary", im.Name)
	}
	path := filepath.Join(dir, "layer.tar.gz")
	if err := writeLayer(path, dir, im.Binaries); err != nil {
		return nil, fmt.Errorf("images: %s for %s: %w", im.Name, platform, err)
	}
	// Compressed once here: given a gzip, ggcr takes its bytes as the blob instead of compressing again at each
	// write.
	layer, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("images: %s for %s: %w", im.Name, platform, err)
	}
	var files []string
	for _, bin := range im.Binaries {
		files = append(files, "/"+bin.Name)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "build/images/mkimage: " + strings.Join(files, " "),
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{files[0]}
	cf.Config.User = User
	cf.Config.Labels = b.Labels(im)
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range im.Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	return mutate.ConfigFile(img, cf)
}

// writeLayer writes the gzipped layer tar of bins, read from dir, to path: each a root-owned executable in /.
func writeLayer(path, dir string, bins []Binary) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	// The default level, not ggcr's fastest: a registry stores and serves this, and nodes pull it.
	zw, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, bin := range bins {
		if err := addFile(tw, filepath.Join(dir, bin.Name), bin); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// addFile adds the binary at src to tw. Its file capabilities go in as the security.capability extended
// attribute of the entry's PAX header, which containerd and Docker set when they unpack the layer: a file
// capability is such an attribute, and no tool has to set it on the build host first.
func addFile(tw *tar.Writer, src string, bin Binary) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: bin.Name, Mode: 0o755, Size: fi.Size(), ModTime: epoch, Format: tar.FormatPAX}
	if len(bin.Capabilities) > 0 {
		caps, err := fileCapability(bin.Capabilities)
		if err != nil {
			return fmt.Errorf("%s: %w", bin.Name, err)
		}
		h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(caps)}
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// vfs_cap_data's revision 2 and its effective flag (linux/capability.h).
const (
	vfsCapRevision2 = 0x02000000
	vfsCapEffective = 0x000001
	// capLast is the highest capability revision 2 can hold: 64 bits, in two 32-bit words.
	capLast = 63
)

// fileCapability returns the value of the security.capability extended attribute that gives a file caps,
// permitted and effective, as `setcap CAPS=+ep` writes it: struct vfs_cap_data of revision 2, little-endian, the
// magic and flags, then for the lower and the upper 32 capabilities their permitted and inheritable masks.
func fileCapability(caps []int) ([]byte, error) {
	var permitted [2]uint32
	for _, c := range caps {
		if c < 0 || c > capLast {
			return nil, fmt.Errorf("capability %d is not one of 0 to %d", c, capLast)
		}
		permitted[c/32] |= 1 << (c % 32)
	}
	b := make([]byte, 0, 20)
	b = binary.LittleEndian.AppendUint32(b, vfsCapRevision2|vfsCapEffective)
	for _, p := range permitted {
		b = binary.LittleEndian.AppendUint32(b, p)
		b = binary.LittleEndian.AppendUint32(b, 0) // inheritable
	}
	return b, nil
}

// Index returns the multi-platform index of im's images, one per platform, annotated with im's labels.
func (b Build) Index(im Image, images []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		// A runtime picks its platform's image by the index's descriptors: each names its image's platform.
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: cf.Platform()}})
	}
	return mutate.Annotations(idx, b.Labels(im)).(v1.ImageIndex), nil
}

// WriteLayout writes idx as the only entry of an OCI image layout at dir, which it replaces: index.json names it
// by tag, as docker buildx does (the tag alone, org.opencontainers.image.ref.name, and the whole reference,
// io.containerd.image.name), so that `crane push`, `skopeo copy --all oci:DIR:TAG` or `oras` push it whole.
func WriteLayout(dir string, tag name.Tag, idx v1.ImageIndex) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(), "io.containerd.image.name": tag.Name(),
	}))
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// WriteArchive writes img as a docker-archive at path, which it replaces in one step (a running test may be
// reading the old one): manifest.json naming the tag, the config and the layers, which `ctr images import` and
// `docker load` read.
func WriteArchive(path string, tag name.Tag, img v1.Image) error {
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("images: %w", err)
	}
	return os.Rename(tmp, path)
}

// Sizes returns img's size unpacked (its layers' tars) and as a registry stores it (its manifest, its config
// and its compressed layers).
func Sizes(img v1.Image) (unpacked, stored int64, err error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return 0, 0, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return 0, 0, err
	}
	stored = int64(len(manifest) + len(config))
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		stored += size
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, err
		}
		unpacked += n
	}
	return unpacked, stored, nil
}
