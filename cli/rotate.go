package cli

import (
	"time"

	"github.com/spf13/cobra"

	"vksfleet.dev/fleet/cli/install"
)

func (o *options) rotateCommand() *cobra.Command {
	var opts install.RotateOptions
	var file string
	cmd := &cobra.Command{
		Use:   "rotate --broker-info FILE [--context MEMBER] [--ca-only]",
		Short: "Give the member of --context a new broker token and revoke the old one once its controller uses the new",
		Long: `rotate writes a new token of the member's ServiceAccount on the broker, bound to a new Secret there, into the
member's Secret mcs-system/broker-kubeconfig. The controller switches to it without a restart; once the member's
broker Lease names the new credential, rotate deletes the Secret the old token was bound to, which revokes it.
With --ca-only, the member's kubeconfig takes the broker-info's server and CA bundle instead (after the broker's
serving certificate moved to another CA: run broker init again, or edit the broker-info, first) and keeps its
token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, cfg, err := o.memberWith(file)
			if err != nil {
				return err
			}
			return install.Rotate(cmd.Context(), cfg, info, opts, o.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the file `kubectl mcs broker init` wrote")
	f.BoolVar(&opts.CAOnly, "ca-only", false, "write the broker-info's server and CA bundle into the member's kubeconfig, keeping its token")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 24*time.Hour, "how long the new token lasts; the controller renews it before then")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the controller to take the new credential")
	return cmd
}
