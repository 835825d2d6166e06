// Command nodeagent is the kubelet of one node of the local clusterset (see test/nodeagent). The clusterset starts
// it inside the node's network namespace:
//
//	nodeagent -node-name NAME -kubeconfig FILE -addrs V4,V6 -pod-cidrs V4CIDR,V6CIDR -cluster-dns IP \
//	  [-labels k=v,...] [-port 10250] [-state-dir DIR]
//
// `nodeagent pause HOSTNAME` is the pod sandbox's pause process, started by the agent itself: it sets the pod's
// hostname in its own UTS namespace, says so on stdout, and waits for SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"vksfleet.dev/fleet/test/nodeagent"
	"vksfleet.dev/fleet/test/nodeagent/kubeletserver"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "pause" {
		pause(os.Args[2])
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(1)
	}
}

func pause(hostname string) {
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		fmt.Fprintln(os.Stderr, "pause: setting hostname:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("ready")
	<-sig
}

func run() error {
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	name := fs.String("node-name", "", "the Node's name (required)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the member's API server (required)")
	addrs := fs.String("addrs", "", "the node's addresses, IPv4 first, comma-separated (required)")
	cidrs := fs.String("pod-cidrs", "", "the node's pod CIDRs, comma-separated (required)")
	dns := fs.String("cluster-dns", "", "the cluster DNS Service address, the pods' nameserver (required)")
	domain := fs.String("cluster-domain", "cluster.local", "the cluster's DNS domain")
	labels := fs.String("labels", "", "extra Node labels, k=v,k=v")
	port := fs.Int("port", 10250, "port for exec and logs (the Node's kubelet endpoint)")
	state := fs.String("state-dir", "", "folder for container logs (default: a temporary folder)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *name == "" || *kubeconfig == "" || *addrs == "" || *cidrs == "" || *dns == "" {
		return fmt.Errorf("-node-name, -kubeconfig, -addrs, -pod-cidrs and -cluster-dns are required")
	}
	cfg := nodeagent.Config{NodeName: *name, ClusterDNS: *dns, ClusterDomain: *domain, Port: *port, StateDir: *state,
		Labels: map[string]string{}, Log: log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)}
	for _, s := range strings.Split(*addrs, ",") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("-addrs: %w", err)
		}
		cfg.Addrs = append(cfg.Addrs, a)
	}
	for _, s := range strings.Split(*cidrs, ",") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("-pod-cidrs: %w", err)
		}
		cfg.PodCIDRs = append(cfg.PodCIDRs, p)
	}
	if len(cfg.Addrs) == 0 || !cfg.Addrs[0].Is4() {
		return fmt.Errorf("-addrs must start with the node's IPv4 address")
	}
	if *labels != "" {
		for _, kv := range strings.Split(*labels, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("-labels: %q is not k=v", kv)
			}
			cfg.Labels[k] = v
		}
	}
	if cfg.StateDir == "" {
		dir, err := os.MkdirTemp("", "nodeagent-"+*name+"-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	if cfg.Kube, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	cfg.Server = func(ctx context.Context, a *nodeagent.Agent, addr string) error {
		return kubeletserver.New(a, kubeletserver.Options{}).ListenAndServeTLS(ctx, addr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return nodeagent.Run(ctx, cfg)
}
