package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockName is the abstract unix socket whose listener is the machine-wide lock: the kernel releases it when the
// holder dies, and it leaves no file behind.
const lockName = "@vksfleet-dataplane"

// routeProto marks every host route this package adds, so that Sweep finds them even after a crash.
const routeProto = "77"

// Plane is the running data plane of one local clusterset.
type Plane struct {
	lock net.Listener
}

// Acquire checks that this machine can run a data plane (root, ip, nsenter and network namespaces), waits up to
// wait for the machine-wide lock, removes what an earlier data plane may have left behind, and builds the fabric
// and its link to the host.
func Acquire(ctx context.Context, wait time.Duration) (*Plane, error) {
	if err := CheckHost(); err != nil {
		return nil, err
	}
	lock, err := lockMachine(ctx, wait)
	if err != nil {
		return nil, err
	}
	p := &Plane{lock: lock}
	if err := Sweep(); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	if err := p.buildFabric(); err != nil {
		return nil, errors.Join(fmt.Errorf("dataplane: building the fabric: %w", err), p.Close())
	}
	return p, nil
}

// CheckHost says, in a message meant for the person running `make up`, why this machine cannot run a data plane.
func CheckHost() error {
	if os.Geteuid() != 0 {
		return errors.New("dataplane: the local clusterset's nodes are network namespaces with veth links and " +
			"nftables rules, which need root: run as root (or in a VM or container where you are root)")
	}
	for _, tool := range []string{"ip", "nsenter", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("dataplane: %s not found on PATH: install iproute2, util-linux and procps", tool)
		}
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return errors.New("dataplane: this kernel has no network namespaces (/proc/self/ns/net is missing)")
	}
	return nil
}

// HoldMachine waits up to wait for the machine-wide lock that a data plane holds and takes it without building
// one: a test whose load would disturb a data-plane test's measurements runs apart from it. Close releases it.
func HoldMachine(ctx context.Context, wait time.Duration) (io.Closer, error) {
	return lockMachine(ctx, wait)
}

func lockMachine(ctx context.Context, wait time.Duration) (net.Listener, error) {
	deadline := time.Now().Add(wait)
	for {
		l, err := net.Listen("unix", lockName)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("dataplane: taking the machine-wide lock: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dataplane: another local clusterset with a data plane runs on this machine "+
				"(it holds %s); stop it first (`make down`), or wait for its tests to end", lockName)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// SweepIdle removes what a crashed data plane left behind, unless a data plane is running on this machine. It
// reports whether it swept.
func SweepIdle() (bool, error) {
	lock, err := lockMachine(context.Background(), 0)
	if err != nil {
		return false, nil
	}
	defer lock.Close()
	return true, Sweep()
}

// Close removes everything the data plane created and releases the lock. Processes still running inside its
// namespaces are killed.
func (p *Plane) Close() error {
	err := Sweep()
	if p.lock != nil {
		err = errors.Join(err, p.lock.Close())
	}
	return err
}

func (p *Plane) buildFabric() error {
	if err := Run("ip", "netns", "add", FabricNS); err != nil {
		return err
	}
	return RunAll(
		[]string{"ip", "-n", FabricNS, "link", "set", "lo", "up"},
		forwarding(FabricNS),
		[]string{"ip", "link", "add", HostLink, "type", "veth", "peer", "name", fabricHostLink, "netns", FabricNS},
		[]string{"ip", "link", "set", HostLink, "up"},
		[]string{"ip", "addr", "add", HostV4.String() + "/32", "dev", HostLink},
		[]string{"ip", "addr", "add", HostV6.String() + "/128", "dev", HostLink, "nodad"},
		[]string{"ip", "route", "add", fabricV4.String(), "dev", HostLink, "proto", routeProto},
		[]string{"ip", "route", "add", fabricV6.String(), "dev", HostLink, "proto", routeProto},
		[]string{"ip", "route", "add", nodeRanges[0].String(), "via", fabricV4.String(), "proto", routeProto},
		[]string{"ip", "route", "add", nodeRanges[1].String(), "via", fabricV6.String(), "proto", routeProto},
		[]string{"ip", "-n", FabricNS, "link", "set", fabricHostLink, "up"},
		[]string{"ip", "-n", FabricNS, "addr", "add", fabricV4.String() + "/32", "dev", fabricHostLink},
		[]string{"ip", "-n", FabricNS, "addr", "add", fabricV6.String() + "/128", "dev", fabricHostLink, "nodad"},
		[]string{"ip", "-n", FabricNS, "route", "add", HostV4.String(), "dev", fabricHostLink},
		[]string{"ip", "-n", FabricNS, "route", "add", HostV6.String(), "dev", fabricHostLink},
	)
}

// AddMember routes a member's pod CIDRs from the host into the fabric, and makes its Service CIDRs unreachable
// from the host: a Service address means something only to a node's kube-proxy.
func (p *Plane) AddMember(podCIDRs, serviceCIDRs []netip.Prefix) error {
	var cmds [][]string
	for _, c := range podCIDRs {
		via := fabricV4
		if c.Addr().Is6() {
			via = fabricV6
		}
		cmds = append(cmds, []string{"ip", "route", "add", c.String(), "via", via.String(), "proto", routeProto})
	}
	for _, c := range serviceCIDRs {
		cmds = append(cmds, Unreachable(c))
	}
	return RunAll(cmds...)
}

// Unreachable is the command that gives the host an unreachable route for c, marked for Sweep.
func Unreachable(c netip.Prefix) []string {
	return []string{"ip", "route", "add", "unreachable", c.String(), "proto", routeProto}
}

// Node is a node's network namespace, linked to the fabric.
type Node struct {
	// NS is the network namespace's name.
	NS string
	// Addrs are the node's IPv4 and IPv6 addresses.
	Addrs []netip.Addr
	// PodCIDRs are the node's share of its member's pod CIDRs.
	PodCIDRs []netip.Prefix
}

// AddNode creates node j of member i: a network namespace with forwarding on, linked to the fabric, which routes
// the node's addresses and pod CIDRs to it.
func (p *Plane) AddNode(member, node int, name string, memberPodCIDRs []netip.Prefix) (*Node, error) {
	v4, v6, err := NodeAddrs(member, node)
	if err != nil {
		return nil, err
	}
	cidrs, err := NodePodCIDRs(memberPodCIDRs, node)
	if err != nil {
		return nil, err
	}
	n := &Node{NS: NodeNS(name), Addrs: []netip.Addr{v4, v6}, PodCIDRs: cidrs}
	link := fabricLink(member, node)
	if err := Run("ip", "netns", "add", n.NS); err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"ip", "-n", n.NS, "link", "set", "lo", "up"},
		forwarding(n.NS),
		{"ip", "-n", FabricNS, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", n.NS},
		{"ip", "-n", FabricNS, "link", "set", link, "up"},
		{"ip", "-n", FabricNS, "addr", "add", gatewayV6.String() + "/64", "dev", link, "nodad"},
		{"ip", "-n", FabricNS, "route", "add", v4.String(), "dev", link},
		{"ip", "-n", FabricNS, "route", "add", v6.String(), "dev", link},
		{"ip", "-n", n.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", n.NS, "addr", "add", v4.String() + "/32", "dev", "eth0"},
		{"ip", "-n", n.NS, "addr", "add", v6.String() + "/128", "dev", "eth0", "nodad"},
		{"ip", "-n", n.NS, "route", "add", "default", "via", fabricV4.String(), "dev", "eth0", "onlink"},
		{"ip", "-n", n.NS, "route", "add", "default", "via", gatewayV6.String(), "dev", "eth0"},
	}
	for _, c := range cidrs {
		via := v4
		if c.Addr().Is6() {
			via = v6
		}
		// The node routes each of its pods on its own link; an address of its share with no pod is unreachable
		// here, as a CNI's blackhole or failed neighbour makes it, rather than sent back to the fabric, which
		// routes it here again until its TTL runs out.
		cmds = append(cmds, []string{"ip", "-n", FabricNS, "route", "add", c.String(), "via", via.String(), "dev", link},
			[]string{"ip", "-n", n.NS, "route", "add", "unreachable", c.String()})
	}
	if err := RunAll(cmds...); err != nil {
		return nil, fmt.Errorf("dataplane: node %s: %w", name, err)
	}
	return n, nil
}

// forwarding is the command that makes a namespace route: Linux keeps these switches per network namespace.
func forwarding(ns string) []string {
	return []string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"}
}

// Sweep removes every namespace, link, route and /etc/netns folder a data plane creates, killing the processes
// left in those namespaces, and whatever kubelet nodes leave (see sweepRuntimes). It is safe to call when nothing is there.
func Sweep() error {
	// Kubelet nodes first: their processes run in the namespaces, and their pods' in namespaces of their own.
	errs := []error{sweepRuntimes()}
	for _, ns := range Namespaces() {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := Run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	// Deleting the fabric's namespace deletes its end of the host link, and the kernel removes the host's end
	// soon after, not at once: the link may go between the look and the delete.
	if _, err := net.InterfaceByName(HostLink); err == nil {
		if err := Run("ip", "link", "del", HostLink); err != nil {
			if _, still := net.InterfaceByName(HostLink); still == nil {
				errs = append(errs, err)
			}
		}
	}
	for _, family := range []string{"-4", "-6"} {
		errs = append(errs, Run("ip", family, "route", "flush", "proto", routeProto))
	}
	etc, _ := filepath.Glob(filepath.Join(EtcNetns, Prefix+"-*"))
	for _, d := range etc {
		errs = append(errs, os.RemoveAll(d))
	}
	_ = os.Remove(EtcNetns) // only if empty: the folder may have been there before us
	return errors.Join(errs...)
}

// EtcNetns is where `ip netns exec NS` finds files to bind over /etc for processes in NS (resolv.conf, hosts).
const EtcNetns = "/etc/netns"

// Namespaces lists the network namespaces a data plane created that exist now.
func Namespaces() []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], Prefix+"-") {
			names = append(names, f[0])
		}
	}
	return names
}

// Leftovers describes whatever of a data plane exists right now: namespaces, the host link, marked routes, and
// what kubelet nodes leave (processes, mounts, cgroups, folders, CNI results, shim sockets). An empty result means
// nothing is left.
func Leftovers() []string {
	left := runtimeLeftovers()
	for _, ns := range Namespaces() {
		left = append(left, "netns "+ns)
	}
	if _, err := net.InterfaceByName(HostLink); err == nil {
		left = append(left, "link "+HostLink)
	}
	for _, family := range []string{"-4", "-6"} {
		out, _ := exec.Command("ip", family, "route", "show", "proto", routeProto).Output()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" {
				left = append(left, "route "+line)
			}
		}
	}
	etc, _ := filepath.Glob(filepath.Join(EtcNetns, Prefix+"-*"))
	for _, d := range etc {
		left = append(left, "folder "+d)
	}
	return left
}

// RunAll runs commands in order and stops at the first that fails.
func RunAll(cmds ...[]string) error {
	for _, c := range cmds {
		if err := Run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// Run runs a command and turns a failure into an error that quotes the command and what it printed.
func Run(name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
