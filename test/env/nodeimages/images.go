package nodeimages

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Names of the images Build writes. Pods must use imagePullPolicy Never with them (an image without a tag is
// :latest, which the kubelet would otherwise always try to pull): no registry is reachable.
const (
	// Pause is every node's sandbox image (containerd's sandbox_image).
	Pause = "vksfleet.dev/pause:1"
	// Serve names the workload image, under the name test/env/workload's pods use: serve at ServeBin and busybox
	// with its applets (sh, nc, nslookup, wget, sleep, ...) in /bin, /sbin, /usr/bin and /usr/sbin.
	Serve = "vksfleet.dev/serve:latest"
	// Client names the image of test/env/workload's client pods: Netshoot, with real dig, curl, OpenBSD nc and socat
	// beside busybox, and serve at ServeBin for request loops.
	Client = "vksfleet.dev/client:latest"
)

// ServeBin is where the workload image holds serve (test/env/cmd/serve): pods pass it as their command.
const ServeBin = "/bin/serve"

// busybox is Debian's busybox-static, which runs without any library from the host.
const busybox = "/bin/busybox"

// pathEnv is the PATH of the workload image: the container runtime looks a command without a slash up there.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Build compiles pause and serve (static, from this module: it must run inside it) and writes the pause, the
// workload and the tool images (buildTools) into dir as docker-archive tars, whose paths it returns.
func Build(ctx context.Context, dir string) ([]string, error) {
	bin := filepath.Join(dir, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin+"/",
		"vksfleet.dev/fleet/test/env/cmd/pause", "vksfleet.dev/fleet/test/env/cmd/serve")
	// Static: the images hold no C library.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nodeimages: building pause and serve: %v\n%s", err, out)
	}
	pause, err := os.ReadFile(filepath.Join(bin, "pause"))
	if err != nil {
		return nil, err
	}
	serve, err := os.ReadFile(filepath.Join(bin, "serve"))
	if err != nil {
		return nil, err
	}
	shell, err := busyboxFiles(ctx)
	if err != nil {
		return nil, err
	}
	images := map[string]Image{
		"pause.tar": {Tags: []string{Pause}, Entrypoint: []string{"/pause"},
			Files: []File{{Path: "/pause", Mode: 0o755, Data: pause}}},
		"workload.tar": {Tags: []string{Serve}, Cmd: []string{ServeBin}, Env: []string{pathEnv},
			Files: append(shell,
				File{Path: ServeBin, Mode: 0o755, Data: serve},
				File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
			)},
	}
	var paths []string
	for name, im := range images {
		var buf bytes.Buffer
		if err := im.WriteArchive(&buf); err != nil {
			return nil, fmt.Errorf("nodeimages: %s: %w", name, err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	tools, err := buildTools(ctx, dir, File{Path: ServeBin, Mode: 0o755, Data: serve})
	return append(paths, tools...), err
}

// busyboxFiles returns busybox and a symbolic link to it for each of its applets, where `busybox --list-full`
// puts them.
func busyboxFiles(ctx context.Context) ([]File, error) {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("nodeimages: %w (install busybox-static: `make tools`)", err)
	}
	out, err := exec.CommandContext(ctx, busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("nodeimages: busybox --list-full: %w", err)
	}
	files := []File{{Path: busybox, Mode: 0o755, Data: data}}
	for _, applet := range strings.Fields(string(out)) {
		if p := "/" + applet; p != busybox {
			files = append(files, File{Path: p, Link: busybox})
		}
	}
	return files, nil
}

// Import loads docker-archive tars into the containerd at address, in the namespace the kubelet's CRI uses.
func Import(ctx context.Context, address string, archives ...string) error {
	for _, a := range archives {
		out, err := exec.CommandContext(ctx, "ctr", "-a", address, "-n", "k8s.io", "images", "import", a).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nodeimages: importing %s into %s: %v\n%s", filepath.Base(a), address, err, out)
		}
	}
	return nil
}
