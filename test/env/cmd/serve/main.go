// Command serve is the program that test pods of the local clusterset run: a server that tells each client
// which cluster and pod answered it, and a client loop that records, request by request, who answered and what
// failed while a service moves between clusters.
//
// Usage:
//
//	serve [-cluster NAME] [-pod NAME] [-tcp ADDR] [-udp ADDR] [-http ADDR]
//	serve loop -target HOST:PORT [-proto tcp|udp|http|dns] [-name NAME[,NAME...]] [-interval D] [-timeout D] [-count N] [-duration D]
//
// # Server
//
// The server listens on TCP :7000, UDP :7000 and HTTP :8080 (all addresses, both families); an empty address
// turns that listener off. -cluster defaults to $CLUSTER, -pod to $POD_NAME and then to the host name; neither
// may contain white space, so that replies split on spaces. Its identity line is
//
//	cluster=<cluster> pod=<pod>
//
// TCP answers each line received on a connection, until the client closes it, and UDP each datagram, with
//
//	cluster=<cluster> pod=<pod> echo=<the line, or the payload without its trailing newline>
//
// HTTP answers GET / with the identity line, GET /healthz with "ok" and any other path with 404; every response
// carries the header X-Served-By: <cluster>/<pod>. On SIGTERM or SIGINT the server stops accepting, gives
// requests in flight up to 5 seconds, closes idle connections and exits 0. It logs one line to stderr when it
// starts and one when it stops.
//
// # Loop
//
// The loop sends one request at a time to -target and starts one every -interval, or right after the previous
// one when that took longer (it never bursts to catch up). Each request resolves the host name again with the
// system resolver and opens a new connection, so the loop follows DNS changes and kube-proxy. It stops after
// -count requests or after -duration, whichever comes first, or on SIGTERM or SIGINT; it refuses to start
// without at least one of them (at most 1000000 requests, at most 24h). It writes one line per request to stdout,
// fields separated by single spaces:
//
//	<seq> <start, unix milliseconds> ok <cluster> <pod> <latency ms>
//	<seq> <start, unix milliseconds> fail <reason> <latency ms> <address sent to, or - before the lookup>
//
// and finally
//
//	summary sent=<n> ok=<n> failed=<n>
//
// With -proto dns, -target is a DNS server and each request asks it once over UDP, without retrying, for the A
// records of a name of -name's comma-separated list, each in turn (request seq asks name (seq-1) mod the list's
// length): an answer with an address is ok, with the name as the cluster and the first address as the pod.
//
// seq counts from 1. Latency has three decimals and includes name resolution. An empty cluster or pod name is
// written as "-". A reason is one of:
//
//	dns        the name did not resolve
//	dial       connecting failed: dial-refused (a reset or ICMP port unreachable: no listener, or a rule that
//	           rejects), dial-unreachable (ICMP host or network unreachable), dial for anything else
//	write      sending the request failed
//	read       the reply did not come: connection reset or closed; read-refused for UDP's ICMP port unreachable
//	<step>-timeout  -timeout passed during that step: dns-timeout (resolving, or with -proto dns waiting for the
//	           answer), dial-timeout, write-timeout, read-timeout
//	dns-slow   -timeout passed after resolving the name took more than half of it
//	bad-reply  the reply is not an identity line, or echoes something other than what was sent
//	http-<n>   the HTTP status was n, not 200
//	nxdomain   (dns) the server answered NXDOMAIN
//	servfail   (dns) the server answered SERVFAIL
//	rcode-<n>  (dns) the server answered another error rcode n
//	nodata     (dns) the server answered NOERROR without an A record
//
// The loop exits 0 whatever its requests did; both modes exit 1 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"
)

const (
	serverUsage = "usage: serve [-cluster NAME] [-pod NAME] [-tcp ADDR] [-udp ADDR] [-http ADDR]\n" +
		"       serve loop -h for the client loop\n"
	loopUsage = "usage: serve loop -target HOST:PORT [-proto tcp|udp|http|dns] [-name NAME[,NAME...]] [-interval D] [-timeout D] [-count N] [-duration D]\n"

	maxCount    = 1_000_000
	maxDuration = 24 * time.Hour
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process around it, so that tests can check exit codes and output.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "loop" {
		cfg, err := parseLoopFlags(args[1:], stderr)
		if err != nil {
			return flagExit(err, stderr)
		}
		runLoop(ctx, cfg, stdout)
		return 0
	}
	cfg, err := parseServerFlags(args, stderr)
	if err != nil {
		return flagExit(err, stderr)
	}
	s, err := newServer(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 1
	}
	if err := s.serve(ctx); err != nil {
		return 1
	}
	return 0
}

// flagExit reports a flag error; the flag package has already printed its own errors with the usage.
func flagExit(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if !errors.Is(err, errFlagPackage) {
		fmt.Fprintf(stderr, "serve: %v\n", err)
	}
	return 1
}

// errFlagPackage marks errors that flag.FlagSet.Parse has already printed.
var errFlagPackage = errors.New("bad flags")

func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errFlagPackage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

func parseServerFlags(args []string, stderr io.Writer) (serverConfig, error) {
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	cfg := serverConfig{}
	fs := newFlagSet("serve", serverUsage, stderr)
	fs.StringVar(&cfg.cluster, "cluster", os.Getenv("CLUSTER"), "cluster `name` in replies; $CLUSTER by default")
	fs.StringVar(&cfg.pod, "pod", pod, "pod `name` in replies; $POD_NAME or the host name by default")
	fs.StringVar(&cfg.tcp, "tcp", ":7000", "TCP echo `address`, empty for none")
	fs.StringVar(&cfg.udp, "udp", ":7000", "UDP echo `address`, empty for none")
	fs.StringVar(&cfg.http, "http", ":8080", "HTTP `address`, empty for none")
	if err := parseFlags(fs, args); err != nil {
		return cfg, err
	}
	for _, name := range []string{cfg.cluster, cfg.pod} {
		if strings.ContainsFunc(name, unicode.IsSpace) {
			return cfg, fmt.Errorf("name %q contains white space, which would break the reply format", name)
		}
	}
	if cfg.tcp == "" && cfg.udp == "" && cfg.http == "" {
		return cfg, errors.New("all listeners are off")
	}
	return cfg, nil
}

func parseLoopFlags(args []string, stderr io.Writer) (loopConfig, error) {
	cfg := loopConfig{}
	fs := newFlagSet("serve loop", loopUsage, stderr)
	fs.StringVar(&cfg.target, "target", "", "`host:port` to send requests to (required)")
	fs.StringVar(&cfg.proto, "proto", "tcp", "protocol: tcp, udp, http or dns")
	name := fs.String("name", "", "with -proto dns, the `names` (comma-separated) whose A records the requests ask -target for, in turn")
	fs.DurationVar(&cfg.interval, "interval", 50*time.Millisecond, "time between request starts")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "limit per request, resolution to reply")
	fs.IntVar(&cfg.count, "count", 0, "stop after `N` requests (at most 1000000)")
	fs.DurationVar(&cfg.duration, "duration", 0, "stop after this long (at most 24h)")
	if err := parseFlags(fs, args); err != nil {
		return cfg, err
	}
	if *name != "" {
		cfg.names = strings.Split(*name, ",")
	}
	if cfg.target == "" {
		return cfg, errors.New("loop: -target is required")
	}
	if _, _, err := splitTarget(cfg.target); err != nil {
		return cfg, fmt.Errorf("loop: -target: %w", err)
	}
	switch {
	case cfg.proto != "tcp" && cfg.proto != "udp" && cfg.proto != "http" && cfg.proto != "dns":
		return cfg, fmt.Errorf("loop: -proto %q is not tcp, udp, http or dns", cfg.proto)
	case (cfg.proto == "dns") != (*name != ""):
		return cfg, errors.New("loop: -name goes with -proto dns, which needs it")
	case *name != "" && slices.Contains(strings.Split(*name, ","), ""):
		return cfg, fmt.Errorf("loop: -name %q: an empty name", *name)
	case cfg.interval < 0:
		return cfg, errors.New("loop: -interval is negative")
	case cfg.timeout <= 0:
		return cfg, errors.New("loop: -timeout must be positive")
	case cfg.count < 0 || cfg.duration < 0:
		return cfg, errors.New("loop: -count and -duration must not be negative")
	case cfg.count == 0 && cfg.duration == 0:
		return cfg, errors.New("loop: unbounded: set -count, -duration or both")
	case cfg.count > maxCount:
		return cfg, fmt.Errorf("loop: -count %d is over the limit of %d", cfg.count, maxCount)
	case cfg.duration > maxDuration:
		return cfg, fmt.Errorf("loop: -duration %v is over the limit of %v", cfg.duration, maxDuration)
	}
	return cfg, nil
}
