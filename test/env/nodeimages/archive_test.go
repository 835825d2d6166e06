package nodeimages

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// entry is what the test reads back of one layer entry.
type entry struct {
	name string
	kind byte
	mode int64
	data string
	link string
}

func TestWriteArchive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		image   Image
		want    []entry // the layer, in order
		wantErr string
	}{{
		name:  "one file gets its parent directory",
		image: Image{Tags: []string{"vksfleet.dev/pause:1"}, Entrypoint: []string{"/bin/pause"}, Files: []File{{Path: "/bin/pause", Mode: 0o755, Data: []byte("ELF")}}},
		want:  []entry{{"bin/", tar.TypeDir, 0o755, "", ""}, {"bin/pause", tar.TypeReg, 0o755, "ELF", ""}},
	}, {
		name: "directories first, then files and links by path; listed directories keep their mode",
		image: Image{Tags: []string{"a.test/serve:latest", "a.test/client:latest"}, Cmd: []string{"/bin/serve"}, Env: []string{"PATH=/bin"}, Files: []File{
			{Path: "/usr/bin/nc", Link: "/bin/busybox"},
			{Path: "/bin/busybox", Mode: 0o755, Data: []byte("box")},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
			{Path: "/bin/sh", Link: "/bin/busybox"},
			{Path: "/etc/motd", Mode: 0o644, Data: nil},
		}},
		want: []entry{
			{"bin/", tar.TypeDir, 0o755, "", ""},
			{"etc/", tar.TypeDir, 0o755, "", ""},
			{"tmp/", tar.TypeDir, 0o1777, "", ""},
			{"usr/", tar.TypeDir, 0o755, "", ""},
			{"usr/bin/", tar.TypeDir, 0o755, "", ""},
			{"bin/busybox", tar.TypeReg, 0o755, "box", ""},
			{"bin/sh", tar.TypeSymlink, 0o777, "", "/bin/busybox"},
			{"etc/motd", tar.TypeReg, 0o644, "", ""},
			{"usr/bin/nc", tar.TypeSymlink, 0o777, "", "/bin/busybox"},
		},
	}, {
		name:    "no tag",
		image:   Image{Files: []File{{Path: "/x", Data: []byte("x")}}},
		wantErr: "at least one tag",
	}, {
		name:    "relative path",
		image:   Image{Tags: []string{"a.test/x:1"}, Files: []File{{Path: "bin/x"}}},
		wantErr: "not a clean absolute path",
	}, {
		name:    "unclean path",
		image:   Image{Tags: []string{"a.test/x:1"}, Files: []File{{Path: "/bin/../x"}}},
		wantErr: "not a clean absolute path",
	}, {
		name:    "duplicate path",
		image:   Image{Tags: []string{"a.test/x:1"}, Files: []File{{Path: "/x"}, {Path: "/x"}}},
		wantErr: "listed twice",
	}, {
		name:    "file inside a file",
		image:   Image{Tags: []string{"a.test/x:1"}, Files: []File{{Path: "/x", Data: []byte("x")}, {Path: "/x/y"}}},
		wantErr: "not a directory",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tc.image.WriteArchive(&buf)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			layer := checkArchive(t, buf.Bytes(), tc.image)
			if got := readLayer(t, layer); !slices.Equal(got, tc.want) {
				t.Errorf("layer:\n got %v\nwant %v", got, tc.want)
			}
			var again bytes.Buffer
			if err := tc.image.WriteArchive(&again); err != nil || !bytes.Equal(again.Bytes(), buf.Bytes()) {
				t.Errorf("a second archive of the same image differs (err %v): digests would change from build to build", err)
			}
		})
	}
}

// checkArchive reads a docker archive back as containerd's importer does, checks the manifest, the config's
// digest and the layer's diff ID against the image, and returns the layer tar.
func checkArchive(t *testing.T, archive []byte, im Image) []byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest %+v, want one image with one layer", manifest)
	}
	m := manifest[0]
	if !slices.Equal(m.RepoTags, im.Tags) {
		t.Errorf("RepoTags %v, want %v", m.RepoTags, im.Tags)
	}
	config, layer := files[m.Config], files[m.Layers[0]]
	if config == nil || layer == nil {
		t.Fatalf("the archive lacks %s or %s; it holds %d files", m.Config, m.Layers[0], len(files))
	}
	if got, want := m.Config, hexDigest(config)+".json"; got != want {
		t.Errorf("config named %s, its digest says %s", got, want)
	}
	if got, want := m.Layers[0], hexDigest(layer)+"/layer.tar"; got != want {
		t.Errorf("layer named %s, its digest says %s", got, want)
	}
	var cfg struct {
		OS     string
		Config struct{ Entrypoint, Cmd, Env []string }
		RootFS struct {
			Type    string
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.RootFS.Type != "layers" || !slices.Equal(cfg.RootFS.DiffIDs, []string{"sha256:" + hexDigest(layer)}) {
		t.Errorf("config os %q rootfs %+v, want linux, layers and the layer's sha256", cfg.OS, cfg.RootFS)
	}
	if !slices.Equal(cfg.Config.Entrypoint, im.Entrypoint) || !slices.Equal(cfg.Config.Cmd, im.Cmd) || !slices.Equal(cfg.Config.Env, im.Env) {
		t.Errorf("config %+v, want the image's entrypoint, cmd and env", cfg.Config)
	}
	return layer
}

func readLayer(t *testing.T, layer []byte) []entry {
	t.Helper()
	var got []entry
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, entry{h.Name, h.Typeflag, h.Mode, string(b), h.Linkname})
	}
}

func hexDigest(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}

// TestArchiveTags reads back the tags WriteArchive writes, as the framework reads those `make images` gave our
// images, and refuses a tar that is no docker-archive.
func TestArchiveTags(t *testing.T) {
	dir := t.TempDir()
	im := Image{Tags: []string{"ghcr.io/vksfleet/coredns:v0.2.0-3-gb35ea41", "ghcr.io/vksfleet/coredns:extra"},
		Files: []File{{Path: "/coredns", Mode: 0o755, Data: []byte("ELF")}}}
	archive := filepath.Join(dir, "coredns.tar")
	var b bytes.Buffer
	if err := im.WriteArchive(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ArchiveTags(archive); err != nil || !slices.Equal(got, im.Tags) {
		t.Errorf("ArchiveTags = %q, %v; want %q", got, err, im.Tags)
	}
	// A tar without manifest.json, one whose manifest names no tag, and no file.
	plain := filepath.Join(dir, "plain.tar")
	untagged := filepath.Join(dir, "untagged.tar")
	for p, files := range map[string]map[string]string{plain: {"layer.tar": "x"}, untagged: {"manifest.json": `[{"Config":"c.json","RepoTags":null}]`}} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for name, data := range files {
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(data)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{plain, untagged, filepath.Join(dir, "absent.tar")} {
		if got, err := ArchiveTags(p); err == nil {
			t.Errorf("ArchiveTags(%s) = %q, want an error", filepath.Base(p), got)
		}
	}
}
