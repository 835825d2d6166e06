package cli

import (
	"time"

	"github.com/spf13/cobra"

	"vksfleet.dev/fleet/cli/install"
)

// dnsHookWait is how long serve and restore wait for the cluster's CoreDNS by default: within Helm's default hook
// timeout of 5 minutes, with room for the hook's pod to start.
const dnsHookWait = 4 * time.Minute

// dnsCommand holds the steps join and unjoin take on the cluster's own CoreDNS, for the Helm chart's hooks in the
// replace mode, which run them with the kubectl-mcs of our controller's image: hidden, as the chart is their user.
// Each acts on --context, or in a pod on its own cluster.
func (o *options) dnsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "dns", Hidden: true, Short: "Back up, serve clusterset.local from, and restore the cluster's own CoreDNS (the Helm chart's hooks)"}
	var replace bool
	backup := &cobra.Command{
		Use:   "backup [--replace]",
		Short: "Copy the cluster's CoreDNS into ConfigMap kube-system/" + install.DNSBackup + " unless a copy is there",
		Long: `backup copies the Corefile and the Deployment of kube-system/coredns into the ConfigMap kube-system/` + install.DNSBackup + `,
once: a copy that is there stays. With --replace it records that our CoreDNS takes the Deployment over, and gives a
cluster with no Corefile of its own the replace base's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.oneCluster("the cluster")
			if err != nil {
				return err
			}
			return install.BackupDNS(cmd.Context(), cfg, replace, o.streams.Out)
		},
	}
	backup.Flags().BoolVar(&replace, "replace", false, "our CoreDNS takes the Deployment kube-system/coredns over (DNS mode replace)")
	var serveWait, restoreWait time.Duration
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Once kube-system/coredns runs our image on every replica, add the clusterset.local block to its Corefile",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.oneCluster("the cluster")
			if err != nil {
				return err
			}
			return install.ServeDNS(cmd.Context(), cfg, serveWait, o.streams.Out)
		},
	}
	serve.Flags().DurationVar(&serveWait, "wait", dnsHookWait, "how long to wait for our image on every replica, then for each to reload the Corefile")
	restore := &cobra.Command{
		Use:   "restore",
		Short: "Put the cluster's CoreDNS back from ConfigMap kube-system/" + install.DNSBackup + ", and delete it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.oneCluster("the cluster")
			if err != nil {
				return err
			}
			return install.RestoreDNS(cmd.Context(), cfg, restoreWait, o.streams.Out)
		},
	}
	restore.Flags().DurationVar(&restoreWait, "wait", dnsHookWait, "how long to wait for every replica to reload the Corefile, then for the original Deployment")
	cmd.AddCommand(backup, serve, restore)
	return cmd
}
