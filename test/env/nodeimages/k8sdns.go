package nodeimages

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"slices"
)

// The images the pods of Kubernetes' `[sig-network] DNS` specs name (k8s.io/kubernetes/test/e2e/network: dns.go,
// dns_common.go, dns_configmap.go), as test/utils/image of the pinned Kubernetes computes them; `e2e.test
// --list-images` prints them, and test/e2e/k8sdns checks that it still does before a run. The specs' pods set
// imagePullPolicy IfNotPresent or nothing, so the kubelet runs them as long as the node holds them.
const (
	// Agnhost stands for agnhost (Alpine with BIND's tools, and CoreDNS at /coredns): agnhost built from the
	// pinned Kubernetes' source at /agnhost, its entrypoint; busybox, and Debian's dash as /bin/sh, BIND's dig and
	// nslookup and glibc's getent, which the specs' probe loops run (`sh -c` with seq, dig, getent, test, echo);
	// and our CoreDNS at /coredns, which the nameserver specs run with stock plugins only (hosts, forward, log).
	Agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	// GlibcDNSTesting stands for glibc-dns-testing, formerly jessie-dnsutils (Debian with dnsutils), the specs'
	// glibc prober beside agnhost's musl one: busybox, and Debian's dash as /bin/sh, dig, nslookup and getent.
	GlibcDNSTesting = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
)

// K8sDNSPrograms are the programs of the Agnhost stand-in that are built, not taken from this machine's packages.
type K8sDNSPrograms struct {
	// Agnhost is agnhost, built from the pinned Kubernetes' source (build/tools.sh's set k8se2e).
	Agnhost string
	// CoreDNS is our CoreDNS, stock CoreDNS with one plugin more, which stands in for the release of stock
	// CoreDNS upstream's agnhost image holds.
	CoreDNS string
}

// dnsProbeTools are what both images run of this machine's: dash (see shell), and the real dig, nslookup and
// getent, which busybox lacks or has in another form.
var dnsProbeTools = []hostTool{
	shell,
	{"/usr/bin/dig", "/usr/bin/dig"},
	{"/usr/bin/nslookup", "/usr/bin/nslookup"},
	{"/usr/bin/getent", "/usr/bin/getent"},
}

// BuildK8sDNS writes the Agnhost and GlibcDNSTesting stand-ins into dir as docker-archive tars, whose paths it
// returns: busybox and dnsProbeTools with the libraries ldd names for them and the data files etcFiles lists, and in
// Agnhost's, progs (with their libraries, if dynamically linked).
func BuildK8sDNS(ctx context.Context, dir string, progs K8sDNSPrograms) ([]string, error) {
	box, err := busyboxFiles(ctx)
	if err != nil {
		return nil, err
	}
	agnhostTools := slices.Clone(dnsProbeTools)
	var static []File
	for _, p := range []hostTool{{progs.Agnhost, "/agnhost"}, {progs.CoreDNS, "/coredns"}} {
		f, err := staticProgram(p)
		switch {
		case err != nil:
			return nil, err
		case f == nil: // toolFiles adds the libraries it needs
			agnhostTools = append(agnhostTools, p)
		default:
			static = append(static, *f)
		}
	}
	return writeToolImages(ctx, dir, box, []toolImage{
		// agnhost's Dockerfile: ENTRYPOINT ["/agnhost"], CMD ["pause"]; the specs' pods pass the subcommand as
		// Args (test-webserver, pause) or replace the command (sh -c, /coredns).
		{"agnhost.tar", agnhostTools, append(slices.Clone(etcFiles), static...), Image{Tags: []string{Agnhost}, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{pathEnv}}},
		// Debian's CMD ["bash"], which the image does not ship: the specs always set the command (sh -c).
		{"glibc-dns-testing.tar", dnsProbeTools, etcFiles, Image{Tags: []string{GlibcDNSTesting}, Cmd: []string{"sh"}, Env: []string{pathEnv}}},
	})
}

// staticProgram returns the program p as a file of an image when it is statically linked (agnhost, built with
// CGO_ENABLED=0), and nil when it is dynamically linked (our CoreDNS, built with cgo where a C compiler is), which
// needs its libraries: ldd, which toolFiles runs, fails on a static program.
func staticProgram(p hostTool) (*File, error) {
	ef, err := elf.Open(p.src)
	if err != nil {
		return nil, fmt.Errorf("nodeimages: %s: %w", p.dst, err)
	}
	dynamic := slices.ContainsFunc(ef.Progs, func(prog *elf.Prog) bool { return prog.Type == elf.PT_INTERP })
	ef.Close()
	if dynamic {
		return nil, nil
	}
	data, err := os.ReadFile(p.src)
	if err != nil {
		return nil, fmt.Errorf("nodeimages: %w", err)
	}
	return &File{Path: p.dst, Mode: 0o755, Data: data}, nil
}
