package dataplane

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"vksfleet.dev/fleet/test/env/poll"
)

// Nodes that run a real kubelet and containerd keep their files under two folders whose names are fixed, so that
// Sweep finds them after a crash as it finds namespaces: state and sockets (tmpfs) under RunDir, and everything
// else (containerd's root, the kubelet's root-dir and certificates, pod logs, IPAM) under DataDir.
const (
	RunDir  = "/run/" + Prefix
	DataDir = "/var/lib/" + Prefix
)

// NodeRunDir and NodeDataDir are one node's folders under RunDir and DataDir.
func NodeRunDir(node string) string  { return filepath.Join(RunDir, node) }
func NodeDataDir(node string) string { return filepath.Join(DataDir, node) }

// NodeCgroupRoot is the kubelet's cgroupRoot of a node, created in every cgroup hierarchy: pods go below it.
func NodeCgroupRoot(node string) string { return "/" + Prefix + "-" + node }

// CNINetwork is the name of the nodes' CNI network: containerd 1.6 keeps each pod's CNI result in the host-wide
// cniResults folder as <network>-<container id>-<interface>, and its loopback as cni-loopback-<container id>-lo.
const CNINetwork = Prefix

// CgroupFS is where the cgroup hierarchies are mounted: kubelet nodes make their cgroupRoot in each.
const CgroupFS = "/sys/fs/cgroup"

// Folders outside a node's own that its kubelet and containerd write to, whatever their flags say.
const (
	cniResults = "/var/lib/cni/results"
	// shimSockets holds containerd 1.6's shim sockets, named by a hash that includes the containerd address.
	shimSockets = "/run/containerd/s"
	// devicePluginSocket is hard-coded in the kubelet, for every instance on the host.
	devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"
)

// sweepRuntimes removes what kubelet nodes leave behind: it kills their processes (kubelet, containerd, shims and
// the pods' processes, found by command line and cgroup), unmounts what is mounted under RunDir and DataDir,
// removes the nodes' cgroups, folders, CNI results and the stale sockets in shared folders. It is safe to call
// when nothing is there.
func sweepRuntimes() error {
	var errs []error
	pids := runtimePIDs(allNodes)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Not our children: there is nothing to wait on but their pids.
	if err := poll.Until(context.Background(), 20*time.Millisecond, 10*time.Second, func() error {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return fmt.Errorf("pid %d still runs after SIGKILL", pid)
			}
		}
		return nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("dataplane: %w", err))
	}
	for _, m := range runtimeMounts() {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("dataplane: unmounting %s: %w", m, err))
		}
	}
	for _, dir := range runtimeCgroups(allNodes.cgroup) {
		errs = append(errs, removeCgroup(dir))
	}
	for _, dir := range []string{RunDir, DataDir} {
		errs = append(errs, os.RemoveAll(dir))
	}
	for _, f := range cniResultFiles() {
		errs = append(errs, os.Remove(f))
	}
	for _, s := range staleSockets() {
		errs = append(errs, os.Remove(s))
	}
	// Shared folders go only once empty: another runtime on the host may use them.
	for _, dir := range []string{cniResults, filepath.Dir(cniResults), shimSockets, filepath.Dir(shimSockets),
		filepath.Dir(devicePluginSocket), filepath.Dir(filepath.Dir(devicePluginSocket))} {
		_ = os.Remove(dir)
	}
	return errors.Join(errs...)
}

// runtimeLeftovers describes what of kubelet nodes exists now, in Leftovers' words.
func runtimeLeftovers() []string {
	var left []string
	for _, pid := range runtimePIDs(allNodes) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		left = append(left, fmt.Sprintf("process %d %s", pid, strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " ")))
	}
	for _, m := range runtimeMounts() {
		left = append(left, "mount "+m)
	}
	for _, dir := range runtimeCgroups(allNodes.cgroup) {
		left = append(left, "cgroup "+dir)
	}
	for _, dir := range []string{RunDir, DataDir} {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "folder "+dir)
		}
	}
	for _, f := range cniResultFiles() {
		left = append(left, "CNI result "+f)
	}
	socks, _ := filepath.Glob(filepath.Join(shimSockets, "*"))
	for _, s := range socks {
		left = append(left, "shim socket "+s)
	}
	return left
}

// nodeFiles says where the files of some kubelet nodes are: folders that their processes' command lines name,
// and the name pattern of their cgroups below each hierarchy's root.
type nodeFiles struct {
	dirs   []string
	cgroup string
}

// allNodes matches every kubelet node.
var allNodes = nodeFiles{dirs: []string{RunDir + "/", DataDir + "/"}, cgroup: Prefix + "-*"}

// NodeProcesses lists the processes left of one kubelet node: a kubelet, containerd or shim whose command line
// names the node's folders, and any process in the node's cgroups. Once its containerd has stopped after the
// kubelet stopped every pod, there should be none.
func NodeProcesses(node string) []int {
	return runtimePIDs(nodeFiles{
		dirs:   []string{NodeRunDir(node) + "/", NodeDataDir(node) + "/"},
		cgroup: strings.TrimPrefix(NodeCgroupRoot(node), "/"),
	})
}

// runtimePIDs are the processes of the nodes: those whose command line names one of their folders (kubelet,
// containerd, its shims) and those in their cgroups (the pods').
func runtimePIDs(nodes nodeFiles) []int {
	seen := map[int]bool{}
	self := os.Getpid()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !slices.ContainsFunc(nodes.dirs, func(d string) bool { return bytes.Contains(b, []byte(d)) }) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != self {
			seen[pid] = true
		}
	}
	for _, dir := range runtimeCgroups(nodes.cgroup) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != self {
				seen[pid] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// runtimeMounts are the mount points under RunDir and DataDir, deepest first, so that each can be unmounted.
func runtimeMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The fifth field is the mount point, with spaces and such octal-escaped.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		m := fields[4]
		if (m == RunDir || strings.HasPrefix(m, RunDir+"/") || m == DataDir || strings.HasPrefix(m, DataDir+"/")) && !slices.Contains(mounts, m) {
			mounts = append(mounts, m)
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return mounts
}

// runtimeCgroups are the folders of the cgroups named by pattern, and all below them, in every hierarchy, deepest
// first.
func runtimeCgroups(pattern string) []string {
	roots, _ := filepath.Glob(filepath.Join(CgroupFS, "*", pattern))
	var dirs []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")) })
	return dirs
}

// removeCgroup removes an empty cgroup folder, retrying while the kernel still counts processes that were just
// killed in it (a process leaves /proc before its cgroup lets go of it).
func removeCgroup(dir string) error {
	err := poll.Until(context.Background(), 20*time.Millisecond, 5*time.Second, func() error {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dataplane: removing cgroup %s: %w", dir, err)
	}
	return nil
}

// cniResultFiles are the CNI results of the nodes' network, and every loopback result: containerd names those
// without the network, so ours cannot be told apart (another CRI runtime on the host would lose its own, which
// only the loopback's teardown reads).
func cniResultFiles() []string {
	ours, _ := filepath.Glob(filepath.Join(cniResults, CNINetwork+"-*"))
	loops, _ := filepath.Glob(filepath.Join(cniResults, "cni-loopback-*"))
	return append(ours, loops...)
}

// staleSockets are sockets in the host-wide folders that nothing listens on any more: the shims' and the
// kubelet's device-plugin socket. A socket something still listens on belongs to a live runtime and stays.
func staleSockets() []string {
	socks, _ := filepath.Glob(filepath.Join(shimSockets, "*"))
	var stale []string
	for _, s := range append(socks, devicePluginSocket) {
		if _, err := os.Lstat(s); err != nil {
			continue
		}
		c, err := net.DialTimeout("unix", s, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		stale = append(stale, s)
	}
	return stale
}
