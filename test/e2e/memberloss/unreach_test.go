package memberloss

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/framework"
)

// unreachCounters are the kernel's counters that say where a connection that fails at once as unreachable was
// refused: the network namespace that found no route for a packet (OutNoRoutes) or sent an ICMP destination
// unreachable, and the one that received it. The pod's own namespace says whether the error came from outside.
var unreachCounters = []string{
	"IpOutNoRoutes", "IcmpOutDestUnreachs", "IcmpInDestUnreachs",
	"Ip6OutNoRoutes", "Icmp6OutDestUnreachs", "Icmp6InDestUnreachs",
}

// netPlace is a network namespace whose counters a trace compares: the host's, the fabric's, a node's or a pod's.
type netPlace struct {
	name string
	// snmp reads the namespace's /proc/net/snmp and /proc/net/snmp6, one after the other.
	snmp func() ([]byte, error)
}

// netPlaces are the fleet's network namespaces: the host, the fabric and every member's nodes.
func netPlaces(f *framework.Fleet) []netPlace {
	places := []netPlace{{"host", func() ([]byte, error) { return readSNMP("/proc/net") }}, nsPlace("fabric", dataplane.FabricNS)}
	for _, m := range f.Members {
		for _, n := range m.Nodes {
			places = append(places, nsPlace(n.Name, n.NS))
		}
	}
	return places
}

// nsPlace is the named network namespace ns.
func nsPlace(name, ns string) netPlace {
	return netPlace{name, func() ([]byte, error) {
		return exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp", "/proc/net/snmp6").Output()
	}}
}

// podPlace is the network namespace of the pod whose UID is uid, through one of its processes (the kubelet's
// cgroupfs driver names the pod's cgroups pod<uid>); false when none runs on this machine.
func podPlace(name, uid string) (netPlace, bool) {
	cgroups, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, path := range cgroups {
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte("/pod"+uid+"/")) {
			dir := filepath.Dir(path)
			return netPlace{name, func() ([]byte, error) { return readSNMP(filepath.Join(dir, "net")) }}, true
		}
	}
	return netPlace{}, false
}

// readSNMP reads snmp and snmp6 of a /proc/.../net folder.
func readSNMP(dir string) ([]byte, error) {
	v4, err := os.ReadFile(filepath.Join(dir, "snmp"))
	if err != nil {
		return nil, err
	}
	v6, err := os.ReadFile(filepath.Join(dir, "snmp6"))
	return append(v4, v6...), err
}

// parseSNMP reads the counters of /proc/net/snmp (a line of names, then one of values, per protocol:
// "Ip: Forwarding ..." then "Ip: 1 ...") and /proc/net/snmp6 (a name and a value per line), named as snmp6 names
// them: protocol and counter run together ("IpOutNoRoutes").
func parseSNMP(b []byte) map[string]int64 {
	counters := map[string]int64{}
	var header []string
	lines := bufio.NewScanner(bytes.NewReader(b))
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) == 2 && !strings.HasSuffix(f[0], ":"):
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				counters[f[0]] = v
			}
		case len(f) > 1 && strings.HasSuffix(f[0], ":"):
			if len(header) > 0 && header[0] == f[0] && len(header) == len(f) {
				proto := strings.TrimSuffix(f[0], ":")
				for i := 1; i < len(f); i++ {
					if v, err := strconv.ParseInt(f[i], 10, 64); err == nil {
						counters[proto+header[i]] = v
					}
				}
				header = nil
			} else {
				header = f
			}
		}
	}
	return counters
}

// snapshot reads the unreach counters of every place, by place; a place that cannot be read is left out, and
// named in unread.
func snapshot(places []netPlace) (all map[string]map[string]int64, unread []string) {
	all = map[string]map[string]int64{}
	for _, p := range places {
		if b, err := p.snmp(); err == nil {
			all[p.name] = parseSNMP(b)
		} else {
			unread = append(unread, p.name)
		}
	}
	return all, unread
}

// unreachDelta describes which unreach counters grew between two snapshots, by place: "fabric
// IcmpOutDestUnreachs+1"; "none" when none did.
func unreachDelta(before, after map[string]map[string]int64) string {
	var grew []string
	for _, place := range slices.Sorted(maps.Keys(after)) {
		was, ok := before[place]
		if !ok {
			continue
		}
		for _, c := range unreachCounters {
			if d := after[place][c] - was[c]; d != 0 {
				grew = append(grew, fmt.Sprintf("%s %s%+d", place, c, d))
			}
		}
	}
	if len(grew) == 0 {
		return "none"
	}
	return strings.Join(grew, ", ")
}

func TestParseSNMP(t *testing.T) {
	in := "Ip: Forwarding DefaultTTL OutNoRoutes\nIp: 1 64 3\nIcmp: InMsgs InDestUnreachs OutDestUnreachs\nIcmp: 9 2 5\n" +
		"Ip6InReceives                   \t12\nIp6OutNoRoutes                  \t4\nIcmp6OutDestUnreachs            \t1\n"
	got := parseSNMP([]byte(in))
	for name, want := range map[string]int64{"IpOutNoRoutes": 3, "IpForwarding": 1, "IcmpInDestUnreachs": 2, "IcmpOutDestUnreachs": 5,
		"Ip6OutNoRoutes": 4, "Icmp6OutDestUnreachs": 1, "Ip6InReceives": 12} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d (all: %v)", name, got[name], want, got)
		}
	}
	before := map[string]map[string]int64{"fabric": got, "pod": {"IcmpInDestUnreachs": 1}}
	after := map[string]map[string]int64{"fabric": {"IpOutNoRoutes": 3, "IcmpInDestUnreachs": 2, "IcmpOutDestUnreachs": 6, "Ip6OutNoRoutes": 4, "Icmp6OutDestUnreachs": 1},
		"pod": {"IcmpInDestUnreachs": 2}, "new": {"IcmpInDestUnreachs": 7}}
	if d, want := unreachDelta(before, after), "fabric IcmpOutDestUnreachs+1, pod IcmpInDestUnreachs+1"; d != want {
		t.Errorf("delta %q, want %q", d, want)
	}
	if d := unreachDelta(before, before); d != "none" {
		t.Errorf("delta of a snapshot with itself %q, want none", d)
	}
}
