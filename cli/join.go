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
		Use:   "join --broker-info FILE [--context MEMBER] [--cluster-id ID] [--region REGION] [--dry-run]",
		Short: "Make the cluster of --context a member: cluster id, broker identity and credentials, CRDs, controller, admission policy, DNS",
		Long: `join installs everything a member needs, in an order that works on a fresh cluster, and waits until the member's
controller renews its Lease on the broker. It records the settings it installed with (--cluster-id, --dns,
--controller-image, --dns-image, --cluster-domain, --region, --token-expiration) in the member's ConfigMap
mcs-system/mcs-join; run again, it takes every one of them not given from there, and records the ones given. So
running it again changes nothing (objects are applied server-side and credentials the broker still accepts are
kept) but the member's region, if it is another now. The region (--region, else the member's
ClusterProperty region.topology.k8s.io) is recorded in the broker's member directory, which the member cannot
write: other members rank its endpoints by it.
A field that another field manager set to another value stops join, named with its manager, unless
--force-conflicts; the replace DNS mode takes over the cluster's DNS objects in any case. --dry-run changes nothing
and prints what join would change, as a diff of each live object. --credentials-only gives the member its cluster
id, its identity on the broker and the Secret mcs-system/broker-kubeconfig, and installs nothing else: for a
controller and DNS installed by Helm or GitOps. DNS modes (--dns):
  standalone     our CoreDNS as mcs-system/mcs-dns, serving clusterset.local only; the cluster's DNS forwards the
                 zone to it: a marked server block appended to CoreDNS's Corefile (or a kube-dns stub domain), and
                 one in NodeLocal DNSCache's where it runs. A Corefile that has a clusterset.local block of its own
                 (or a key *.server of kube-system/coredns-custom, which AKS imports, that has one) gets no block of
                 ours, and join says so: CoreDNS refuses two blocks for one zone. Nothing else of the cluster's DNS
                 changes.
  replace        our CoreDNS in place of the cluster's, keeping the kube-dns Service and the cluster's Corefile,
                 every line of it: our image runs on every replica first, then our marked clusterset.local block is
                 added to the Corefile.
  cluster-local  no DNS change: every import is also a cluster.local Service <svc>-clusterset.
In standalone and replace, join first copies the cluster's CoreDNS (its Corefile and Deployment) into the ConfigMap
kube-system/coredns-vksfleet-original, once; unjoin restores it from there: the Corefile without our block (edits
made since stay), then, after replace, the Deployment's original image and pod template.`,
	}, func(ctx context.Context, cfg *rest.Config, info install.BrokerInfo) error {
		id, err := install.Join(ctx, cfg, info, opts, o.streams.Out)
		if err != nil {
			return err
		}
		switch {
		case opts.DryRun:
			_, err = fmt.Fprintf(o.streams.Out, "dry run of joining %s to clusterset %s: nothing changed\n", id, info.ClusterSet)
		case opts.CredentialsOnly:
			_, err = fmt.Fprintf(o.streams.Out, "%s has its credentials for clusterset %s: its controller reads them once installed (Helm, GitOps)\n", id, info.ClusterSet)
		default:
			_, err = fmt.Fprintf(o.streams.Out, "joined %s to clusterset %s\n", id, info.ClusterSet)
		}
		return err
	})
	f := cmd.Flags()
	f.StringVar(&opts.ClusterID, install.FlagClusterID, "", "the member's cluster id; default its ClusterProperty's, else the kube-system namespace UID")
	f.DurationVar(&opts.TokenExpiration, install.FlagTokenExpiration, 24*time.Hour, "how long the member's broker token lasts; its controller renews it before then")
	f.StringVar(&opts.ControllerImage, install.FlagControllerImage, "", "the mcs-controller image, for a mirror; default the release's")
	f.StringVar(&opts.DNSImage, install.FlagDNSImage, "", "our CoreDNS image, for a mirror; default the release's")
	f.StringVar(&opts.DNS, install.FlagDNS, install.DNSStandalone, "DNS mode: "+strings.Join(install.DNSModes, ", ")+` (see Long)`)
	f.StringVar(&opts.Region, install.FlagRegion, "", "the member's region, which other members rank its endpoints by; default its ClusterProperty region.topology.k8s.io's, else none")
	f.StringVar(&opts.ClusterDomain, install.FlagClusterDomain, "", "the member's cluster DNS domain (the kubelet's --cluster-domain), where the controller finds kube-dns; default cluster.local")
	f.DurationVar(&opts.Wait, "wait", 5*time.Minute, "how long to wait for the controller, DNS and the first Lease renewal")
	f.BoolVar(&opts.DryRun, "dry-run", false, "change nothing on the member or the broker; print what join would change, object by object, as a diff of the live object")
	f.BoolVar(&opts.ForceConflicts, "force-conflicts", false, "take over fields another field manager set to other values, as kubectl apply --server-side --force-conflicts")
	f.BoolVar(&opts.CredentialsOnly, "credentials-only", false, "give the member its cluster id, broker identity and the Secret mcs-system/broker-kubeconfig only, for a controller and DNS that Helm or GitOps install")
	// The settings not given come from the member's record of its last join.
	opts.Given = f.Changed
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
	cmd.Flags().StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the `FILE` kubectl mcs broker init wrote")
	return cmd
}
