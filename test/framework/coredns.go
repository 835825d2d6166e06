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

// CoreDNSReadyWait bounds StartCoreDNS's wait for the ready plugin.
const CoreDNSReadyWait = 2 * time.Minute

// StartCoreDNS writes the server block s to the Corefile conf and runs our CoreDNS binary bin on it as a process
// of this machine, logging to log with name as prefix. With the ready plugin in s (Stock.Ready, at ReadyAddr), it
// waits until the server reports ready, and stops it if it does not. The fleet without nodes, the DNS conformance
// suite, the kubectl-mcs suite and the sync benchmark's probes start CoreDNS here.
func StartCoreDNS(ctx context.Context, log io.Writer, name, bin, conf string, s corefile.Server) (*proc.Process, error) {
	if err := os.WriteFile(conf, []byte(s.Render()), 0o644); err != nil {
		return nil, err
	}
	p, err := proc.Start(log, name, bin, "-conf", conf)
	if err != nil || !s.Stock.Ready {
		return p, err
	}
	if err := p.WaitHTTP(ctx, &http.Client{Timeout: time.Second}, "http://"+s.ReadyAddr+"/ready", CoreDNSReadyWait); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}
