package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/cli/install"
)

func (o *options) rotateCommand() *cobra.Command {
	var opts install.RotateOptions
	cmd := o.memberCommand(&cobra.Command{
		Use:   "rotate --broker-info FILE [--context MEMBER] [--ca-only]",
		Short: "Give the member of --context a new broker token and revoke the old one once its controller uses the new",
		Long: `rotate gives the member a new credential on the broker (a ServiceAccount, and a Secret of the same name its
tokens are bound to) and writes a token of it into the member's Secret mcs-system/broker-kubeconfig. The controller
switches to it without a restart; once the member's broker Lease names the new credential, rotate deletes the old
token's ServiceAccount and Secret, which revokes the old token and every token asked for with it.
With --ca-only, the member's kubeconfig takes the broker-info's server and CA bundle instead (after the broker's
serving certificate moved to another CA: run broker init again, or edit the broker-info, first) and keeps its
token.`,
	}, func(ctx context.Context, cfg *rest.Config, info install.BrokerInfo) error {
		return install.Rotate(ctx, cfg, info, opts, o.streams.Out)
	})
	f := cmd.Flags()
	f.BoolVar(&opts.CAOnly, "ca-only", false, "write the broker-info's server and CA bundle into the member's kubeconfig, keeping its token")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 24*time.Hour, "how long the new token lasts (10m to 168h); the controller renews it before then")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the controller to take the new credential")
	return cmd
}
