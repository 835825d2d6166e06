package framework

import (
	"context"
	"io"
	"net/http"
	"os"
	"time"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/test/env/proc"
)

// CoreDNSReadyWait bounds StartCorefile's wait for the ready plugin.
const CoreDNSReadyWait = 2 * time.Minute

// StartCoreDNS writes the server block s to the Corefile conf and runs our CoreDNS binary bin on it as a process
// of this machine, logging to log with name as prefix. With the ready plugin in s (Stock.Ready, at ReadyAddr), it
// waits until the server reports ready, and stops it if it does not. The fleet without nodes, the DNS conformance
// suite, the kubectl-mcs suite and the sync benchmark's probes start CoreDNS here.
func StartCoreDNS(ctx context.Context, log io.Writer, name, bin, conf string, s corefile.Server) (*proc.Process, error) {
	ready := ""
	if s.Stock.Ready {
		ready = s.ReadyAddr
	}
	return StartCorefile(ctx, log, name, conf, s.Render(), ready, bin)
}

// StartCorefile is where every CoreDNS run as a process of this machine starts: it writes corefile to the file
// conf and runs argv, a CoreDNS binary (ours or stock) or a command that runs one (taskset ... coredns), with
// -conf conf, logging to log with name as prefix. With readyAddr, the ready plugin's address, it waits until the
// server reports ready, and stops it if it does not within CoreDNSReadyWait. StartCoreDNS runs a server block;
// the install suite runs a cluster's Corefile as it is, and the DNS benchmark stock CoreDNS on one core.
func StartCorefile(ctx context.Context, log io.Writer, name, conf, corefile, readyAddr string, argv ...string) (*proc.Process, error) {
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		return nil, err
	}
	p, err := proc.Start(log, name, argv[0], append(argv[1:], "-conf", conf)...)
	if err != nil || readyAddr == "" {
		return p, err
	}
	if err := p.WaitHTTP(ctx, &http.Client{Timeout: time.Second}, "http://"+readyAddr+"/ready", CoreDNSReadyWait); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}
