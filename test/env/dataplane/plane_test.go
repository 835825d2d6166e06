package dataplane

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the programs it runs inside namespaces: `addpod` (the node agent's part) and
// `echo` (a server that answers with the client's address).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "addpod":
			addrs := []netip.Addr{netip.MustParseAddr(os.Args[3]), netip.MustParseAddr(os.Args[4])}
			if _, err := AddPod(os.Args[2], addrs, netip.MustParseAddr(os.Args[5])); err != nil {
				println(err.Error())
				os.Exit(1)
			}
			os.Exit(0)
		case "echo":
			l, err := net.Listen("tcp", os.Args[2])
			if err != nil {
				println(err.Error())
				os.Exit(1)
			}
			for {
				c, err := l.Accept()
				if err != nil {
					os.Exit(1)
				}
				_, _ = c.Write([]byte(c.RemoteAddr().String() + "\n"))
				c.Close()
			}
		}
	}
	os.Exit(m.Run())
}

// TestPlane builds two members with one node each, a pod on each node, and checks that pods reach each other in
// both families, reach the host, cannot reach a Service range, and that Close leaves nothing behind.
func TestPlane(t *testing.T) {
	if err := CheckHost(); err != nil {
		t.Skip(err)
	}
	// As long as a clusterset waits (clusterset.Options.DataPlaneWait): `go test ./...` runs two packages at once,
	// and the other may hold the data plane for one of the longest suites (several minutes).
	p, err := Acquire(context.Background(), 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = p.Close()
		}
	})
	podsA := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00:10:1::/64")}
	podsB := []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("fd00:10:2::/64")}
	svcB := netip.MustParsePrefix("10.129.0.0/16")
	must(t, p.AddMember(podsA, []netip.Prefix{netip.MustParsePrefix("10.128.0.0/16")}))
	must(t, p.AddMember(podsB, []netip.Prefix{svcB}))
	na, err := p.AddNode(0, 1, "a-1", podsA)
	must(t, err)
	nb, err := p.AddNode(1, 0, "b-0", podsB)
	must(t, err)

	exe, err := os.Executable()
	must(t, err)
	addPod := func(n *Node, uid, v4, v6 string) {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+n.NS, "--", exe, "addpod", uid, v4, v6, n.Addrs[0].String()).CombinedOutput()
		if err != nil {
			t.Fatalf("addpod %s: %v: %s", uid, err, out)
		}
	}
	addPod(na, "aaaa", "10.1.1.5", "fd00:10:1:0:1::5")
	addPod(nb, "bbbb", "10.2.0.7", "fd00:10:2::7")
	for _, addr := range []string{"10.2.0.7:9000", "[fd00:10:2::7]:9001"} {
		srv := exec.Command("ip", "netns", "exec", PodNS("bbbb"), exe, "echo", addr)
		must(t, srv.Start())
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	}
	// The servers start asynchronously: the first dials may be refused.
	dial := func(addr string) (string, error) {
		var last error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			got, err := dialIn(PodNS("aaaa"), addr)
			if err == nil {
				return got, nil
			}
			last = err
		}
		return "", last
	}
	for addr, from := range map[string]string{"10.2.0.7:9000": "10.1.1.5:", "[fd00:10:2::7]:9001": "[fd00:10:1:0:1::5]:"} {
		got, err := dial(addr)
		if err != nil {
			t.Fatalf("pod a to %s: %v", addr, err)
		}
		if !strings.HasPrefix(got, from) {
			t.Errorf("pod b saw the connection from %q, want the pod address %s (no NAT on a flat network)", got, from)
		}
	}
	if _, err := dialIn(PodNS("aaaa"), net.JoinHostPort(HostV4.String(), "1")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("pod a to the host, closed port: %v, want connection refused (the host answers)", err)
	}
	if _, err := dialIn(PodNS("aaaa"), net.JoinHostPort(svcB.Addr().Next().String(), "80")); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("pod a to a Service address with no kube-proxy: %v, want network unreachable", err)
	}
	// An address of node b's pods with no pod: node b says so, the packet does not go round the fabric.
	if out, err := exec.Command("ip", "-n", nb.NS, "route", "get", "10.2.0.8").CombinedOutput(); err == nil || !strings.Contains(string(out), "No route to host") {
		t.Errorf("node b's route to an address of its pods with no pod: %v: %s, want none (unreachable)", err, out)
	}
	if _, err := dialIn(PodNS("aaaa"), "10.2.0.8:9000"); err == nil || !strings.Contains(err.Error(), "no route to host") {
		t.Errorf("pod a to an address of node b's pods with no pod: %v, want no route to host", err)
	}

	// A cut between the members' pods drops their packets both ways, while the host still reaches both; Heal
	// takes it away. A loss is a chain of its own, healed with the rest.
	// A count of SYNs sees those a cut drops, from its source to its destination on its port only, and Heal
	// leaves it alone.
	podA := []netip.Prefix{netip.MustParsePrefix("10.1.1.5/32")}
	must(t, CountSYNs("a-to-b", podA, podsB, 9000))
	must(t, CountSYNs("a-to-b-other-port", podA, podsB, 9001))
	must(t, Drop("cut-b", podsB, podsA, 100))
	if got, err := dialIn(PodNS("aaaa"), "10.2.0.7:9000"); err == nil {
		t.Errorf("pod a to pod b across a cut: answered %q", got)
	}
	if n, err := SYNs("a-to-b"); err != nil || n == 0 {
		t.Errorf("SYNs from pod a to pod b across a cut: %d, %v; want some", n, err)
	}
	if n, err := SYNs("a-to-b-other-port"); err != nil || n != 0 {
		t.Errorf("SYNs from pod a to pod b on another port: %d, %v; want none", n, err)
	}
	must(t, StopCount("a-to-b-other-port"))
	if _, err := SYNs("a-to-b-other-port"); err == nil {
		t.Error("a stopped count still reads")
	}
	if _, err := dialIn(PodNS("bbbb"), net.JoinHostPort(HostV4.String(), "1")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("pod b to the host across a cut between members: %v, want connection refused (the host answers)", err)
	}
	must(t, Drop("loss-b", podsB, podsA, 5))
	if names, err := Faults(); err != nil || strings.Join(names, ",") != "cut-b,loss-b" {
		t.Errorf("Faults() = %v, %v; want cut-b and loss-b", names, err)
	}
	must(t, Heal())
	must(t, Heal())
	if names, err := Faults(); err != nil || len(names) > 0 {
		t.Errorf("Faults() after Heal = %v, %v; want none", names, err)
	}
	before, err := SYNs("a-to-b")
	must(t, err)
	if _, err := dial("10.2.0.7:9000"); err != nil {
		t.Errorf("pod a to pod b once healed: %v", err)
	}
	if n, err := SYNs("a-to-b"); err != nil || n <= before {
		t.Errorf("SYNs from pod a to pod b after a connection once healed: %d, %v; want more than %d", n, err, before)
	}
	must(t, CountSYNs("a-to-b", podA, podsB, 9000))
	if n, err := SYNs("a-to-b"); err != nil || n != 0 {
		t.Errorf("SYNs of a count started again: %d, %v; want 0", n, err)
	}
	must(t, StopCount("a-to-b"))
	// A cut from one server of the host drops that server's packets only, for that side only; Remove takes that
	// fault away alone.
	must(t, DropTo("broker-b", podsB, netip.AddrPortFrom(HostV4, 1)))
	must(t, Drop("cut-b", podsB, podsA, 100))
	if _, err := dialIn(PodNS("bbbb"), net.JoinHostPort(HostV4.String(), "1")); err == nil || strings.Contains(err.Error(), "refused") {
		t.Errorf("pod b to the host's cut port: %v, want no answer", err)
	}
	if _, err := dialIn(PodNS("bbbb"), net.JoinHostPort(HostV4.String(), "2")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("pod b to another port of the host: %v, want connection refused (the host answers)", err)
	}
	if _, err := dialIn(PodNS("aaaa"), net.JoinHostPort(HostV4.String(), "1")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("pod a to the port cut from pod b: %v, want connection refused (the host answers)", err)
	}
	must(t, Remove("broker-b"))
	if names, err := Faults(); err != nil || strings.Join(names, ",") != "cut-b" {
		t.Errorf("Faults() after removing broker-b = %v, %v; want cut-b alone", names, err)
	}
	if _, err := dialIn(PodNS("bbbb"), net.JoinHostPort(HostV4.String(), "1")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("pod b to the host once the cut is removed: %v, want connection refused (the host answers)", err)
	}
	if err := Remove("broker-b"); err == nil {
		t.Error("Remove of a fault that is not there succeeded")
	}
	must(t, Heal())
	if err := Drop("Bad Name", podsB, podsA, 100); err == nil {
		t.Error("Drop took a name that is no nftables chain name")
	}

	closed = true
	must(t, p.Close())
	if left := Leftovers(); len(left) > 0 {
		t.Errorf("Close left behind: %v", left)
	}
}

// dialIn connects to addr from inside network namespace ns and returns the first line the server sends.
func dialIn(ns, addr string) (string, error) {
	var line string
	err := InNS(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
