package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/cli/install"
)

func (o *options) unjoinCommand() *cobra.Command {
	var opts install.UnjoinOptions
	cmd := o.memberCommand(&cobra.Command{
		Use:   "unjoin --broker-info FILE [--context MEMBER]",
		Short: "Take the cluster of --context out of the clusterset, on the member and the broker, and say what is left",
		Long: `unjoin stops the member's controller, then takes the member out of the broker as ` + "`kubectl mcs broker evict`" + ` does
(its credentials, read grants, directory entry and broker namespace), deletes what the controller imported into the
member and the controller's own objects, and says what it leaves. It needs the member: for one that is gone or not
trusted, run ` + "`kubectl mcs broker evict CLUSTER-ID`" + ` instead.`,
	}, func(ctx context.Context, cfg *rest.Config, info install.BrokerInfo) error {
		return install.Unjoin(ctx, cfg, info, opts, o.streams.Out)
	})
	f := cmd.Flags()
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the member's cluster id; default its ClusterProperty's")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the controller to stop and the broker namespace to go")
	return cmd
}
