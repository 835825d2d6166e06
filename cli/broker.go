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
	cmd := &cobra.Command{Use: "broker", Short: "Prepare the clusterset's broker, take a member out of it, or take the clusterset off it"}
	var opts install.InitOptions
	var file string
	initCmd := &cobra.Command{
		Use:   "init --clusterset NAME [--context BROKER]",
		Short: "Install the CRDs and roles members need on the broker (any API server), and write the broker-info file join reads",
		Long: `init applies build/deploy/broker (the mcs-api CRDs, the members' reader and writer roles, and the joiner identity)
to the API server of --context, and writes the broker-info file: the broker's URL and CA, the clusterset's name and
the joiner's token. The file is a credential: join, unjoin, rotate and evict use it to give members their
identity on the broker, and take it away. Admission policies confine the joiner to the members' namespaces and
credentials (the broker must run Kubernetes 1.30 or later). Running init again changes nothing on the broker and
writes a new token; with --rotate-joiner it also revokes every joiner token written before.`,
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
	f.BoolVar(&opts.RotateJoiner, "rotate-joiner", false, "revoke every joiner token written before, in any broker-info file")
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the broker-info file to write")
	cmd.AddCommand(initCmd, o.evictCommand(), o.brokerUninstallCommand())
	return cmd
}

func (o *options) brokerUninstallCommand() *cobra.Command {
	var opts install.UninstallOptions
	cmd := &cobra.Command{
		Use:   "uninstall [--context BROKER] [--force] [--delete-crds]",
		Short: "Take the clusterset off the broker: what broker init applied, once no member is joined",
		Long: `uninstall deletes from the API server of --context what broker init applied: the joiner's ServiceAccount first
(every broker-info file's token is refused from then on), the admission policies and their bindings, the roles and
bindings, and the namespace mcs-broker with the member directory; and the cluster-wide grants of earlier releases.
It needs cluster-admin on the broker, as init does. It refuses while members are joined, and lists them: unjoin
each (unjoin --broker-only for one whose cluster is gone), or give --force to evict them all first, as broker evict
does. The mcs-api CRDs stay unless --delete-crds: deleting a CRD deletes every object of its kind on the cluster,
so it is refused while any is left outside the members' broker namespaces (the broker's cluster is a member too,
or runs another MCS implementation). What is already gone is skipped: running it again changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.oneCluster("the broker")
			if err != nil {
				return err
			}
			if err := install.BrokerUninstall(cmd.Context(), cfg, opts, o.streams.Out); err != nil {
				return err
			}
			_, err = fmt.Fprintln(o.streams.Out, "the clusterset is off the broker")
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.Force, "force", false, "evict the members still joined first, as broker evict does, instead of refusing")
	f.BoolVar(&opts.DeleteCRDs, "delete-crds", false, "delete the mcs-api CRDs too, once they hold nothing but the members' objects")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for each namespace and CRD to go")
	return cmd
}

func (o *options) evictCommand() *cobra.Command {
	var file string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "evict CLUSTER-ID --broker-info FILE",
		Short: "Take a member out of the clusterset from the broker alone, for a member that is gone or not trusted",
		Long: `evict revokes the member's broker credentials (it deletes the ServiceAccounts of its broker namespace, which
invalidates every token of them at once), deletes the bindings that let it read the other members' namespaces and
its entry in the member directory, and then its broker namespace with its records, EndpointSlices and Lease: the
other members withdraw its endpoints. It needs only the broker-info file, not the member. Only a new join brings
the member back. Run unjoin on the member, if it can be reached, to remove what the controller installed there.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := install.ReadBrokerInfo(file)
			if err != nil {
				return err
			}
			return install.Evict(cmd.Context(), info, args[0], wait, o.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "broker-info", "f", defaultBrokerInfo, "the `FILE` kubectl mcs broker init wrote")
	f.DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the broker namespace to go")
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
