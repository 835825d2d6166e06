// Package nodeimages builds the container images that the local clusterset's real nodes run, without a registry
// or a Docker engine: each image is one layer written from a list of files (FROM scratch) into a docker-archive
// tar, which `ctr images import` loads into a node's containerd. It holds the sandbox image (test/env/cmd/pause) and
// the workload image of the test pods (test/env/cmd/serve plus busybox and its applets).
package nodeimages

import (
	"archive/tar"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// File is one entry of an image's only layer.
type File struct {
	// Path is the entry's absolute path in the image, such as /bin/sh.
	Path string
	// Mode holds the permission bits, and fs.ModeDir for a directory.
	Mode fs.FileMode
	// Data is a regular file's contents.
	Data []byte
	// Link, when set, makes the entry a symbolic link to Link.
	Link string
}

// Image is a single-layer image FROM scratch.
type Image struct {
	// Tags are the names the image is imported under (the archive's RepoTags), such as vksfleet.dev/pause:1.
	Tags []string
	// Entrypoint, Cmd and Env are the image's defaults for a container that does not set its own.
	Entrypoint, Cmd, Env []string
	// Files are the layer's entries; parent directories that are not listed are added with mode 0755.
	Files []File
}

// epoch is every entry's and the image's time: the same files give the same digests, whenever they are built.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes the image as a docker-archive tar (docker save's format): manifest.json naming the tags,
// the config and the layer, the config JSON named by its digest, and the layer tar under its diff ID.
func (im Image) WriteArchive(w io.Writer) error {
	if len(im.Tags) == 0 {
		return errors.New("nodeimages: an image needs at least one tag")
	}
	layer, err := im.layer()
	if err != nil {
		return err
	}
	diffID := sha256.Sum256(layer)
	type runConfig struct {
		Entrypoint []string `json:",omitempty"`
		Cmd        []string `json:",omitempty"`
		Env        []string `json:",omitempty"`
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch,
		"config":       runConfig{Entrypoint: im.Entrypoint, Cmd: im.Cmd, Env: im.Env},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return err
	}
	configDigest := sha256.Sum256(config)
	configName := hex.EncodeToString(configDigest[:]) + ".json"
	layerName := hex.EncodeToString(diffID[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": im.Tags, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{{layerName, layer}, {configName, config}, {"manifest.json", manifest}} {
		if dir := path.Dir(f.name); dir != "." {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layer returns the layer tar: every directory first, then the files and links, each group sorted by path, owned
// by root.
func (im Image) layer() ([]byte, error) {
	entries := map[string]File{}
	for _, f := range im.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("nodeimages: %q is not a clean absolute path below /", f.Path)
		}
		if _, dup := entries[f.Path]; dup {
			return nil, fmt.Errorf("nodeimages: %s is listed twice", f.Path)
		}
		entries[f.Path] = f
	}
	for p := range entries {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if f, ok := entries[dir]; ok && !f.Mode.IsDir() {
				return nil, fmt.Errorf("nodeimages: %s is inside %s, which is not a directory", p, dir)
			} else if !ok {
				entries[dir] = File{Path: dir, Mode: fs.ModeDir | 0o755}
			}
		}
	}
	// Directories first, each group by path: a tar reader then finds every entry's parent already made as listed.
	kind := func(p string) int {
		if entries[p].Mode.IsDir() {
			return 0
		}
		return 1
	}
	paths := slices.Sorted(maps.Keys(entries))
	slices.SortStableFunc(paths, func(a, b string) int { return cmp.Compare(kind(a), kind(b)) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := entries[p]
		h := &tar.Header{Name: p[1:], Mode: int64(f.Mode.Perm()), ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000 // c_ISVTX, as /tmp needs
		}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ArchiveTags reads the tags the docker-archive tar archive names its images by (manifest.json's RepoTags, as
// docker save and WriteArchive write them), in order: what a node that imports it can run, such as our images at
// the version `make images` tagged them with.
func ArchiveTags(archive string) ([]string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("nodeimages: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("nodeimages: no manifest.json in %s", archive)
		}
		if err != nil {
			return nil, fmt.Errorf("nodeimages: reading %s: %w", archive, err)
		}
		if filepath.Clean(h.Name) != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			return nil, fmt.Errorf("nodeimages: manifest.json of %s: %w", archive, err)
		}
		var tags []string
		for _, m := range manifest {
			tags = append(tags, m.RepoTags...)
		}
		if len(tags) == 0 {
			return nil, fmt.Errorf("nodeimages: the manifest.json of %s names no tag", archive)
		}
		return tags, nil
	}
}
