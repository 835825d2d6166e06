package nodeimages

import (
	"bytes"
	"context"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestBuildK8sDNS builds the stand-ins of Kubernetes' DNS specs, with this machine's busybox (static) and socat
// (dynamic) in place of agnhost and our CoreDNS, and checks, without running them, what a container needs to run
// what the specs run: the tools over busybox's applets, a real shell, agnhost as the entrypoint, both programs
// where the specs call them, and every library each ELF file needs. Running them on kubelet nodes is
// test/e2e/k8sdns's part.
func TestBuildK8sDNS(t *testing.T) {
	const staticProg, dynamicProg = busybox, "/usr/bin/socat"
	for _, tool := range append(slices.Clone(dnsProbeTools), hostTool{src: staticProg}, hostTool{src: dynamicProg}) {
		if _, err := os.Stat(tool.src); err != nil {
			t.Skipf("%v: run `make tools`", err)
		}
	}
	paths, err := BuildK8sDNS(context.Background(), t.TempDir(), K8sDNSPrograms{Agnhost: staticProg, CoreDNS: dynamicProg})
	if err != nil {
		t.Fatal(err)
	}
	// The probe loops' commands (dns_common.go's createProbeCommand), and what the specs exec in the pods.
	probe := []string{"/bin/sh", "/usr/bin/dig", "/usr/bin/nslookup", "/usr/bin/getent", "/usr/bin/seq", "/bin/sleep", "/bin/cat", "/bin/hostname", "/etc/nsswitch.conf"}
	wants := map[string]struct {
		im    Image
		files []string
	}{
		"agnhost.tar": {Image{Tags: []string{Agnhost}, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{pathEnv}},
			append(slices.Clone(probe), "/agnhost", "/coredns")},
		"glibc-dns-testing.tar": {Image{Tags: []string{GlibcDNSTesting}, Cmd: []string{"sh"}, Env: []string{pathEnv}}, probe},
	}
	if len(paths) != len(wants) {
		t.Fatalf("images %v, want %d", paths, len(wants))
	}
	box, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	socat, err := os.ReadFile(dynamicProg)
	if err != nil {
		t.Fatal(err)
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
		tag := want.im.Tags[0]
		files := layerFiles(t, checkArchive(t, archive, want.im))
		for _, name := range want.files {
			f, ok := resolve(files, name)
			if !ok {
				t.Errorf("%s: no %s", tag, name)
				continue
			}
			if name == "/bin/sh" && bytes.Equal(f.Data, box) {
				t.Errorf("%s: /bin/sh is busybox's, which runs its own applets before the real tools", tag)
			}
		}
		if tag == Agnhost {
			if f := files["/agnhost"]; f.Link != "" || !bytes.Equal(f.Data, box) {
				t.Errorf("%s: /agnhost is not the static program given", tag)
			}
			if f := files["/coredns"]; f.Link != "" || !bytes.Equal(f.Data, socat) {
				t.Errorf("%s: /coredns is not the dynamic program given", tag)
			}
		}
		checkLibraries(t, tag, files)
	}
}

func TestBuildK8sDNSNotAProgram(t *testing.T) {
	notELF := path.Join(t.TempDir(), "agnhost")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range append(slices.Clone(dnsProbeTools), hostTool{src: busybox}) {
		if _, err := os.Stat(tool.src); err != nil {
			t.Skipf("%v: run `make tools`", err)
		}
	}
	_, err := BuildK8sDNS(context.Background(), t.TempDir(), K8sDNSPrograms{Agnhost: notELF, CoreDNS: notELF})
	if err == nil || !strings.Contains(err.Error(), "/agnhost") {
		t.Errorf("BuildK8sDNS with a script for agnhost: error %v, want one naming /agnhost: the image could not run it", err)
	}
}
