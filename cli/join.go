package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/cli/install"
)

func (o *options) joinCommand() *cobra.Command {
	var opts install.JoinOptions
	cmd := o.memberCommand(&cobra.Command{
		Use:   "join --broker-info FILE [--context MEMBER] [--cluster-id ID] [--region REGION]",
		Short: "Make the cluster of --context a member: cluster id, broker identity and credentials, CRDs, controller, admission policy, DNS",
		Long: `join installs everything a member needs, in an order that works on a fresh cluster, and waits until the member's
controller renews its Lease on the broker. Running it again changes nothing (objects are applied server-side and
credentials the broker still accepts are kept) but the member's region, if it is another now. The region
(--region, else the member's ClusterProperty region.topology.k8s.io) is recorded in the broker's member directory,
which the member cannot write: other members rank its endpoints by it. DNS modes (--dns):
  standalone     our CoreDNS as mcs-system/mcs-dns, serving clusterset.local only; the cluster's DNS forwards the
                 zone to it: a server block appended to CoreDNS's Corefile (or a kube-dns stub domain), and one in
                 NodeLocal DNSCache's where it runs. Nothing else of the cluster's DNS changes.
  replace        our CoreDNS in place of kube-dns (build/deploy/coredns), keeping the kube-dns Service.
  cluster-local  no DNS change: every import is also a cluster.local Service <svc>-clusterset.`,
	}, func(ctx context.Context, cfg *rest.Config, info install.BrokerInfo) error {
		id, err := install.Join(ctx, cfg, info, opts, o.streams.Out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "joined %s to clusterset %s\n", id, info.ClusterSet)
		return err
	})
	f := cmd.Flags()
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the member's cluster id; default its ClusterProperty's, else the kube-system namespace UID")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 24*time.Hour, "how long the member's broker token lasts; its controller renews it before then")
	f.StringVar(&opts.ControllerImage, "controller-image", "", "the mcs-controller image, for a mirror; default the release's")
	f.StringVar(&opts.DNSImage, "dns-image", "", "our CoreDNS image, for a mirror; default the release's")
	f.StringVar(&opts.DNS, "dns", install.DNSStandalone, "DNS mode: "+strings.Join(install.DNSModes, ", ")+` (see Long)`)
	f.StringVar(&opts.Region, "region", "", "the member's region, which other members rank its endpoints by; default its ClusterProperty region.topology.k8s.io's, else none")
	f.StringVar(&opts.ClusterDomain, "cluster-domain", "", "the member's cluster DNS domain (the kubelet's --cluster-domain), where the controller finds kube-dns; default cluster.local")
	f.DurationVar(&opts.Wait, "wait", 5*time.Minute, "how long to wait for the controller, DNS and the first Lease renewal")
	return cmd
}

// memberWith reads the broker-info file and the member's config, for the commands that act on one member.
func (o *options) memberWith(brokerInfo string) (install.BrokerInfo, *rest.Config, error) {
	info, err := install.ReadBrokerInfo(brokerInfo)
	if err != nil {
		return info, nil, err
	}
	cfg, err := o.oneCluster("the member")
	return info, cfg, err
}

// memberCommand completes cmd as a command that acts on the member of --context with the broker-info file
// (--broker-info): join, unjoin and rotate; run gets the member's config and the file's content.
func (o *options) memberCommand(cmd *cobra.Command, run func(ctx context.Context, cfg *rest.Config, info install.BrokerInfo) error) *cobra.Command {
	var file string
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		info, cfg, err := o.memberWith(file)
		if err != nil {
			return err
		}
		return run(cmd.Context(), cfg, info)
	}
	cmd.Flags().StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the file `kubectl mcs broker init` wrote")
	return cmd
}
