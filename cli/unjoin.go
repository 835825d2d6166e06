package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/cli/install"
)

func (o *options) unjoinCommand() *cobra.Command {
	var opts install.UnjoinOptions
	var brokerOnly bool
	var cmd *cobra.Command
	cmd = o.memberCommand(&cobra.Command{
		Use:   "unjoin --broker-info FILE [--context MEMBER] [--cluster-id ID] | unjoin --broker-only --cluster-id ID --broker-info FILE",
		Short: "Take the cluster of --context out of the clusterset, on the member and the broker, and say what is left",
		Long: `unjoin stops the member's controller, then takes the member out of the broker as ` + "`kubectl mcs broker evict`" + ` does
(its credentials, read grants, directory entry and broker namespace), deletes what the controller imported into the
member, restores the cluster's DNS, deletes the controller's own objects, and says what it leaves. The DNS restore
puts back what join copied into the ConfigMap kube-system/coredns-vksfleet-original: the Corefile without our block
(edits made since stay), and where --dns replace took the Deployment coredns over, once every replica has reloaded
that Corefile, its original image and pod template; then it removes the forward blocks and stub domain join added
and deletes the copy. It needs the member: when the member's API server does not answer, it changes nothing and
says so.
For a member whose cluster is gone, --broker-only --cluster-id ID takes it out of the broker alone, as broker evict
does, with the broker-info file only: no context is read. The member's cluster, if it comes back, keeps what join
installed, and its controller can no longer reach the broker; unjoin there then removes the rest.`,
	}, func(ctx context.Context, cfg *rest.Config, info install.BrokerInfo) error {
		err := install.Unjoin(ctx, cfg, info, opts, o.streams.Out)
		if errors.Is(err, install.ErrMemberUnreachable) {
			id := opts.ClusterID
			if id == "" {
				id = "ID"
			}
			file, _ := cmd.Flags().GetString("broker-info")
			return fmt.Errorf("%w\nnothing changed; if the member's cluster is gone, take it out of the broker alone: kubectl mcs unjoin --broker-only --cluster-id %s --broker-info %s", err, id, file)
		}
		return err
	})
	// --broker-only reads no context: the member's may name a cluster that no longer exists, or none.
	unjoinMember := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !brokerOnly {
			return unjoinMember(cmd, args)
		}
		if opts.ClusterID == "" {
			return errors.New("--broker-only needs --cluster-id: the member's cluster, which would tell it, is not asked")
		}
		file, err := cmd.Flags().GetString("broker-info")
		if err != nil {
			return err
		}
		info, err := install.ReadBrokerInfo(file)
		if err != nil {
			return err
		}
		if err := install.Evict(cmd.Context(), info, opts.ClusterID, opts.Wait, o.streams.Out); err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "left  the member's cluster as it is: if it comes back, run unjoin there (with --context) to remove what join installed\n")
		return err
	}
	f := cmd.Flags()
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the member's cluster id; default its ClusterProperty's (required with --broker-only)")
	f.BoolVar(&brokerOnly, "broker-only", false, "take the member out of the broker alone, as broker evict does, for a member whose cluster is gone: needs --cluster-id, reads no context")
	// 5 minutes, as join's and replace-kube-dns.sh's, rather than 2: the DNS restore waits for every CoreDNS replica
	// to reread the Corefile, which it does once the kubelet has updated the mounted ConfigMap (within its sync
	// period, a minute by default) and the reload plugin next checks it (every 30 s, with up to 15 s of jitter):
	// about a minute as a rule, close to 2 at worst, before a busy kubelet adds its own delay.
	f.DurationVar(&opts.Wait, "wait", 5*time.Minute, "how long to wait for each step: the controller to stop, the broker namespace to go, CoreDNS replicas to reload the restored Corefile, the original CoreDNS Deployment to roll out")
	return cmd
}
