// Command localfleet runs a local fleet on this machine: a clusterset of real control planes (test/env/clusterset)
// with, per member, an mcs-controller and our CoreDNS (test/framework). `localfleet up` starts it in the background
// and returns once it is usable, `localfleet down` stops it, `localfleet run` runs it in the foreground, and
// `localfleet fault` has the running fleet cause or undo a fault (framework.Fault).
//
// State lives in one folder (default .fleet): kubeconfig (a context per member and "broker"), env (a
// shell-sourceable file starting with KUBECONFIG=, with each member's DNS address and, with -monitoring,
// PROMETHEUS_URL), pid, log, and fault.sock, where `run` takes faults.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
)

const usage = `usage: localfleet up|down|run|fault [flags]
  up     start a local clusterset in the background and wait until it is usable
  down   stop the clusterset that up started
  run    run a local clusterset in the foreground until interrupted
  fault  have the running clusterset cause a fault: -kind K [-member M] [-peer P] [-loss PERCENT]
flags:
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	fs := flag.NewFlagSet("localfleet", flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	dir := fs.String("dir", ".fleet", "folder for the kubeconfig, env, pid and log files")
	members := fs.Int("members", 3, "number of member clusters (1-100), named cluster-a, cluster-b, ...")
	nodes := fs.Int("nodes", 2, "nodes per member, each a network namespace with kube-proxy, containerd and a kubelet (needs root)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long up waits for the clusterset to become usable")
	bin := fs.String("bin", "bin", "folder with the coredns and controller binaries")
	bare := fs.Bool("bare", false, "install nothing of ours on the members: the broker is prepared (broker-info.yaml in -dir), members wait for `kubectl mcs join`")
	monitoring := fs.Bool("monitoring", false, "run a Prometheus scraping every controller, CoreDNS and kube-proxy with the alert rules (PROMETHEUS_URL in the env file)")
	var broker brokerKind
	fs.Var(&broker, "broker", "the broker: single (one etcd and one kube-apiserver) or ha (3 etcd members and 2 kube-apiservers behind HAProxy)")
	var flt framework.Fault
	fs.Func("kind", "fault: "+framework.FaultKindNames(), func(s string) error { flt.Kind = framework.FaultKind(s); return nil })
	fs.StringVar(&flt.Member, "member", "", "fault: the member it is about")
	fs.StringVar(&flt.Peer, "peer", "", "fault: cut-data-plane and lossy between member and this member only")
	fs.Float64Var(&flt.Loss, "loss", framework.DefaultLoss, "fault: lossy's share of dropped packets, in percent, each way")
	_ = fs.Parse(os.Args[2:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(*dir, *bin, *members, *nodes, *bare, *monitoring, broker, *timeout)
	case "down":
		err = down(*dir)
	case "run":
		err = run(*dir, *bin, *members, *nodes, *bare, *monitoring, broker)
	case "fault":
		err = fault(*dir, flt)
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localfleet:", err)
		os.Exit(1)
	}
}

// brokerKind is -broker: whether the broker is highly available (clusterset.Options.HABroker).
type brokerKind struct{ ha bool }

func (b *brokerKind) String() string {
	if b.ha {
		return "ha"
	}
	return "single"
}

func (b *brokerKind) Set(s string) error {
	switch s {
	case "single", "":
		b.ha = false
	case "ha":
		b.ha = true
	default:
		return fmt.Errorf("want single or ha, got %q", s)
	}
	return nil
}

// files names the state files in the state folder.
type files struct{ dir string }

func (f files) pid() string        { return filepath.Join(f.dir, "pid") }
func (f files) env() string        { return filepath.Join(f.dir, "env") }
func (f files) kubeconfig() string { return filepath.Join(f.dir, "kubeconfig") }
func (f files) log() string        { return filepath.Join(f.dir, "log") }
func (f files) brokerInfo() string { return filepath.Join(f.dir, "broker-info.yaml") }
func (f files) faults() string     { return filepath.Join(f.dir, "fault.sock") }

// running returns the pid of the clusterset process recorded in the state folder, or 0 if none is alive.
func (f files) running() int {
	b, err := os.ReadFile(f.pid())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

func up(dir, bin string, members, nodes int, bare, monitoring bool, broker brokerKind, timeout time.Duration) error {
	if members < 1 {
		return fmt.Errorf("-members must be at least 1, got %d", members)
	}
	if nodes < 1 {
		return fmt.Errorf("-nodes must be at least 1, got %d", nodes)
	}
	// Say at once, not from the background process's log, when this machine cannot run nodes.
	if err := dataplane.CheckHost(); err != nil {
		return err
	}
	f := files{dir}
	if pid := f.running(); pid != 0 {
		fmt.Printf("A local fleet is already running (pid %d). Use it with:\n  source %s\n`make down` stops it.\n", pid, f.env())
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(f.env())
	logf, err := os.Create(f.log())
	if err != nil {
		return err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := time.Now()
	cmd := exec.Command(self, "run", "-dir", dir, "-bin", bin, "-members", strconv.Itoa(members), "-nodes", strconv.Itoa(nodes), "-bare="+strconv.FormatBool(bare),
		"-monitoring="+strconv.FormatBool(monitoring), "-broker="+broker.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives the shell that ran `make up`
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := os.WriteFile(f.pid(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		select {
		case err := <-exited:
			_ = os.Remove(f.pid())
			return fmt.Errorf("the clusterset process exited (%v); its log, %s, ends with:\n%s", err, f.log(), tail(f.log(), 20))
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("not usable after %s; see %s", timeout, f.log())
		case <-tick.C:
		}
		if _, err := os.Stat(f.env()); err == nil {
			break
		}
	}
	abs, _ := filepath.Abs(f.env())
	if broker.ha {
		// After the usage message, bare or not.
		defer fmt.Println("The broker is highly available: 3 etcd members and 2 kube-apiservers behind HAProxy, which the broker context and every member reach.")
	}
	if bare {
		info, _ := filepath.Abs(f.brokerInfo())
		fmt.Printf(`Local clusterset up, bare, in %s: %s + broker, nothing of ours on the members (pid %d, log %s).
The broker is prepared (kubectl mcs broker init wrote %s). Join each member with:
  source %s
  kubectl mcs --context %s join --broker-info %s
Stop it with: make down
`, time.Since(start).Round(100*time.Millisecond), strings.Join(clusterset.MemberNames(members), ", "), cmd.Process.Pid,
			f.log(), info, abs, clusterset.MemberNames(members)[0], info)
		return nil
	}
	fmt.Printf(`Local fleet up in %s: %s + broker, each member with an mcs-controller and CoreDNS (pid %d, log %s).
Use it with:
  source %s
  kubectl --context %s get nodes
  dig @127.0.0.1 -p "${FLEET_DNS_CLUSTER_A#*:}" dns-version.clusterset.local TXT
Contexts: %s, broker. Stop it with: make down
`, time.Since(start).Round(100*time.Millisecond), strings.Join(clusterset.MemberNames(members), ", "), cmd.Process.Pid,
		f.log(), abs, clusterset.MemberNames(members)[0], strings.Join(clusterset.MemberNames(members), ", "))
	if monitoring {
		fmt.Println(`Prometheus scrapes every controller, CoreDNS and kube-proxy: "$PROMETHEUS_URL"/alerts, /targets.`)
	}
	return nil
}

func down(dir string) error {
	f := files{dir}
	pid := f.running()
	if pid == 0 {
		fmt.Println("No local fleet is running.")
		_ = os.Remove(f.pid())
		_ = os.Remove(f.env())
		return sweep()
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	// Not our child: there is nothing to wait on but its pid.
	err := poll.Until(context.Background(), 100*time.Millisecond, time.Minute, func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("pid %d still runs", pid)
		}
		return nil
	})
	if err != nil {
		// Its children die with it (Pdeathsig); the process group catches the rest.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return fmt.Errorf("pid %d did not stop within a minute and was killed", pid)
	}
	_ = os.Remove(f.pid())
	fmt.Println("Local fleet stopped.")
	return sweep()
}

// sweep removes whatever a fleet that died without cleaning up left of its data plane (namespaces, links,
// routes), unless another fleet is running on this machine.
func sweep() error {
	if os.Geteuid() != 0 {
		return nil
	}
	swept, err := dataplane.SweepIdle()
	if err != nil {
		return err
	}
	if !swept {
		fmt.Println("Another local clusterset with a data plane runs on this machine (a test?); its namespaces stay.")
	}
	return nil
}

func run(dir, bin string, members, nodes int, bare, monitoring bool, broker brokerKind) error {
	f := files{dir}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	fl, err := framework.Start(ctx, framework.Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(members), Nodes: nodes, DataPlaneWait: time.Second, HABroker: broker.ha},
		BinDir:     bin,
		Log:        os.Stderr,
		Bare:       bare,
		Monitoring: monitoring,
	})
	if err != nil {
		return err
	}
	// Faults are taken before the env file says that the fleet is usable.
	_ = os.Remove(f.faults())
	l, err := net.Listen("unix", f.faults())
	if err == nil {
		go serveFaults(ctx, l, fl)
		err = writeState(f, fl)
	}
	if err == nil {
		fmt.Printf("clusterset up in %s\n", time.Since(start).Round(time.Millisecond))
		<-ctx.Done()
	}
	fmt.Println("stopping")
	_ = os.Remove(f.env())
	if l != nil {
		l.Close()
		_ = os.Remove(f.faults())
	}
	return errors.Join(err, fl.Stop())
}

// faultReply is run's answer to a fault: empty once it is done, else why it failed.
type faultReply struct {
	Error string `json:"error,omitempty"`
}

// serveFaults causes the faults asked on l (a framework.Fault in JSON per connection, answered with a faultReply),
// one at a time, until l is closed.
func serveFaults(ctx context.Context, l net.Listener, fl *framework.Fleet) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		var flt framework.Fault
		var reply faultReply
		if err := json.NewDecoder(c).Decode(&flt); err != nil {
			reply.Error = "reading the fault: " + err.Error()
		} else if err := fl.Fault(ctx, flt); err != nil {
			reply.Error = err.Error()
		}
		fmt.Printf("fault %+v: %s\n", flt, cmp.Or(reply.Error, "done"))
		_ = json.NewEncoder(c).Encode(reply)
		c.Close()
	}
}

// fault asks the running fleet to cause flt, and waits until it is done.
func fault(dir string, flt framework.Fault) error {
	c, err := net.Dial("unix", files{dir}.faults())
	if err != nil {
		return fmt.Errorf("no local fleet takes faults at %s (is `make up` running?): %w", files{dir}.faults(), err)
	}
	defer c.Close()
	start := time.Now()
	if err := json.NewEncoder(c).Encode(flt); err != nil {
		return err
	}
	var reply faultReply
	if err := json.NewDecoder(c).Decode(&reply); err != nil {
		return fmt.Errorf("the fleet did not answer (see %s): %w", files{dir}.log(), err)
	}
	if reply.Error != "" {
		return errors.New(reply.Error)
	}
	what := string(flt.Kind)
	if flt.Member != "" {
		what += " " + flt.Member
	}
	if flt.Peer != "" {
		what += " (from " + flt.Peer + " only)"
	}
	fmt.Printf("%s: done in %s\n", what, time.Since(start).Round(time.Millisecond))
	return nil
}

// writeState writes the kubeconfig, then the env file, whose appearance tells `up` that the fleet is usable.
func writeState(f files, fl *framework.Fleet) error {
	kc, err := fl.Kubeconfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.kubeconfig(), kc, 0o600); err != nil {
		return err
	}
	if fl.BrokerInfoPath != "" {
		info, err := os.ReadFile(fl.BrokerInfoPath)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.brokerInfo(), info, 0o600); err != nil {
			return err
		}
	}
	kcPath, _ := filepath.Abs(f.kubeconfig())
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		return err
	}
	// kubectl finds plugins on PATH: make builds kubectl-mcs beside this program.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	names := make([]string, len(fl.Members))
	var vars strings.Builder
	for i, m := range fl.Members {
		names[i] = m.Name
		v := "FLEET_DNS_" + strings.ToUpper(strings.ReplaceAll(m.Name, "-", "_"))
		fmt.Fprintf(&vars, "%s=%s\nexport %s\n", v, m.DNS, v)
	}
	if fl.PrometheusURL != "" {
		fmt.Fprintf(&vars, "PROMETHEUS_URL=%s\nexport PROMETHEUS_URL\n", fl.PrometheusURL)
	}
	env := fmt.Sprintf("KUBECONFIG=%s\nexport KUBECONFIG\nFLEET_MEMBERS=%q\nexport FLEET_MEMBERS\n%s"+
		"# kubectl of the pinned Kubernetes release, and the kubectl mcs plugin\nPATH=%s:%s:$PATH\nexport PATH\n",
		kcPath, strings.Join(names, " "), vars.String(), assets, filepath.Dir(self))
	tmp := f.env() + ".tmp"
	if err := os.WriteFile(tmp, []byte(env), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f.env())
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
