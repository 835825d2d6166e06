package nodeimages

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseLDD(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		want    []string
		wantErr string
	}{{
		name: "libraries and the loader, without the vDSO",
		out: "\tlinux-vdso.so.1 (0x00007ffd5b5f2000)\n" +
			"\tlibbsd.so.0 => /lib/x86_64-linux-gnu/libbsd.so.0 (0x00007f0e1c9a0000)\n" +
			"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e1c7be000)\n" +
			"\t/lib64/ld-linux-x86-64.so.2 (0x00007f0e1ca54000)\n",
		want: []string{"/lib/x86_64-linux-gnu/libbsd.so.0", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"},
	}, {
		name: "a static program needs nothing",
		out:  "\tstatically linked\n",
	}, {
		name: "not dynamic",
		out:  "\tnot a dynamic executable\n",
	}, {
		name:    "a missing library",
		out:     "\tlibwrap.so.0 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e1c7be000)\n",
		wantErr: "libwrap.so.0 not found",
	}, {
		name:    "a mapping to no path",
		out:     "\tlibc.so.6 => (0x00007f0e1c7be000)\n",
		wantErr: "unexpected line",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLDD(tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("parseLDD = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestOverlay(t *testing.T) {
	base := []File{{Path: "/bin/busybox", Data: []byte("box")}, {Path: "/usr/bin/nc", Link: "/bin/busybox"}, {Path: "/bin/sh", Link: "/bin/busybox"}}
	over := []File{{Path: "/usr/bin/nc", Data: []byte("openbsd")}, {Path: "/usr/bin/dig", Data: []byte("dig")}}
	var got []string
	for _, f := range overlay(base, over) {
		got = append(got, f.Path+"="+f.Link+string(f.Data))
	}
	want := []string{"/bin/busybox=box", "/bin/sh=/bin/busybox", "/usr/bin/nc=openbsd", "/usr/bin/dig=dig"}
	if !slices.Equal(got, want) {
		t.Errorf("overlay = %q, want %q: the real nc replaces busybox's link and the rest is kept", got, want)
	}
}

// TestBuildTools builds the conformance images from this machine's tools and checks, without running
// them, what a container needs to start each tool: the tool over busybox's applet, the dynamic loader each ELF
// file names, and every library it needs (DT_NEEDED, recursively) in a directory the loader searches. Running
// them on kubelet nodes is test/e2e/kubeletnodes's part.
func TestBuildTools(t *testing.T) {
	for _, tool := range append(slices.Clone(netshootTools), hostTool{src: busybox}) {
		if _, err := os.Stat(tool.src); err != nil {
			t.Skipf("%v: run `make tools`", err)
		}
	}
	paths, err := buildTools(context.Background(), t.TempDir(), File{Path: ServeBin, Mode: 0o755, Data: []byte("serve")})
	if err != nil {
		t.Fatal(err)
	}
	wants := map[string]struct {
		tags       []string
		entrypoint []string
		tools      []string
	}{
		"socat.tar":    {[]string{Socat}, []string{"socat"}, []string{"/usr/bin/socat", "/usr/lib/socat/socat", "/bin/sh", "/bin/grep", "/usr/bin/awk", "/usr/bin/tr"}},
		"netshoot.tar": {[]string{Netshoot, Client}, nil, []string{"/usr/bin/socat", "/usr/lib/socat/socat", "/usr/bin/nc", "/usr/bin/nslookup", "/usr/bin/dig", "/usr/bin/curl", "/bin/sh", "/bin/sleep", "/usr/bin/tail", ServeBin}},
	}
	if len(paths) != len(wants) {
		t.Fatalf("images %v, want %d", paths, len(wants))
	}
	for _, p := range paths {
		want, ok := wants[path.Base(p)]
		if !ok {
			t.Fatalf("unexpected image %s", p)
		}
		archive, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d MiB", path.Base(p), len(archive)>>20)
		im := Image{Tags: want.tags, Entrypoint: want.entrypoint, Env: []string{pathEnv}}
		if want.entrypoint == nil {
			im.Cmd = []string{"sh"}
		}
		files := layerFiles(t, checkArchive(t, archive, im))
		for _, tool := range want.tools {
			f, ok := resolve(files, tool)
			if !ok {
				t.Errorf("%s: no %s", want.tags[0], tool)
				continue
			}
			if tool == "/usr/bin/socat" && string(f.Data) != socatWrapper {
				t.Errorf("%s: /usr/bin/socat is not the wrapper that adds cool-write", want.tags[0])
			}
			if tool == "/usr/bin/nc" || tool == "/usr/bin/nslookup" || tool == "/bin/sh" {
				if f.Link != "" || bytes.Equal(f.Data, files[busybox].Data) {
					t.Errorf("%s: %s is busybox's; the suite needs the real tool, and a shell that runs it", want.tags[0], tool)
				}
			}
		}
		checkLibraries(t, want.tags[0], files)
	}
}

// layerFiles reads a layer into its entries by path.
func layerFiles(t *testing.T, layer []byte) map[string]File {
	t.Helper()
	files := map[string]File{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = File{Path: "/" + h.Name, Data: b, Link: h.Linkname}
	}
}

// resolve follows symbolic links (absolute ones, as the images hold) to a regular file.
func resolve(files map[string]File, p string) (File, bool) {
	for range 8 {
		f, ok := files[p]
		if !ok || f.Link == "" {
			return f, ok
		}
		p = f.Link
	}
	return File{}, false
}

// checkLibraries fails t unless every ELF file of the image finds its interpreter and each library it needs in
// the directories the dynamic loader searches without an ld.so.cache.
func checkLibraries(t *testing.T, tag string, files map[string]File) {
	t.Helper()
	searched := []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib", "/lib64"}
	elves := 0
	for p, f := range files {
		if f.Link != "" || !bytes.HasPrefix(f.Data, []byte("\x7fELF")) {
			continue
		}
		ef, err := elf.NewFile(bytes.NewReader(f.Data))
		if err != nil {
			t.Errorf("%s: %s: %v", tag, p, err)
			continue
		}
		elves++
		for _, prog := range ef.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			interp, err := io.ReadAll(prog.Open())
			if err != nil {
				t.Fatal(err)
			}
			if name := strings.TrimRight(string(interp), "\x00"); !has(files, name) {
				t.Errorf("%s: %s's interpreter %s is not in the image", tag, p, name)
			}
		}
		needed, err := ef.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: %s: %v", tag, p, err)
		}
		for _, lib := range needed {
			if !slices.ContainsFunc(searched, func(dir string) bool { return has(files, path.Join(dir, lib)) }) {
				t.Errorf("%s: %s needs %s, which is in none of %v", tag, p, lib, searched)
			}
		}
		ef.Close()
	}
	if elves < 3 {
		t.Errorf("%s: %d ELF files; want the tools, busybox and their libraries", tag, elves)
	}
}

func has(files map[string]File, p string) bool {
	_, ok := resolve(files, p)
	return ok
}

// TestSocatWrapper runs the images' /usr/bin/socat with dash, Debian's /bin/sh as the images' is, in front of a
// stand-in for the real socat that prints its arguments one per line: cool-write goes on SYSTEM and EXEC addresses
// alone, and every argument, spaces and quotes included, reaches socat as it was given.
func TestSocatWrapper(t *testing.T) {
	if _, err := os.Stat(shell.src); err != nil {
		t.Skipf("%v: dash is Debian's /bin/sh", err)
	}
	dir := t.TempDir()
	wrapper := strings.ReplaceAll(socatWrapper, "/usr/lib/socat/socat", filepath.Join(dir, "real"))
	for name, script := range map[string]string{"socat": wrapper, "real": "#!/bin/sh\nprintf '%s\\n' \"$@\"\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-v", "-v", "TCP6-LISTEN:42,crlf,reuseaddr,fork,ipv6only=0", `SYSTEM:echo "pod ip $first_ip"`, "EXEC:cat", "STDIO", "a b"}
	out, err := exec.Command(shell.src, append([]string{filepath.Join(dir, "socat")}, args...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-v", "-v", "TCP6-LISTEN:42,crlf,reuseaddr,fork,ipv6only=0", `SYSTEM:echo "pod ip $first_ip",cool-write`, "EXEC:cat,cool-write", "STDIO", "a b"}
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("socat got %q, want %q", got, want)
	}
}
