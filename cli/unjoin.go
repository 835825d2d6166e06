package cli

import (
	"time"

	"github.com/spf13/cobra"

	"vksfleet.dev/fleet/cli/install"
)

func (o *options) unjoinCommand() *cobra.Command {
	var opts install.UnjoinOptions
	var file string
	cmd := &cobra.Command{
		Use:   "unjoin --broker-info FILE [--context MEMBER]",
		Short: "Take the cluster of --context out of the clusterset, on the member and the broker, and say what is left",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, cfg, err := o.memberWith(file)
			if err != nil {
				return err
			}
			return install.Unjoin(cmd.Context(), cfg, info, opts, o.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the file `kubectl mcs broker init` wrote")
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the member's cluster id; default its ClusterProperty's")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the controller to stop and the broker namespace to go")
	return cmd
}
