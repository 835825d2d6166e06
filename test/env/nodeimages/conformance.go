package nodeimages

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The images the upstream MCS API conformance suite's pods name (without imagePullPolicy, so IfNotPresent: the
// kubelet runs them as long as the node already holds them). They are the suite's names in their familiar form,
// as `docker save` writes RepoTags; `ctr images import` normalizes them to docker.io/alpine/socat:1.7.4.4 and
// docker.io/nicolaka/netshoot:v0.15, which is also what the kubelet asks containerd for when a pod says
// `image: alpine/socat:1.7.4.4`.
const (
	// Socat stands for alpine/socat: busybox and Debian's socat. The suite's hello pods run a busybox shell
	// script (Command /bin/sh) that starts a socat listener whose SYSTEM address runs /bin/sh.
	Socat = "alpine/socat:1.7.4.4"
	// Netshoot stands for nicolaka/netshoot: busybox, and Debian's dash as /bin/sh, socat, OpenBSD nc, BIND's
	// nslookup, dig and host, and curl. The suite's request pod sets only Args, so the image must have no entrypoint: its Args
	// are then the whole command line.
	Netshoot = "nicolaka/netshoot:v0.15"
)

// hostTool is a program of this machine that a conformance image holds, with the libraries ldd names for it.
type hostTool struct {
	// src is the program on this machine (a symbolic link is followed).
	src string
	// dst is where the image holds it: over the busybox applet of the same name, if any, since the suite's
	// commands need the real tool (BIND nslookup's output format and OpenBSD nc's -4/-6/-v/-w flags).
	dst string
}

// shell is Debian's dash as /bin/sh, over busybox's: Debian's busybox-static is built with
// FEATURE_SH_STANDALONE, so its sh runs its own applets before any program on PATH, and the suite's `sh -c` would
// get busybox's nc (no -v, -4 or -6) and nslookup instead of the real ones. Alpine's busybox, in the upstream
// images, finds programs on PATH; so does dash. The other applets (grep, awk, tr, tail, sleep) stay busybox's.
var shell = hostTool{"/usr/bin/dash", "/bin/sh"}

// socatProgram is Debian's socat, which both images hold at /usr/lib/socat/socat, behind socatWrapper at
// /usr/bin/socat.
var socatProgram = hostTool{"/usr/bin/socat", "/usr/lib/socat/socat"}

// socatWrapper is the images' /usr/bin/socat: socat with the option cool-write added to every SYSTEM and EXEC
// address. socat 1.7.4.4 (Debian's, and upstream alpine/socat:1.7.4.4's, the same code) loses the reply of a
// SYSTEM child that exits before it reads its input, as the MCS suite's listener (SYSTEM:'echo "pod ip ..."')
// does: when the client's bytes arrive after the child exited, the write to the child fails with EPIPE and
// socat ends the connection before it forwards what the child printed; and the exit status that leaves behind
// ends a later connection's child process of the same listener before any transfer (its table of reaped children
// is cleared at fork, their statuses are not). Measured with the suite's listener and `echo hi | nc -v -w 2`: 8
// of 200 replies lost (socat -d -d -d logs one or the other cause for each), 0 of 200 with cool-write, which makes
// that EPIPE a notice. Upstream's image loses them too: this stand-in is deterministic where the image it stands
// for is not, and the same option in the suite's listener would fix both.
const socatWrapper = `#!/bin/sh
# socat 1.7.4.4 with cool-write on every SYSTEM and EXEC address (test/env/nodeimages/conformance.go says why).
for a do
	shift
	case $a in
	SYSTEM:* | EXEC:*) a="$a,cool-write" ;;
	esac
	set -- "$@" "$a"
done
exec /usr/lib/socat/socat "$@"
`

var (
	socatTools    = []hostTool{shell, socatProgram}
	netshootTools = []hostTool{
		shell,
		socatProgram,
		{"/usr/bin/nc.openbsd", "/usr/bin/nc"},
		{"/usr/bin/nslookup", "/usr/bin/nslookup"},
		{"/usr/bin/dig", "/usr/bin/dig"},
		{"/usr/bin/host", "/usr/bin/host"},
		{"/usr/bin/curl", "/usr/bin/curl"},
	}
)

// etcFiles are the data files both conformance images hold. The kubelet mounts /etc/hosts, /etc/hostname and
// /etc/resolv.conf over the image's. nsswitch.conf makes glibc's getaddrinfo (nc, curl, socat with a name) read
// /etc/hosts and then DNS, as Alpine's musl does without one; passwd and group name root for tools that look the
// user up.
var etcFiles = []File{
	{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\nnetworks: files\nservices: files\nprotocols: files\n")},
	{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
	{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	{Path: "/root", Mode: fs.ModeDir | 0o700},
	{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
}

// hostDataFiles are copied from this machine when present: nc -v and socat name ports from /etc/services and
// protocols from /etc/protocols.
var hostDataFiles = []string{"/etc/services", "/etc/protocols"}

// buildTools writes the two images of the MCS API conformance suite (Socat, and Netshoot, which is also our
// tests' Client and holds serve, the extra files, for their request loops) into dir as docker-archive tars,
// whose paths it returns. They are made from busybox and this machine's own programs with the shared libraries
// ldd names for them (make tools installs the programs).
func buildTools(ctx context.Context, dir string, extra ...File) ([]string, error) {
	box, err := busyboxFiles(ctx)
	if err != nil {
		return nil, err
	}
	var data []File
	for _, p := range hostDataFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // optional: only the names nc -v prints depend on them
		}
		data = append(data, File{Path: p, Mode: 0o644, Data: b})
	}
	base := append(slices.Clone(etcFiles), data...)
	base = append(base, File{Path: "/usr/bin/socat", Mode: 0o755, Data: []byte(socatWrapper)})
	return writeToolImages(ctx, dir, box, []toolImage{
		// alpine/socat's Dockerfile: ENTRYPOINT ["socat"], no CMD. The suite sets Command, so the entrypoint
		// is never used there; it is kept for a pod that passes only socat's arguments, as upstream allows.
		{"socat.tar", socatTools, base, Image{Tags: []string{Socat}, Entrypoint: []string{"socat"}, Env: []string{pathEnv}}},
		// nicolaka/netshoot's Dockerfile: no ENTRYPOINT, CMD ["zsh"]. No entrypoint matters: the suite's request
		// pod sets only Args (/bin/sh -ec ...), which replace CMD and run as the command. CMD is sh, not zsh,
		// which the image does not ship: it only starts an interactive shell of a pod that sets nothing.
		{"netshoot.tar", netshootTools, append(slices.Clone(base), extra...), Image{Tags: []string{Netshoot, Client}, Cmd: []string{"sh"}, Env: []string{pathEnv}}},
	})
}

// toolImage is an image made of busybox, this machine's tools with their libraries, and files of its own.
type toolImage struct {
	// file is the name of its docker archive.
	file  string
	tools []hostTool
	// files go over the tools and busybox: data files, and programs built here.
	files []File
	// im is the image's configuration; its Files are made here.
	im Image
}

// writeToolImages writes each image over box (busybox's files) into dir as a docker archive, and returns their
// paths.
func writeToolImages(ctx context.Context, dir string, box []File, images []toolImage) ([]string, error) {
	var paths []string
	for _, spec := range images {
		tools, err := toolFiles(ctx, spec.tools)
		if err != nil {
			return nil, err
		}
		im := spec.im
		im.Files = overlay(box, append(tools, spec.files...))
		p := filepath.Join(dir, spec.file)
		if err := writeImage(p, im); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeImage writes im's docker archive to path.
func writeImage(path string, im Image) error {
	var buf bytes.Buffer
	if err := im.WriteArchive(&buf); err != nil {
		return fmt.Errorf("nodeimages: %s: %w", filepath.Base(path), err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// toolFiles returns each tool at its place in the image and every library ldd names for any of them, at the path
// ldd gives (the dynamic loader's own path included): the loader finds them there without an ld.so.cache, since
// /lib/x86_64-linux-gnu and /lib64 are among its built-in directories.
func toolFiles(ctx context.Context, tools []hostTool) ([]File, error) {
	libs := map[string]bool{}
	var files []File
	for _, t := range tools {
		data, err := os.ReadFile(t.src)
		if err != nil {
			return nil, fmt.Errorf("nodeimages: %w (make tools installs socat, netcat-openbsd, dnsutils and curl; dash is Debian's /bin/sh)", err)
		}
		files = append(files, File{Path: t.dst, Mode: 0o755, Data: data})
		out, err := exec.CommandContext(ctx, "ldd", t.src).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("nodeimages: ldd %s: %v\n%s", t.src, err, out)
		}
		paths, err := parseLDD(string(out))
		if err != nil {
			return nil, fmt.Errorf("nodeimages: ldd %s: %w", t.src, err)
		}
		for _, p := range paths {
			libs[p] = true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(libs)) {
		data, err := os.ReadFile(p) // the file a versioned name's symbolic link points to
		if err != nil {
			return nil, fmt.Errorf("nodeimages: %w", err)
		}
		files = append(files, File{Path: p, Mode: 0o755, Data: data})
	}
	return files, nil
}

// parseLDD returns the paths of the libraries and of the dynamic loader in ldd's output, in order. The vDSO,
// which the kernel maps, has no path; a library ldd did not find is an error, since the program would not start.
func parseLDD(out string) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" || strings.Contains(line, "not a dynamic executable") {
			continue
		}
		name, target, mapped := strings.Cut(line, "=>")
		if !mapped {
			target = name // "/lib64/ld-linux-x86-64.so.2 (0x...)" or "linux-vdso.so.1 (0x...)"
		}
		target = strings.TrimSpace(target)
		if strings.HasPrefix(target, "not found") {
			return nil, fmt.Errorf("%s not found", strings.TrimSpace(name))
		}
		p, _, _ := strings.Cut(target, " ")
		if !strings.HasPrefix(p, "/") {
			if mapped {
				return nil, fmt.Errorf("unexpected line %q", line)
			}
			continue // the vDSO
		}
		paths = append(paths, p)
	}
	return paths, sc.Err()
}

// overlay returns base with the entries of over added, an entry of over replacing base's entry of the same path
// (a real tool over busybox's applet link).
func overlay(base, over []File) []File {
	replaced := map[string]bool{}
	for _, f := range over {
		replaced[f.Path] = true
	}
	var out []File
	for _, f := range base {
		if !replaced[f.Path] {
			out = append(out, f)
		}
	}
	return append(out, over...)
}
