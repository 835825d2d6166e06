package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/cli/install"
)

// defaultBrokerInfo is where broker init writes the broker-info file and join, unjoin read it.
const defaultBrokerInfo = "broker-info.yaml"

func (o *options) brokerCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "broker", Short: "Prepare the clusterset's broker"}
	var opts install.InitOptions
	var file string
	initCmd := &cobra.Command{
		Use:   "init --clusterset NAME [--context BROKER]",
		Short: "Install the CRDs and roles members need on the broker (any API server), and write the broker-info file join reads",
		Long: `init applies build/deploy/broker (the mcs-api CRDs, the members' reader and writer roles, and the joiner identity)
to the API server of --context, and writes the broker-info file: the broker's URL and CA, the clusterset's name and
the joiner's token. The file is a credential: join, unjoin and rotate use it to give members their identity on the
broker, and take it away. Running init again changes nothing on the broker and writes a new token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.ClusterSet == "" {
				return fmt.Errorf("--clusterset is required: the name every member's clusterset.k8s.io ClusterProperty will hold")
			}
			cfg, err := o.oneCluster("the broker")
			if err != nil {
				return err
			}
			info, err := install.BrokerInit(cmd.Context(), cfg, opts, o.streams.Out)
			if err != nil {
				return err
			}
			if err := info.Write(file); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "wrote %s: keep it like a kubeconfig; next, for each member: kubectl mcs join --context MEMBER --broker-info %s\n", file, file)
			return err
		},
	}
	f := initCmd.Flags()
	f.StringVar(&opts.ClusterSet, "clusterset", "", "the clusterset's name")
	f.StringVar(&opts.Server, "server", "", "the broker's URL as members reach it; default the kubeconfig's")
	f.DurationVar(&opts.TokenExpiration, "token-expiration", 7*24*time.Hour, "how long the joiner's token lasts (run init again for a new one)")
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the broker-info file to write")
	cmd.AddCommand(initCmd)
	return cmd
}

// oneCluster is the config of the one cluster broker init, join and unjoin talk to through the kubeconfig: --context,
// as kubectl names it (the broker's address for members comes from the broker-info file). --broker-context, which
// status and diagnose read the broker through, would be ambiguous here, so it is refused.
func (o *options) oneCluster(what string) (*rest.Config, error) {
	if o.broker != "" {
		return nil, fmt.Errorf("--broker-context is for status, services and diagnose; name %s with --context", what)
	}
	return o.config.ToRESTConfig()
}
